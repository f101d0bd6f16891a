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

mod common;
use common::programs::{serial, TempDir};
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The ordinary user's uid and gid: `nobody` under root, else ourselves.
fn user() -> Option<(u32, u32)> {
    // SAFETY: geteuid takes nothing and cannot fail.
    (unsafe { libc::geteuid() } == 0).then_some((65534, 65534))
}

/// A world-readable directory with farmem's binaries and libraries, and a
/// home for the user inside it.
struct Kit {
    dir: TempDir,
}

impl Kit {
    fn new(what: &str) -> Kit {
        let dir = TempDir::new(what);
        let d = dir.path();
        for f in ["farmem", "libfarmem.so", "libfarmem_preload.so"] {
            std::fs::copy(target_dir().join(f), d.join(f)).unwrap();
        }
        let home = d.join("home");
        std::fs::create_dir(&home).unwrap();
        open_to_all(d, 0o755);
        if let Some((uid, gid)) = user() {
            std::os::unix::fs::chown(&home, Some(uid), Some(gid)).unwrap();
        }
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
        Kit { dir }
    }

    fn path(&self, f: &str) -> PathBuf {
        self.dir.path().join(f)
    }

    /// tests/programs/NAME.c, linked against this kit's libfarmem (`c_api`)
    /// or plain (for `farmem run`).
    fn build(&self, name: &str, c_api: bool) -> PathBuf {
        let exe = self.path(name);
        let mut c = Command::new("gcc");
        c.args([
            "-O2", "-Wall", "-Wextra", "-Werror", "-fopenmp", "-pthread", "-I",
        ])
        .arg(repo().join("include"))
        .arg(repo().join(format!("tests/programs/{name}.c")));
        if c_api {
            c.arg("-L")
                .arg(self.dir.path())
                .args(["-lfarmem", "-lm"])
                .arg(format!("-Wl,-rpath,{}", self.dir.path().display()));
        }
        let st = c.arg("-o").arg(&exe).status().expect("gcc runs");
        assert!(st.success(), "compiling {name}.c failed");
        open_to_all(&exe, 0o755);
        exe
    }

    /// `program` as the ordinary user, in this kit's home, with a clean
    /// environment but for `env`.
    fn command(&self, program: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut c = match user() {
            Some((uid, gid)) => {
                let mut c = Command::new("setpriv");
                c.args([
                    &format!("--reuid={uid}"),
                    &format!("--regid={gid}"),
                    "--clear-groups",
                    "--",
                ])
                .arg(program);
                c
            }
            None => Command::new(program),
        };
        c.args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.path("home"))
            .envs(env.iter().copied())
            .current_dir(self.path("home"));
        c
    }

    fn farmem(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        self.command(&self.path("farmem"), args, env)
    }
}

fn open_to_all(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn run(mut c: Command) -> Output {
    c.output().expect("the command starts")
}

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
