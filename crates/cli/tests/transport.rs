//! Choosing the transport: `--transport ucx` moves pages one-sided (and
//! says so in --stats), `socket` never uses UCX, `auto` picks UCX for a
//! server on this host; a server or a client without UCX gives one clear
//! line under `ucx` and falls back to sockets only under `auto`.

mod common;
use common::*;
use std::process::{Command, Output};

/// `farmem run --stats` of a workload that writes and re-reads 32 MiB at a
/// 4 MiB budget (so pages go far and come back), with `args` before `--`.
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = farmem();
    c.args(["run", "--local", "4M", "--stats"]).args(args);
    c.arg("--")
        .arg(target_dir().join("workloads/memwrite"))
        .args(["--size", "32"]);
    for (k, v) in env {
        c.env(k, v);
    }
    c.env_remove("FARMEM_TRANSPORT").output().unwrap()
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

#[test]
fn each_choice_is_what_runs() {
    for (choice, want) in [
        ("ucx", "ucx (one-sided, shared memory)"),
        ("socket", "socket"),
        ("auto", "ucx (one-sided, shared memory)"),
    ] {
        let o = run(&["--transport", choice], &[]);
        assert!(o.status.success(), "{choice}: {}", stderr(&o));
        assert!(
            transport_line(&o).ends_with(want),
            "{choice}: {}",
            transport_line(&o)
        );
    }
    // The same over TCP to a server on this host (loopback).
    let s = Serve::start("256M");
    for (choice, want) in [
        ("auto", "ucx (one-sided, shared memory)"),
        ("socket", "socket"),
    ] {
        let o = run(&["--transport", choice, "--servers", &s.addr], &[]);
        assert!(o.status.success(), "{choice}: {}", stderr(&o));
        assert!(
            transport_line(&o).ends_with(want),
            "{choice}: {}",
            transport_line(&o)
        );
    }
}

#[test]
fn a_bad_transport_is_named() {
    let o = run(&["--transport", "rdma"], &[]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("TRANSPORT") && e.contains("auto, socket or ucx"),
        "{e}"
    );
}

/// A server whose UCX cannot start (no usable UCX transport there).
fn server_without_ucx() -> Serve {
    Serve::start_with_env("256M", &[("UCX_TLS", "no-such-transport")])
}

#[test]
fn a_server_without_ucx_is_one_line_under_ucx_and_sockets_under_auto() {
    let s = server_without_ucx();
    let o = run(&["--transport", "ucx", "--servers", &s.addr], &[]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains(&s.addr) && e.contains("FARMEM_TRANSPORT=ucx") && e.contains("no UCX"),
        "{e}"
    );
    assert_eq!(
        e.lines()
            .filter(|l| l.contains("FARMEM_TRANSPORT=ucx"))
            .count(),
        1,
        "{e}"
    );
    let o = run(&["--transport", "auto", "--servers", &s.addr], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(transport_line(&o).ends_with("socket"));
}

#[test]
fn a_client_without_libucp_is_one_line_under_ucx() {
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
    let o = run(&["--transport", "auto"], &[("LD_LIBRARY_PATH", &lib)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(transport_line(&o).ends_with("socket"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The fault path calls no allocator: faults taken while the program's
/// own allocator "lock" is held (tests/programs/malloc_in_handler.c), on
/// both transports.
#[test]
fn faults_never_call_the_programs_allocator() {
    let exe = build_c("malloc_in_handler");
    for t in ["ucx", "socket"] {
        let o = Command::new(&exe)
            .arg("48")
            .env("FARMEM_TRANSPORT", t)
            .env("FARMEM_LOCAL", "6M")
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && out.contains("bad=0"),
            "{t}: {out}\n{}",
            stderr(&o)
        );
    }
}
