//! The C API from C programs (gcc -fopenmp), against real memory servers.

use crate::common::programs::serial;
use crate::common::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{:?} failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        cmd,
        out.status
    );
    stdout
}

#[test]
fn openmp_integrity_8x_budget_embedded_server() {
    let _g = serial();
    let exe = build_c("integrity_omp");
    let out = run_ok(
        Command::new(exe)
            .arg("128")
            .env("FARMEM_LOCAL", "16M")
            .env("OMP_NUM_THREADS", "4"),
    );
    assert!(out.contains("mismatches=0"), "{out}");
}

#[test]
fn openmp_integrity_striped_over_two_servers() {
    let _g = serial();
    let (a, b) = (Serve::start("256M"), Serve::start("256M"));
    let exe = build_c("integrity_omp");
    let out = run_ok(
        Command::new(exe)
            .arg("96")
            .env("FARMEM_LOCAL", "12M")
            .env("FARMEM_SERVERS", format!("{},{}", a.addr, b.addr))
            .env("FARMEM_STRIPE", "16")
            .env("OMP_NUM_THREADS", "3"),
    );
    assert!(out.contains("mismatches=0"), "{out}");
}

#[test]
fn openmp_integrity_on_a_file_backend() {
    let _g = serial();
    let dir = std::env::temp_dir().join(format!("farmem-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = build_c("integrity_omp");
    let out = run_ok(
        Command::new(exe)
            .arg("64")
            .env("FARMEM_LOCAL", "8M")
            .env("FARMEM_FILE", dir.join("pages"))
            .env("OMP_NUM_THREADS", "2"),
    );
    assert!(out.contains("mismatches=0"), "{out}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn system_calls_on_non_resident_far_buffers() {
    let _g = serial();
    let exe = build_c("syscalls");
    let dir = std::env::temp_dir();
    let out = run_ok(Command::new(exe).arg(&dir).env("FARMEM_LOCAL", "8M"));
    assert!(out.contains(" 0 failed"), "{out}");
}

#[test]
fn fork_child_never_reads_wrong_data() {
    let _g = serial();
    let exe = build_c("fork_child");
    let out = Command::new(exe)
        .env("FARMEM_LOCAL", "4M")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("quiet child: exit 7"), "{stdout}");
    assert!(
        stderr.contains("fork() child) touched far memory"),
        "{stderr}"
    );
    assert!(
        !stdout.contains("child read"),
        "the child must not read far data: {stdout}"
    );
}

#[test]
fn killed_server_stops_the_client_with_a_message() {
    let _g = serial();
    let mut server = Serve::start("256M");
    let exe = build_c("server_gone");
    let mut child = Command::new(exe)
        .env("FARMEM_LOCAL", "4M")
        .env("FARMEM_SERVERS", &server.addr)
        .env("FARMEM_TIMEOUT_MS", "3000")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "READY");
    server.kill();
    child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        !stdout.contains("survived"),
        "the program went on without its data: {stdout}"
    );
    assert!(
        stderr.contains(&server.addr),
        "the message must name the server: {stderr}"
    );
    assert!(stderr.contains("stopping the program"), "{stderr}");
}

#[test]
fn unreachable_server_fails_at_first_allocation_with_a_clear_error() {
    let exe = build_c("server_gone");
    let out = Command::new(exe)
        .env("FARMEM_SERVERS", "127.0.0.1:1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr.contains("cannot connect to memory server 127.0.0.1:1"),
        "{stderr}"
    );
}

#[test]
fn bad_configuration_is_reported_not_crashed() {
    let exe = build_c("server_gone");
    for (k, v, want) in [
        ("FARMEM_LOCAL", "lots", "FARMEM_LOCAL"),
        ("FARMEM_SERVERS", "nohostport", "host:port"),
        ("FARMEM_PREFETCH", "1000", "FARMEM_PREFETCH"),
        ("FARMEM_LOCALL", "1G", "unknown setting"),
    ] {
        let out = Command::new(&exe)
            .env(k, v)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{k}={v}: {stderr}");
        assert!(stderr.contains(want), "{k}={v}: {stderr}");
    }
}

