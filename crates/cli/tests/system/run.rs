//! `farmem run -- CMD`: unmodified C, C++, Fortran and Python programs with
//! their large allocations in far memory, through the preloaded shim.

use crate::common::programs::serial;
use crate::common::*;
use std::os::unix::process::ExitStatusExt;
use std::process::Output;

fn run(args: &[&str], cmd: &[&str]) -> Output {
    let mut c = farmem();
    c.arg("run").args(args).arg("--").args(cmd);
    c.output().unwrap()
}

fn ok(o: &Output) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{}\nstdout:\n{out}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

#[test]
fn done_means_program_is_right_to_the_byte() {
    let _g = serial();
    let exe = build_plain(
        "gcc",
        "tests/programs/run_done.c",
        "run_done",
        &["-Wextra", "-fopenmp"],
    );
    let data = std::env::temp_dir().join(format!("farmem-run-done-{}.dat", std::process::id()));
    let bytes: Vec<u8> = (0..8usize << 20)
        .map(|i| u8::try_from((i * 7 + 3) & 0xff).unwrap())
        .collect();
    std::fs::write(&data, bytes).unwrap();
    let o = run(
        &["--local", "64M", "--stats"],
        &[exe.to_str().unwrap(), data.to_str().unwrap()],
    );
    let out = ok(&o);
    assert!(out.contains("0 failed"), "{out}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("farmem stats") && err.contains("written back"),
        "--stats prints the table: {err}"
    );
    std::fs::remove_file(data).ok();
}

#[test]
fn every_allocation_entry_point() {
    let _g = serial();
    let exe = build_plain(
        "gcc",
        "tests/programs/alloc_family.c",
        "alloc_family",
        &["-Wextra"],
    );
    let out = ok(&run(&["--local", "16M"], &[exe.to_str().unwrap()]));
    assert!(out.contains("0 failed"), "{out}");
}

#[test]
fn system_calls_into_far_malloc_buffers() {
    let _g = serial();
    let exe = build_plain(
        "gcc",
        "tests/programs/syscalls.c",
        "syscalls_shim",
        &["-Wextra", "-DUNDER_SHIM"],
    );
    let out = ok(&run(
        &["--local", "8M"],
        &[
            exe.to_str().unwrap(),
            std::env::temp_dir().to_str().unwrap(),
        ],
    ));
    assert!(out.contains(" 0 failed"), "{out}");
}

#[test]
fn cxx_new_and_vector() {
    let _g = serial();
    let exe = build_plain("g++", "tests/programs/cxx_new.cc", "cxx_new", &["-Wextra"]);
    let out = ok(&run(&["--local", "32M"], &[exe.to_str().unwrap()]));
    assert!(out.contains("sums ok"), "{out}");
}

#[test]
fn fortran_allocate() {
    let _g = serial();
    let exe = build_plain(
        "gfortran",
        "tests/programs/fortran_alloc.f90",
        "fortran_alloc",
        &[],
    );
    let out = ok(&run(&["--local", "32M"], &[exe.to_str().unwrap()]));
    assert!(out.contains("fortran allocate ok"), "{out}");
}

#[test]
fn python_numpy_2g_on_256m() {
    let _g = serial();
    let script = "import ctypes, numpy as np\n\
                  a = np.arange(2**28, dtype=np.float64)\n\
                  far = ctypes.CDLL(None).fm_is_far(ctypes.c_void_p(a.ctypes.data))\n\
                  s = a.sum()\n\
                  print('far', far, 'ok' if far == 1 and s == float(2**28) * (2**28 - 1) / 2 else 'FAILED')\n";
    let out = ok(&run(&["--local", "256M"], &["python3", "-c", script]));
    assert!(out.contains("far 1 ok"), "{out}");
}

#[test]
fn threads_system_spawn_dlopen_atexit_exec() {
    let _g = serial();
    let exe = build_plain(
        "gcc",
        "tests/programs/run_misc.c",
        "run_misc",
        &["-Wextra", "-pthread"],
    );
    let out = ok(&run(&["--local", "16M"], &[exe.to_str().unwrap()]));
    assert!(
        !out.contains("FAILED") && out.contains("atexit check ok"),
        "{out}"
    );
    let mut c = farmem();
    c.args(["run", "--local", "16M", "--", exe.to_str().unwrap()])
        .env("RUN_MISC_EXEC", "1");
    let o = c.output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(5),
        "exec'd program's exit code passes through"
    );
}

