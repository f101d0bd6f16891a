//! farmem in containers, started the way their users start them:
//! - rootless Podman with its default seccomp profile, which refuses
//!   userfaultfd: the program stops with one line that names the filter and
//!   the way out;
//! - the same with the profile that `contrib/containers/seccomp-allow-farmem`
//!   derives from the default one: the OpenMP integrity program at 8× is
//!   ALL OK, started by `farmem run` and on its own (the C API);
//! - Apptainer's model, an ordinary user in a user namespace of its own with
//!   no seccomp filter, played by bubblewrap: ALL OK.
//!
//! Every container runs as `nobody` (through `setpriv`) when the tests run
//! as root, as CI does. The container's root file system is the host's
//! `/usr` and `/etc`, read-only, and the kit of farmem's files at the same
//! path as outside, so that no image has to be pulled.

use crate::common::kit::{open_to_all, run, user, Kit};
use crate::common::programs::{installed, serial, TempDir};
use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const PROFILE_TOOL: &str = "contrib/containers/seccomp-allow-farmem";
const PODMAN_PROFILE: &str = "/usr/share/containers/seccomp.json";

/// A root file system of the host's `/usr` and `/etc` (bind-mounted by the
/// container engine) with mount points for the kit, owned by the user.
fn root_fs(kit: &Kit) -> TempDir {
    let root = TempDir::new("ct-root");
    let r = root.path();
    for d in ["usr", "etc", "tmp", "proc", "dev", "sys", "run"] {
        std::fs::create_dir(r.join(d)).unwrap();
    }
    // Debian's merged /usr.
    for l in ["bin", "lib", "lib64", "sbin"] {
        std::os::unix::fs::symlink(format!("usr/{l}"), r.join(l)).unwrap();
    }
    let inside = r.join(kit.path("").strip_prefix("/").unwrap());
    std::fs::create_dir_all(&inside).unwrap();
    open_to_all(r, 0o755);
    // The user's own, as an image unpacked by rootless Podman is: the
    // engine writes /etc/mtab and /run/.containerenv into it.
    if let Some((uid, gid)) = user() {
        chown_tree(r, uid, gid);
    }
    root
}

fn chown_tree(p: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), Some(gid)).unwrap();
    if p.is_dir() && !p.is_symlink() {
        for e in std::fs::read_dir(p).unwrap() {
            chown_tree(&e.unwrap().path(), uid, gid);
        }
    }
}

/// crun refuses cgroup v1 and v2 mixed ("hybrid") when the v2 hierarchy has
/// controllers. On this project's VM only `hugetlb` is left there, unused;
/// binding it (and any other) to a v1 hierarchy of its own leaves v2 empty,
/// as crun needs. Needs root; changes nothing on a pure v1 or v2 machine.
fn let_crun_take_hybrid_cgroups() {
    let unified = Path::new("/sys/fs/cgroup/unified/cgroup.controllers");
    let Ok(list) = std::fs::read_to_string(unified) else {
        return;
    };
    for c in list.split_whitespace() {
        let dir = Path::new("/sys/fs/cgroup").join(c);
        std::fs::create_dir_all(&dir).ok();
        let st = Command::new("mount")
            .args(["-t", "cgroup", "-o", c, "cgroup"])
            .arg(&dir)
            .status()
            .expect("mount runs");
        assert!(
            st.success(),
            "cannot bind the {c} controller to cgroup v1 (crun needs v2 empty)"
        );
    }
}

/// Rootless Podman as the kit's user, its state in the kit's home.
struct Podman<'k> {
    kit: &'k Kit,
    root: TempDir,
    runtime_dir: PathBuf,
}

