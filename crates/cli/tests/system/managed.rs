//! Managed runtimes on far memory, and memory that stays local outside it.
//!
//! - A real JVM (the JDK scripts/setup.sh installs) over a 1 GiB heap with
//!   400 MiB live at a 256M budget, under ParallelGC and G1: the output
//!   equals the native run's, pages were fetched, and the JVM's peak
//!   resident set (VmHWM, which it prints itself) stays within the budget
//!   plus 128 MiB, the margin `farmem run` allows before it warns
//!   (`outside::margin`): the JVM's code, metadata, GC structures and
//!   libraries (about 40-55 MiB measured here). Socket transport: UCX's
//!   shared-memory transports map the local server's store into the
//!   program, which VmHWM would count.
//! - SerialGC with -XX:+AlwaysPreTouch and -XX:+UseTransparentHugePages,
//!   and Shenandoah: right output, far pages.
//! - ZGC is refused with one line, also when a script starts the JVM.
//! - Node.js: a 512 MiB Float64Array at 256M.
//! - tests/programs/reserve_commit.c: the JVM's address-space calls one by
//!   one (reserve, commit, guard page and its SIGSEGV, uncommit, file and
//!   code mapped inside, protections with content kept), on both
//!   transports.
//! - tests/programs/local_bypass.c: a fixed mapping and small pieces past
//!   the budget are named in one warning; a program within its budget gets
//!   none; a static binary is refused before it starts.

use crate::common::programs::*;
use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(240);

fn have(test: &str, program: &str, package: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        skip(
            test,
            &format!("{program} is not installed (Debian package {package})"),
        );
    }
    found
}

/// tests/programs/BigArray.java compiled into a directory of its own.
fn big_array(dir: &Path) -> PathBuf {
    let out = dir.join("classes");
    let st = Command::new("javac")
        .arg("-d")
        .arg(&out)
        .arg(repo().join("tests/programs/BigArray.java"))
        .status()
        .expect("javac runs");
    assert!(st.success(), "javac failed");
    out
}

