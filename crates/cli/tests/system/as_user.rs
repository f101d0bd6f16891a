//! farmem as an ordinary user, with the machine's stock settings
//! (`vm.unprivileged_userfaultfd = 0`, `/dev/userfaultfd` root's only): the
//! integrity program at 8× through the C API, every kernel access to far
//! memory under `farmem run`, a JVM heap, a TCP server with its secret,
//! `farmem stat` and `farmem doctor`, all as that user. Run as root (as CI
//! is), each program runs as `nobody` through `setpriv`; run as anyone else,
//! as that user.
//!
//! The user needs to read and run farmem's files, and a checkout or target
//! directory may be private to root: the binaries, the libraries and the
//! test programs are copied into a directory of their own, readable by all,
//! and linked against the libfarmem there.

use crate::common::kit::{open_to_all, run, user, Kit};
use crate::common::programs::serial;
use crate::common::*;
use std::process::Command;

/// This is the situation the tests are about: the user may not open a
/// userfaultfd for kernel-mode faults. Where the machine allows more (the
/// sysctl is 1), the tests still run, and say so.
fn note_sysctl() {
    let v = std::fs::read_to_string("/proc/sys/vm/unprivileged_userfaultfd").unwrap_or_default();
    if v.trim() != "0" {
        eprintln!(
            "note: vm.unprivileged_userfaultfd is {:?} here, not the stock 0",
            v.trim()
        );
    }
}

#[test]
fn integrity_at_8x_through_the_c_api() {
    note_sysctl();
    let _g = serial();
    let kit = Kit::new("user-capi");
    let exe = kit.build("integrity_omp", true);
    let o = run(kit.command(
        &exe,
        &["128"],
        &[("FARMEM_LOCAL", "16M"), ("OMP_NUM_THREADS", "2")],
    ));
    assert!(o.status.success(), "{}", output_text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("mismatches=0"),
        "{}",
        output_text(&o)
    );
}

/// The calls that make the kernel touch far memory (read, write, sendmsg,
/// pipes, stat, poll, ...), each on evicted pages: with a userfaultfd for
/// user-mode faults only, the kernel's own accesses are served the same way.
#[test]
fn kernel_accesses_to_far_memory_under_farmem_run() {
    let _g = serial();
    let kit = Kit::new("user-ka");
    let exe = kit.build("kernel_access", false);
    let list = run(kit.command(&exe, &["--list"], &[]));
    assert!(list.status.success(), "{}", output_text(&list));
    let mut args = vec![
        "run".to_string(),
        "--local".into(),
        "8M".into(),
        "--".into(),
        exe.to_str().unwrap().into(),
        "-d".into(),
        kit.path("home").to_str().unwrap().into(),
        "-n".into(),
        "2000".into(),
    ];
    args.extend(
        String::from_utf8_lossy(&list.stdout)
            .lines()
            .filter_map(|l| l.rsplit_once(' '))
            .filter(|(_, k)| *k == "required")
            .map(|(n, _)| n.to_string()),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = run(kit.farmem(&args, &[]));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains(" 0 failed"),
        "{}",
        output_text(&o)
    );
}

