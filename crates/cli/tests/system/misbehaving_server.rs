//! The client against a server that breaks one page-read reply: wrong page
//! data, wrong tag, wrong length, a reply cut mid-frame, a stall, a
//! disconnect (see common/proxy.rs). The client never installs wrong data:
//! with one copy it stops with a message naming the server; with two it
//! fails over and the program finishes with every byte right. (Socket
//! transport: UCX's failures are covered by replicas.rs
//! and the backend's unit tests.)

use crate::common::programs::serial;
use crate::common::proxy::{Proxy, ALL};
use crate::common::*;
use std::process::{Command, Output};
use std::sync::atomic::Ordering;

/// integrity_omp over `mb` MiB at 8x expansion.
fn integrity(servers: &[&str], replicas: &str, mb: u64) -> Output {
    let exe = build_c("integrity_omp");
    Command::new(exe)
        .arg(mb.to_string())
        .env("FARMEM_LOCAL", format!("{}M", mb / 8))
        .env("FARMEM_SERVERS", servers.join(","))
        .env("FARMEM_REPLICAS", replicas)
        .env("FARMEM_TIMEOUT_MS", "1000")
        // The proxy breaks page replies on the socket; over UCX pages
        // bypass it (one-sided), so these are tests of the socket transport.
        .env("FARMEM_TRANSPORT", "socket")
        .env("OMP_NUM_THREADS", "2")
        .output()
        .unwrap()
}

#[test]
fn with_one_copy_every_misbehaviour_stops_the_program_naming_the_server() {
    let _g = serial();
    for how in ALL {
        let server = Serve::start("256M");
        let proxy = Proxy::start(&server.addr, how, 40);
        let o = integrity(&[&proxy.addr], "1", 32);
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(proxy.fired.load(Ordering::SeqCst), 1, "{how:?} happened");
        assert!(!o.status.success(), "{how:?}: {out}");
        assert!(
            !out.contains("mismatches="),
            "{how:?}: the program computed on: {out}"
        );
        assert!(
            err.contains(&proxy.addr) && err.contains("stopping the program"),
            "{how:?}: {err}"
        );
    }
}

#[test]
fn with_two_copies_every_misbehaviour_fails_over_and_no_byte_is_wrong() {
    let _g = serial();
    for how in ALL {
        let (a, b, c) = (
            Serve::start("256M"),
            Serve::start("256M"),
            Serve::start("256M"),
        );
        let proxy = Proxy::start(&a.addr, how, 40);
        let o = integrity(&[&proxy.addr, &b.addr, &c.addr], "2", 16);
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(proxy.fired.load(Ordering::SeqCst), 1, "{how:?} happened");
        assert!(
            o.status.success() && out.contains("mismatches=0"),
            "{how:?}:\n{out}\n{err}"
        );
        assert!(
            err.contains(&format!("memory server {}", proxy.addr)),
            "{how:?}: the server is named: {err}"
        );
    }
}