#[test]
fn demo_checks_its_result() {
    let _g = serial();
    let out = run_ok(farmem().args(["demo", "--random", "--size", "64M", "--updates", "20000"]));
    assert!(out.contains("result check: OK"), "{out}");
    assert!(out.contains("farmem stats"), "{out}");
}

#[test]
fn workloads_check_their_results() {
    let _g = serial();
    let mw = build_c_at("workloads/memwrite.c", "memwrite");
    let out = run_ok(
        Command::new(&mw)
            .args(["--size", "64", "--passes", "2", "--alloc", "farmem"])
            .env("FARMEM_LOCAL", "16M"),
    );
    assert!(
        out.contains("check=ok") && out.matches("kind=write").count() == 2,
        "{out}"
    );
    let bad = Command::new(&mw)
        .args(["--alloc", "nope"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let fl = build_c_at("workloads/faultlat.c", "faultlat");
    let out = run_ok(Command::new(&fl).arg("500").env("FARMEM_LOCAL", "16M"));
    assert!(
        out.contains("check=ok") && out.contains("far fetch, read"),
        "{out}"
    );
}

/// The embedded server is the `farmem` program in a child process: a C API
/// program whose libfarmem has no `farmem` beside it finds one on PATH, or
/// stops with a message saying what to do; never a silent failure.
#[test]
fn embedded_server_is_the_farmem_program_found_beside_or_on_path() {
    let _g = serial();
    let dir = std::env::temp_dir().join(format!("farmem-lonely-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(target_dir().join("libfarmem.so"), dir.join("libfarmem.so")).unwrap();
    let exe = dir.join("memwrite");
    let st = Command::new("gcc")
        .args(["-O2", "-fopenmp", "-I"])
        .arg(repo().join("include"))
        .arg(repo().join("workloads/memwrite.c"))
        .arg("-L")
        .arg(&dir)
        .args(["-lfarmem", "-lm"])
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap();
    assert!(st.success());
    let run = |path: String| {
        Command::new(&exe)
            .args(["--size", "32", "--passes", "1", "--alloc", "farmem"])
            .env("FARMEM_LOCAL", "8M")
            .env("PATH", path)
            // cargo's test environment points this at target/release, which
            // would load the libfarmem there (beside `farmem`) instead.
            .env_remove("LD_LIBRARY_PATH")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = run("/usr/bin:/bin".into());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("`farmem` program was not found") && stderr.contains("FARMEM_SERVERS"),
        "{stderr}"
    );
    let out = run(format!("{}:/usr/bin:/bin", target_dir().display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("check=ok"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn serve_checks_an_inherited_socket_and_its_parent() {
    for (args, want) in [
        (
            &["--listen-fd", "9"][..],
            "--listen-fd 9: Bad file descriptor",
        ),
        (&["--listen-fd", "0"][..], "--listen-fd 0: not a socket"),
        (
            &["--listen-fd=-3"][..],
            "--listen-fd -3 is not a descriptor",
        ),
        (&["--parent", "0"][..], "--parent 0 is not a parent"),
        // Process 1 may be a parent (a container's init), but not this one's.
        (&["--parent", "1"][..], "is not process 1"),
        (&["--parent", "999999"][..], "is not process 999999"),
    ] {
        let out = farmem()
            .args(["serve", "--capacity", "64M"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}

/// himeno checks itself with its perturbed coefficients (the default) and
/// with the published constants (`--classic`), on far memory at a budget
/// far below its 14 arrays.
#[test]
fn himeno_checks_out_with_both_coefficient_sets() {
    let _g = serial();
    let exe = build_c_at("workloads/himeno.c", "himeno");
    for (extra, want) in [
        (None, "coefficients=perturbed"),
        (Some("--classic"), "coefficients=classic"),
    ] {
        let mut c = farmem();
        c.args(["run", "--local", "4M", "--"])
            .arg(&exe)
            .args(["S", "5"]);
        if let Some(x) = extra {
            c.arg(x);
        }
        let out = run_ok(&mut c);
        assert!(out.contains("check=ok") && out.contains(want), "{out}");
    }
}