fn java_args<'a>(classes: &'a str, opts: &[&'a str], mib: &'a str, ops: &'a str) -> Vec<&'a str> {
    let mut v = vec!["java"];
    v.extend_from_slice(opts);
    v.extend_from_slice(&["-cp", classes, "BigArray", mib, ops]);
    v
}

fn vm_hwm(stderr: &str) -> u64 {
    let l = stderr
        .lines()
        .find(|l| l.starts_with("bigarray VmHWM:"))
        .unwrap_or_else(|| panic!("no VmHWM line from the program:\n{stderr}"));
    l.split_whitespace().nth(2).unwrap().parse::<u64>().unwrap() << 10
}

fn native(dir: &Path, name: &str, cmd: &[&str]) -> Finished {
    let mut c = Command::new(cmd[0]);
    c.args(&cmd[1..]);
    let f = Proc::spawn(name, c, dir).finish(LIMIT);
    assert!(f.ok(), "{name} natively:\n{}", f.report);
    f
}

fn far(dir: &Path, name: &str, local: &str, cmd: &[&str], env: &[(&str, &str)]) -> Finished {
    let mut c = farmem_run(local, cmd);
    c.envs(env.iter().copied());
    let f = Proc::spawn(name, c, dir).finish(LIMIT);
    assert!(f.ok(), "{name} under farmem run:\n{}", f.report);
    f
}

/// `cmd` natively, then under `farmem run` at `local` (with `env`): the
/// same output, and far memory used. Both runs are returned.
fn native_and_far(
    dir: &Path,
    name: &str,
    local: &str,
    cmd: &[&str],
    env: &[(&str, &str)],
) -> (Finished, Finished) {
    let n = native(dir, &format!("native-{name}"), cmd);
    let f = far(dir, &format!("far-{name}"), local, cmd, env);
    assert_eq!(f.stdout, n.stdout, "{name}: output differs\n{}", f.report);
    assert_far_memory_used(name, &f.stderr, &f.report);
    (n, f)
}

/// A JDK, the heavy-test lock and BigArray compiled, or None (skipped).
fn jvm_setup(
    test: &str,
    what: &str,
) -> Option<(std::sync::MutexGuard<'static, ()>, TempDir, String)> {
    if !have(test, "javac", "default-jdk-headless") {
        return None;
    }
    let g = serial();
    let dir = TempDir::new(what);
    let classes = big_array(dir.path()).to_str().unwrap().to_string();
    Some((g, dir, classes))
}

#[test]
fn a_java_heap_goes_far_under_parallel_gc_and_g1_within_its_budget() {
    let test = "a_java_heap_goes_far_under_parallel_gc_and_g1_within_its_budget";
    let Some((_g, dir, classes)) = jvm_setup(test, "jvm") else {
        return;
    };
    for gc in ["-XX:+UseParallelGC", "-XX:+UseG1GC"] {
        let cmd = java_args(&classes, &["-Xms1g", "-Xmx1g", gc], "400", "1000000");
        let (n, f) = native_and_far(
            dir.path(),
            gc,
            "256M",
            &cmd,
            &[("FARMEM_TRANSPORT", "socket")],
        );
        assert_no_farmem_error(gc, &f.stderr, &f.report);
        let hwm = vm_hwm(&f.stderr);
        let allowed = (256 << 20) + farmem_launch::outside::margin(256 << 20);
        eprintln!(
            "{gc}: VmHWM {} MiB under farmem (allowed {} MiB), {} MiB natively",
            hwm >> 20,
            allowed >> 20,
            vm_hwm(&n.stderr) >> 20
        );
        assert!(
            hwm <= allowed,
            "{gc}: the JVM kept {} MiB resident, more than the budget and margin ({} MiB)\n{}",
            hwm >> 20,
            allowed >> 20,
            f.report
        );
        assert!(
            f.stderr.contains("local outside far memory (peak)"),
            "{}",
            f.report
        );
    }
}

#[test]
fn serial_gc_with_pretouch_and_huge_pages_and_shenandoah_run_far() {
    let test = "serial_gc_with_pretouch_and_huge_pages_and_shenandoah_run_far";
    let Some((_g, dir, classes)) = jvm_setup(test, "jvm-flags") else {
        return;
    };
    let runs: [&[&str]; 2] = [
        &[
            "-Xms512m",
            "-Xmx512m",
            "-XX:+UseSerialGC",
            "-XX:+AlwaysPreTouch",
            "-XX:+UseTransparentHugePages",
        ],
        &["-Xms512m", "-Xmx512m", "-XX:+UseShenandoahGC"],
    ];
    for (i, opts) in runs.into_iter().enumerate() {
        let cmd = java_args(&classes, opts, "200", "300000");
        let (_, f) = native_and_far(dir.path(), &format!("flags{i}"), "128M", &cmd, &[]);
        assert_no_farmem_error(&format!("{opts:?}"), &f.stderr, &f.report);
    }
}

#[test]
fn zgc_is_refused_with_one_line_also_behind_a_script() {
    let test = "zgc_is_refused_with_one_line_also_behind_a_script";
    if !have(test, "java", "default-jdk-headless") {
        return;
    }
    let _g = serial();
    let dir = TempDir::new("zgc");
    let f = Proc::spawn(
        "zgc",
        farmem_run("256M", &["java", "-XX:+UseZGC", "-version"]),
        dir.path(),
    )
    .finish(LIMIT);
    assert!(!f.ok(), "{}", f.report);
    let lines: Vec<&str> = f.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", f.report);
    assert!(lines[0].contains("ZGC") && lines[0].contains("-XX:+UseParallelGC"));
    // Started by a script, with the flag in the JVM's own variable: the
    // shim in the JVM refuses it before its heap exists.
    let mut c = farmem_run("256M", &["sh", "-c", "java -version"]);
    c.env("JAVA_TOOL_OPTIONS", "-XX:+UseZGC");
    let f = Proc::spawn("zgc-script", c, dir.path()).finish(LIMIT);
    assert!(!f.ok(), "{}", f.report);
    assert!(
        f.stderr
            .lines()
            .any(|l| l.starts_with("farmem: ") && l.contains("ZGC")),
        "{}",
        f.report
    );
}

#[test]
fn node_typed_array_of_512m_at_256m_is_right() {
    let test = "node_typed_array_of_512m_at_256m_is_right";
    if !have(test, "node", "nodejs") {
        return;
    }
    let _g = serial();
    let dir = TempDir::new("node");
    let script = "const n = 64 << 20; const a = new Float64Array(n);\
        for (let i = 0; i < n; i++) a[i] = i * 0.5;\
        let s = 0; for (let i = 0; i < n; i += 7) s += a[i];\
        let bad = 0; for (let i = 0; i < n; i += 4099) bad += a[i] !== i * 0.5;\
        console.log(`sum ${s} bad ${bad}`);";
    let cmd = ["node", "-e", script];
    let (_, f) = native_and_far(dir.path(), "node", "256M", &cmd, &[]);
    assert!(f.stdout.contains("bad 0"), "{}", f.report);
}

#[test]
fn the_jvm_address_space_calls_work_on_far_memory_on_both_transports() {
    let exe = build_plain(
        "gcc",
        "tests/programs/reserve_commit.c",
        "reserve_commit",
        &["-Wextra"],
    );
    let _g = serial();
    let dir = TempDir::new("reserve");
    let exe = exe.to_str().unwrap();
    for transport in ["memfd", "socket"] {
        let f = far(
            dir.path(),
            &format!("reserve-{transport}"),
            "128M",
            &[exe, "512"],
            &[("FARMEM_TRANSPORT", transport)],
        );
        assert!(f.stdout.ends_with("all ok\n"), "{transport}:\n{}", f.report);
        assert_far_memory_used(transport, &f.stderr, &f.report);
        assert_no_farmem_error(transport, &f.stderr, &f.report);
    }
}

#[test]
fn memory_past_the_budget_outside_far_memory_is_named_once() {
    let exe = build_plain(
        "gcc",
        "tests/programs/local_bypass.c",
        "local_bypass",
        &["-Wextra"],
    );
    let exe = exe.to_str().unwrap();
    let _g = serial();
    let dir = TempDir::new("bypass");
    let warnings = |f: &Finished| -> Vec<String> {
        f.stderr
            .lines()
            .filter(|l| l.contains("of local memory outside far memory"))
            .map(str::to_string)
            .collect()
    };
    // The watch paces itself (its looks come at least 50 times a look's
    // time apart: 1.7 s on a loaded CI host), so the program holds its
    // memory long enough for two looks to land on it.
    let hold = [("HOLD_MS", "5000")];
    // A fixed mapping of its own: named by address.
    let f = far(dir.path(), "fixed", "256M", &[exe, "fixed", "512"], &hold);
    let w = warnings(&f);
    assert_eq!(w.len(), 1, "{}", f.report);
    assert!(
        w[0].contains("512M at 0x300000000000") && w[0].contains("--threshold"),
        "{}",
        w[0]
    );
    // Small pieces: the C library's heap.
    let f = far(dir.path(), "small", "256M", &[exe, "small", "512"], &hold);
    let w = warnings(&f);
    assert_eq!(w.len(), 1, "{}", f.report);
    assert!(w[0].contains("[heap]"), "{}", w[0]);
    // Within its budget: far memory, no warning, and the peak outside it
    // is reported.
    let f = far(dir.path(), "far", "256M", &[exe, "far", "512"], &[]);
    assert!(warnings(&f).is_empty(), "{}", f.report);
    let s = stats(&f.stderr).unwrap_or_else(|| panic!("no --stats table\n{}", f.report));
    assert!(s.evicted > 0, "its pages never left:\n{}", f.report);
    assert!(
        f.stderr.contains("local outside far memory (peak)"),
        "{}",
        f.report
    );
}

#[test]
fn a_static_binary_is_refused_before_it_starts() {
    let dir = TempDir::new("static");
    let src = dir.path().join("hello.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\nint main(void){puts(\"ran\");return 0;}\n",
    )
    .unwrap();
    let exe = dir.path().join("hello-static");
    let st = Command::new("gcc")
        .arg("-static")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap();
    assert!(st.success(), "gcc -static failed (libc6-dev has libc.a)");
    let f = Proc::spawn(
        "static",
        farmem_run("64M", &[exe.to_str().unwrap()]),
        dir.path(),
    )
    .finish(LIMIT);
    assert!(!f.ok(), "{}", f.report);
    assert!(!f.stdout.contains("ran"), "it ran:\n{}", f.report);
    assert!(
        f.stderr.contains("statically linked") && f.stderr.contains("LD_PRELOAD"),
        "{}",
        f.report
    );
}