#[test]
fn exit_status_and_signals_pass_through() {
    let _g = serial();
    assert_eq!(run(&[], &["sh", "-c", "exit 7"]).status.code(), Some(7));
    assert_eq!(
        run(&[], &["sh", "-c", "kill -TERM $$"]).status.signal(),
        Some(libc::SIGTERM)
    );
    assert_eq!(run(&[], &["true"]).status.code(), Some(0));
}

#[test]
fn bad_configuration_fails_before_the_program_starts() {
    let marker = std::env::temp_dir().join(format!("farmem-run-marker-{}", std::process::id()));
    let m = marker.to_str().unwrap();
    for (args, want) in [
        (vec!["--local", "lots"], "FARMEM_LOCAL"),
        (vec!["--local", "100T"], "physical memory"),
        (vec!["--threshold", "0"], "FARMEM_THRESHOLD"),
        (
            vec!["--servers", "127.0.0.1:1"],
            "cannot connect to memory server 127.0.0.1:1",
        ),
        (vec!["--servers", "nonsense"], "host:port"),
    ] {
        let o = run(&args, &["touch", m]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one clear line: {err}");
        assert!(!marker.exists(), "{args:?}: the program must not start");
    }
    let o = run(&[], &["/nonexistent/program"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot run /nonexistent/program"));
}

/// `farmem config` shows what the runtime will use, refuses what it would
/// refuse, and prints the documented table with --markdown.
#[test]
fn config_shows_values_and_refuses_bad_ones() {
    let o = farmem()
        .arg("config")
        .env("FARMEM_LOCAL", "300M")
        .env("FARMEM_SERVERS", "h1:7070")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    let line = |k: &str| {
        out.lines()
            .find(|l| l.starts_with(k))
            .unwrap_or("")
            .to_string()
    };
    assert!(
        line("FARMEM_LOCAL ").contains("300M") && line("FARMEM_LOCAL ").contains("(environment)")
    );
    assert!(line("FARMEM_SERVERS ").contains("h1:7070"));
    assert!(line("FARMEM_PREFETCH ").contains("(default)"));
    let o = farmem()
        .arg("config")
        .env("FARMEM_PREFETCH", "1000")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("FARMEM_PREFETCH"),
        "{err}"
    );
    let o = farmem().args(["config", "--markdown"]).output().unwrap();
    let md = String::from_utf8_lossy(&o.stdout);
    let doc = std::fs::read_to_string(repo().join("docs/configuration.md")).unwrap();
    assert!(md.starts_with("| variable |") && doc.contains(md.as_ref()));
}

/// GNU sort (coreutils, built with gnulib's unlocked stdio) reads its input
/// with `fread_unlocked` into a buffer much larger than the budget: every
/// line comes out sorted, as the same sort gives all-local.
#[test]
fn gnu_sort_with_a_far_buffer_gives_the_same_output() {
    let _g = serial();
    let dir = std::env::temp_dir().join(format!("farmem-sort-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.txt");
    // 2M lines in a scrambled order (about 16 MB).
    let mut text = String::new();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..2_000_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        text.push_str(&format!("{:x}\n", x % 100_000_000));
    }
    std::fs::write(&input, text).unwrap();
    let (local, far) = (dir.join("local.txt"), dir.join("far.txt"));
    let sort = |out: &std::path::Path| {
        vec![
            "sort".to_string(),
            "-S".into(),
            "64M".into(),
            "--parallel=2".into(),
            input.display().to_string(),
            "-o".into(),
            out.display().to_string(),
        ]
    };
    let l = sort(&local);
    let st = std::process::Command::new(&l[0])
        .args(&l[1..])
        .status()
        .unwrap();
    assert!(st.success());
    let f = sort(&far);
    let args: Vec<&str> = f.iter().map(String::as_str).collect();
    ok(&run(&["--local", "8M", "--stats"], &args));
    assert!(
        std::fs::read(&local).unwrap() == std::fs::read(&far).unwrap(),
        "sort under farmem run differs from sort all-local"
    );
    std::fs::remove_dir_all(&dir).ok();
}