impl<'k> Podman<'k> {
    fn new(kit: &'k Kit) -> Podman<'k> {
        let_crun_take_hybrid_cgroups();
        let runtime_dir = kit.path("home").join("run");
        let p = Podman {
            kit,
            root: root_fs(kit),
            runtime_dir,
        };
        let o = run(p.command(&[], &["/bin/true"]));
        assert!(
            o.status.success(),
            "podman cannot start a container here\n{}",
            output_text(&o)
        );
        p
    }

    /// `podman run` of `argv` with the `extra` options (a seccomp profile).
    fn command(&self, extra: &[&str], argv: &[&str]) -> Command {
        let kit_dir = self.kit.path("");
        let kit_dir = kit_dir.to_str().unwrap().trim_end_matches('/');
        let bind = format!("{kit_dir}:{kit_dir}:ro");
        let mut args = vec![
            "run",
            "--rm",
            "--network",
            "none",
            "-v",
            "/usr:/usr:ro",
            "-v",
            "/etc:/etc:ro",
            "-v",
            &bind,
            "-e",
            "OMP_NUM_THREADS=2",
        ];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--rootfs", self.root.path().to_str().unwrap()]);
        args.extend_from_slice(argv);
        let rt = self.runtime_dir.to_str().unwrap().to_string();
        let mut c = self.kit.command(Path::new("/usr/bin/podman"), &args, &[]);
        c.env("XDG_RUNTIME_DIR", rt);
        c
    }
}

impl Drop for Podman<'_> {
    /// Rootless Podman leaves a pause process holding its user namespace;
    /// stop the one this test's runtime directory started.
    fn drop(&mut self) {
        let want = format!("XDG_RUNTIME_DIR={}", self.runtime_dir.display());
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let env = std::fs::read(e.path().join("environ")).unwrap_or_default();
            let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            if comm.trim() == "catatonit" && env.split(|b| *b == 0).any(|v| v == want.as_bytes()) {
                // SAFETY: kill takes a pid and a signal.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// `contrib/containers/seccomp-allow-farmem ARGS`, its output written to `out`.
fn allow_farmem(args: &[&str], out: &Path) -> Output {
    let o = Command::new(repo().join(PROFILE_TOOL))
        .args(args)
        .output()
        .expect("the profile tool runs");
    std::fs::write(out, &o.stdout).unwrap();
    o
}

fn all_ok(o: &Output) -> bool {
    o.status.success() && String::from_utf8_lossy(&o.stdout).contains("mismatches=0")
}

#[test]
fn rootless_podman_refuses_then_runs_with_the_amended_profile() {
    let test = "rootless_podman_refuses_then_runs_with_the_amended_profile";
    if !installed(
        test,
        &["/usr/bin/podman", PODMAN_PROFILE, "/usr/bin/python3"],
    ) {
        return;
    }
    let _g = serial();
    let kit = Kit::new("ct-podman");
    let prog = kit.build("integrity_omp", true);
    let podman = Podman::new(&kit);
    let farmem = kit.path("farmem");
    let under_run = [
        farmem.to_str().unwrap(),
        "run",
        "--local",
        "16M",
        "--",
        prog.to_str().unwrap(),
        "128",
    ];

    // The default profile: refused, and the line says why and what to do.
    let o = run(podman.command(&[], &under_run));
    let t = output_text(&o);
    assert!(
        !o.status.success(),
        "ran under a profile that refuses userfaultfd?\n{t}"
    );
    for want in ["seccomp filter", "userfaultfd", "seccomp-allow-farmem"] {
        assert!(t.contains(want), "the refusal does not say {want:?}:\n{t}");
    }
    let o = run(podman.command(&[], &[farmem.to_str().unwrap(), "doctor"]));
    let t = output_text(&o);
    assert!(!o.status.success() && t.contains("seccomp filter"), "{t}");

    // The amended profile, kept where the user can read it.
    let profile = kit.path("home").join("farmem-seccomp.json");
    let o = allow_farmem(&[PODMAN_PROFILE], &profile);
    assert!(o.status.success(), "{}", output_text(&o));
    open_to_all(&profile, 0o644);
    let opt = format!("seccomp={}", profile.display());
    let sec = ["--security-opt", opt.as_str()];
    let o = run(podman.command(&sec, &under_run));
    assert!(
        all_ok(&o),
        "farmem run in rootless Podman:\n{}",
        output_text(&o)
    );
    let c = podman.command(
        &[&sec[..], &["-e", "FARMEM_LOCAL=16M"]].concat(),
        &[prog.to_str().unwrap(), "128"],
    );
    let o = run(c);
    assert!(
        all_ok(&o),
        "the C API in rootless Podman:\n{}",
        output_text(&o)
    );
}

#[test]
fn apptainer_model_a_user_namespace_without_seccomp() {
    let test = "apptainer_model_a_user_namespace_without_seccomp";
    if !installed(test, &["/usr/bin/bwrap"]) {
        return;
    }
    let _g = serial();
    let kit = Kit::new("ct-bwrap");
    let prog = kit.build("integrity_omp", true);
    let kit_dir = kit.path("");
    let kit_dir = kit_dir.to_str().unwrap().trim_end_matches('/');
    let home = kit.path("home");
    let farmem = kit.path("farmem");
    // As Apptainer does by default: a user namespace, no new privileges,
    // the host's file system read-only but for home and /tmp.
    let args = [
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--new-session",
        "--die-with-parent",
        "--ro-bind",
        "/usr",
        "/usr",
        "--ro-bind",
        "/etc",
        "/etc",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--symlink",
        "usr/bin",
        "/bin",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--ro-bind",
        kit_dir,
        kit_dir,
        "--bind",
        home.to_str().unwrap(),
        home.to_str().unwrap(),
        "--setenv",
        "OMP_NUM_THREADS",
        "2",
        farmem.to_str().unwrap(),
        "run",
        "--local",
        "16M",
        "--",
        prog.to_str().unwrap(),
        "128",
    ];
    let o = run(kit.command(Path::new("/usr/bin/bwrap"), &args, &[]));
    assert!(
        all_ok(&o),
        "farmem run in a user namespace:\n{}",
        output_text(&o)
    );
    if user().is_some() {
        // nobody, on a stock kernel: the user-mode kind of userfaultfd.
        let stats = String::from_utf8_lossy(&o.stderr);
        assert!(!stats.contains("userfaultfd is not available"), "{stats}");
    }
}

#[test]
fn the_profile_tool_checks_its_input_and_allows_only_what_farmem_needs() {
    if !installed("the_profile_tool", &["/usr/bin/python3"]) {
        return;
    }
    let dir = TempDir::new("ct-profile");
    let d = dir.path();
    let input = d.join("in.json");
    std::fs::write(
        &input,
        r#"{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
            {"names": ["read", "userfaultfd"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1},
            {"names": ["process_madvise"], "action": "SCMP_ACT_ALLOW",
             "includes": {"caps": ["CAP_SYS_PTRACE"]}},
            {"names": ["write"], "action": "SCMP_ACT_ALLOW"}]}"#,
    )
    .unwrap();
    let out = d.join("out.json");
    let o = allow_farmem(&[input.to_str().unwrap()], &out);
    assert!(o.status.success(), "{}", output_text(&o));
    let text = std::fs::read_to_string(&out).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let rules = v["syscalls"].as_array().unwrap();
    let rule_for = |name: &str| -> Vec<&serde_json::Value> {
        rules
            .iter()
            .filter(|r| r["names"].as_array().unwrap().iter().any(|n| n == name))
            .collect()
    };
    // userfaultfd: allowed, by one unconditional rule; read still refused.
    let uffd = rule_for("userfaultfd");
    assert_eq!(uffd.len(), 1, "{text}");
    assert_eq!(uffd[0]["action"], "SCMP_ACT_ALLOW");
    assert!(uffd[0].get("includes").is_none());
    assert_eq!(rule_for("read")[0]["action"], "SCMP_ACT_ERRNO", "{text}");
    assert_eq!(rule_for("write")[0]["action"], "SCMP_ACT_ALLOW", "{text}");
    // process_madvise only when asked for.
    assert!(rule_for("process_madvise")[0].get("includes").is_some());
    let o = allow_farmem(&["--batched-unmap", input.to_str().unwrap()], &out);
    assert!(o.status.success(), "{}", output_text(&o));
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("process_madvise"));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let pm: Vec<_> = v["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["names"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n == "process_madvise")
        })
        .collect();
    assert_eq!(pm.len(), 1, "{text}");
    assert!(pm[0].get("includes").is_none(), "{text}");

    // Bad input: one line that names the file and what is wrong.
    for (body, want) in [
        ("not json", "is not JSON"),
        (r#"{"syscalls": []}"#, "no \"defaultAction\""),
        (
            r#"{"defaultAction": "SCMP_ACT_ERRNO"}"#,
            "no \"syscalls\" list",
        ),
    ] {
        std::fs::write(&input, body).unwrap();
        let o = allow_farmem(&[input.to_str().unwrap()], &out);
        let t = output_text(&o);
        assert!(!o.status.success() && t.contains(want), "{body}: {t}");
    }
    let o = allow_farmem(&[d.join("missing.json").to_str().unwrap()], &out);
    assert!(!o.status.success() && output_text(&o).contains("cannot read"));
}