/// A JVM's heap in far memory, within its budget, as the user.
#[test]
fn a_java_heap_goes_far() {
    let test = "a_java_heap_goes_far";
    if !programs::installed(test, &["/usr/bin/javac", "/usr/bin/java"]) {
        return;
    }
    let _g = serial();
    let kit = Kit::new("user-jvm");
    let classes = kit.path("classes");
    let st = Command::new("javac")
        .arg("-d")
        .arg(&classes)
        .arg(repo().join("tests/programs/BigArray.java"))
        .status()
        .expect("javac runs");
    assert!(st.success());
    open_to_all(&classes, 0o755);
    for f in std::fs::read_dir(&classes).unwrap() {
        open_to_all(&f.unwrap().path(), 0o644);
    }
    let o = run(kit.farmem(
        &[
            "run",
            "--local",
            "256M",
            "--stats",
            "--",
            "java",
            "-Xms1g",
            "-Xmx1g",
            "-XX:+UseParallelGC",
            "-XX:-UsePerfData",
            "-cp",
            classes.to_str().unwrap(),
            "BigArray",
            "400",
            "200000",
        ],
        &[("FARMEM_TRANSPORT", "socket")],
    ));
    assert!(o.status.success(), "{}", output_text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    let s = programs::stats(&err).unwrap_or_else(|| panic!("no statistics\n{}", output_text(&o)));
    assert!(
        s.fetched > 0 && s.evicted > 0,
        "nothing went far\n{}",
        output_text(&o)
    );
}

/// A TCP server and a program, both the user's, with the user's own secret;
/// `farmem stat` (the user's programs only) and `farmem doctor` as well.
#[test]
fn a_tcp_server_stat_and_doctor() {
    let _g = serial();
    let kit = Kit::new("user-tcp");
    let secret = kit.path("home").join("secret");
    let secret = secret.to_str().unwrap();
    let o = run(kit.farmem(&["secret", "init", "--path", secret], &[]));
    assert!(o.status.success(), "{}", output_text(&o));
    let mut server = kit
        .farmem(
            &[
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--capacity",
                "256M",
                "--secret-file",
                secret,
            ],
            &[],
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let addr = banner_addr(&first_line(&mut server));
    let exe = kit.build("integrity_omp", true);
    let prog = kit
        .command(
            &exe,
            &["96"],
            &[
                ("FARMEM_LOCAL", "16M"),
                ("FARMEM_SERVERS", &addr),
                ("FARMEM_SECRET_FILE", secret),
                ("OMP_NUM_THREADS", "2"),
            ],
        )
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // While it runs, the user's `farmem stat` sees it.
    let mut seen = String::new();
    for _ in 0..50 {
        let o = run(kit.farmem(&["stat", "--count", "1", "--json"], &[]));
        seen = output_text(&o);
        if o.status.success() && String::from_utf8_lossy(&o.stdout).contains("\"pid\"") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let out = prog.wait_with_output().unwrap();
    server.kill().ok();
    server.wait().ok();
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("mismatches=0"));
    assert!(
        seen.contains("\"pid\""),
        "farmem stat never saw the program:\n{seen}"
    );
    let o = run(kit.farmem(&["doctor"], &[]));
    let t = output_text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("userfaultfd"), "{t}");
    if user().is_some() {
        // nobody on a stock kernel: the user-mode kind, and why that is enough.
        let sysctl =
            std::fs::read_to_string("/proc/sys/vm/unprivileged_userfaultfd").unwrap_or_default();
        if sysctl.trim() == "0" {
            assert!(t.contains("user-mode faults only"), "{t}");
        }
    }
}

/// `farmem probe` and `farmem bench` as the user: they run, and a baseline
/// that needs root is said once per system, naming root, while farmem's own
/// cells are measured.
#[test]
fn probe_and_bench_say_once_what_needs_root() {
    let _g = serial();
    let kit = Kit::new("user-bench");
    let o = run(kit.farmem(&["probe", "--quick"], &[]));
    assert!(o.status.success(), "{}", output_text(&o));
    // bench runs its built-in workloads from beside the binary.
    let wl = kit.path("workloads");
    std::fs::create_dir(&wl).unwrap();
    std::fs::copy(target_dir().join("workloads/memwrite"), wl.join("memwrite")).unwrap();
    open_to_all(&wl, 0o755);
    let o = run(kit.farmem(&["bench", "memwrite", "--quick"], &[]));
    let t = output_text(&o);
    assert!(o.status.success(), "{t}");
    let farmem_row = t
        .lines()
        .find(|l| l.starts_with("farmem "))
        .unwrap_or_else(|| panic!("no farmem row\n{t}"));
    assert!(farmem_row.contains("MB/s"), "{t}");
    if user().is_some() {
        for system in ["swap", "zram"] {
            let said: Vec<&str> = t
                .lines()
                .filter(|l| l.starts_with(&format!("{system} at ")) && l.contains("unavailable:"))
                .collect();
            assert_eq!(said.len(), 1, "{system}: said {} times\n{t}", said.len());
            assert!(said[0].contains("needs root"), "{t}");
        }
    }
}
