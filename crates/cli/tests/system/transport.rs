//! Choosing the transport: on this host pages move through sealed memory
//! files over the server's Unix socket (`memfd`, what `auto` picks for the
//! embedded server); `socket` never moves them one-sided; `ucx` is offered
//! only on TCP to a client that passed the shared-secret handshake (on one
//! host through UCX's posix shared memory, a test path). A server on this
//! host reached over TCP hands out its memory files at its side door. A
//! choice that cannot be had is one clear line; `auto` falls back to
//! sockets.

use crate::common::programs::serial;
use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `farmem run --stats` of a workload that writes and re-reads 32 MiB at a
/// 4 MiB budget (so pages go far and come back), with `args` before `--`.
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = farmem();
    c.args(["run", "--local", "4M", "--stats"]).args(args);
    c.arg("--")
        .arg(target_dir().join("workloads/memwrite"))
        .args(["--size", "32"]);
    c.env_remove("FARMEM_TRANSPORT");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn transport_line(o: &Output) -> String {
    stderr(o)
        .lines()
        .find(|l| l.trim_start().starts_with("transport"))
        .unwrap_or_else(|| panic!("no transport line in --stats:\n{}", stderr(o)))
        .to_string()
}

const MEMFD: &str = "memfd (one-sided, sealed memory files on this host)";
const UCX_SHM: &str = "ucx (one-sided, shared memory: a test path)";

/// A secret file for this test (removed with its folder at the end).
fn secret(tag: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("farmem-transport-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("secret");
    new_secret(&path);
    (dir, path)
}

fn with_secret(path: &Path) -> [(&'static str, &str); 1] {
    [("FARMEM_SECRET_FILE", path.to_str().unwrap())]
}

#[test]
fn each_choice_is_what_runs() {
    let _g = serial();
    // The embedded server, on a Unix socket.
    for (choice, want) in [("memfd", MEMFD), ("socket", "socket"), ("auto", MEMFD)] {
        let o = run(&["--transport", choice], &[]);
        assert!(o.status.success(), "{choice}: {}", stderr(&o));
        assert!(
            transport_line(&o).ends_with(want),
            "{choice}: {}",
            transport_line(&o)
        );
    }
    // A server on loopback TCP with a secret: memory files at its side
    // door, UCX only when asked for.
    let (dir, path) = secret("choice");
    let s = Serve::start_with_secret("256M", &path, &[]);
    let env = with_secret(&path);
    for (choice, want) in [
        ("auto", MEMFD),
        ("memfd", MEMFD),
        ("socket", "socket"),
        ("ucx", UCX_SHM),
    ] {
        let o = run(&["--transport", choice, "--servers", &s.addr], &env);
        assert!(o.status.success(), "{choice}: {}", stderr(&o));
        assert!(
            transport_line(&o).ends_with(want),
            "{choice}: {}",
            transport_line(&o)
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_choice_that_cannot_be_had_is_one_line() {
    let _g = serial();
    // UCX on the embedded server (a Unix socket, no handshake).
    let o = run(&["--transport", "ucx"], &[]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("FARMEM_TRANSPORT=ucx") && e.contains("shared-secret handshake"),
        "{e}"
    );
    // UCX on a TCP server without a secret.
    let s = Serve::start("256M");
    let o = run(&["--transport", "ucx", "--servers", &s.addr], &[]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains(&s.addr) && e.contains("FARMEM_TRANSPORT=ucx"),
        "{e}"
    );
    assert_eq!(
        e.lines()
            .filter(|l| l.contains("FARMEM_TRANSPORT=ucx"))
            .count(),
        1,
        "{e}"
    );
    // Memory files from a server on TCP that runs as another user (and
    // so neither lets this user in at its side door, nor is trusted by it).
    // setpriv execs the server itself (runuser would stay its parent), so
    // killing the child stops the server.
    if Command::new("setpriv").arg("--help").output().is_err() {
        return skip(
            "a_choice_that_cannot_be_had_is_one_line",
            "setpriv is missing",
        );
    }
    let mut other = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_farmem"))
        .args(["serve", "--listen", "127.0.0.1:0", "--capacity", "64M"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let addr = banner_addr(&first_line(&mut other));
    let memfd = run(&["--transport", "memfd", "--servers", &addr], &[]);
    // Under `auto`, the same server is reached over TCP sockets.
    let o = run(&["--transport", "auto", "--servers", &addr], &[]);
    let _ = other.kill();
    let _ = other.wait();
    assert!(!memfd.status.success());
    let e = stderr(&memfd);
    assert!(e.contains("uid"), "{e}");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        transport_line(&o).ends_with("socket"),
        "{}",
        transport_line(&o)
    );
}

#[test]
fn a_bad_transport_is_named() {
    let o = run(&["--transport", "rdma"], &[]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("TRANSPORT") && e.contains("auto, memfd, socket or ucx"),
        "{e}"
    );
}

#[test]
fn a_server_without_ucx_is_one_line_under_ucx_and_sockets_under_auto() {
    let _g = serial();
    let (dir, path) = secret("no-ucx");
    let env = with_secret(&path);
    // A server whose UCX cannot start (no usable UCX transport there).
    let s = Serve::start_with_secret("256M", &path, &[("UCX_SHM_DEVICES", "no-such-device")]);
    let o = run(&["--transport", "ucx", "--servers", &s.addr], &env);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains(&s.addr) && e.contains("FARMEM_TRANSPORT=ucx") && e.contains("no UCX"),
        "{e}"
    );
    // `auto` takes its memory files (the server is on this host).
    let o = run(&["--transport", "auto", "--servers", &s.addr], &env);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(transport_line(&o).ends_with(MEMFD));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_client_without_libucp_is_one_line_under_ucx() {
    let _g = serial();
    // A libucp.so.0 that is not a library, found first on the search path.
    let dir = std::env::temp_dir().join(format!("farmem-no-ucx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("libucp.so.0"), b"not a library").unwrap();
    let lib = dir.display().to_string();
    let o = run(&["--transport", "ucx"], &[("LD_LIBRARY_PATH", &lib)]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("UCX is not available") && e.contains("FARMEM_TRANSPORT=socket"),
        "{e}"
    );
    // The one-host path needs no UCX at all.
    let o = run(&["--transport", "auto"], &[("LD_LIBRARY_PATH", &lib)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(transport_line(&o).ends_with(MEMFD));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The fault path calls no allocator: faults taken while the program's
/// own allocator "lock" is held (tests/programs/malloc_in_handler.c), on
/// every page path.
#[test]
fn faults_never_call_the_programs_allocator() {
    let _g = serial();
    let exe = build_c("malloc_in_handler");
    let (dir, path) = secret("alloc");
    let s = Serve::start_with_secret("256M", &path, &[]);
    let secret_env = path.to_str().unwrap();
    for (t, servers) in [("memfd", None), ("socket", None), ("ucx", Some(&s.addr))] {
        let mut c = Command::new(&exe);
        c.arg("48")
            .env("FARMEM_TRANSPORT", t)
            .env("FARMEM_LOCAL", "6M")
            .env("FARMEM_SECRET_FILE", secret_env);
        if let Some(a) = servers {
            c.env("FARMEM_SERVERS", a);
        }
        let o = c.output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && out.contains("bad=0"),
            "{t}: {out}\n{}",
            stderr(&o)
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}
