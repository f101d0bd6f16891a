//! End-to-end page integrity: a proxy between an unmodified OpenMP program
//! and a real `farmem serve` flips one bit in one page of one read reply.
//! The program must stop with a message naming the server and the page, and
//! never compute with the wrong page.

use crate::common::programs::serial;
use crate::common::proxy::{Misbehave, Proxy};
use crate::common::*;
use std::sync::atomic::Ordering;

/// integrity_omp at 8x expansion, its pages through a proxy that flips one
/// bit of the 40th page reply (late enough that pages written back earlier
/// are being read again).
fn run_through_corrupting_proxy(checksum: &str) -> (std::process::Output, String) {
    run_through_proxy(Misbehave::FlipBit, &[("FARMEM_CHECKSUM", checksum)])
}

/// integrity_omp at 8x through a proxy that breaks the 40th page reply as
/// `how` says, with `env` set.
fn run_through_proxy(how: Misbehave, env: &[(&str, &str)]) -> (std::process::Output, String) {
    // (Without checksums the flipped word may or may not reach the
    // program's own check, depending on whether it is overwritten first, so
    // there is no deterministic control run with FARMEM_CHECKSUM=0.)
    let server = Serve::start("256M");
    let Proxy {
        addr: proxy,
        fired: flipped,
    } = Proxy::start(&server.addr, how, 40);
    let exe = build_c("integrity_omp");
    let o = std::process::Command::new(exe)
        .arg("32")
        .env("FARMEM_LOCAL", "4M")
        .env("FARMEM_SERVERS", &proxy)
        // The proxy corrupts pages on the socket; over UCX they bypass it
        // (one-sided), so this test is of the socket transport.
        .env("FARMEM_TRANSPORT", "socket")
        .env("OMP_NUM_THREADS", "2")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert_eq!(flipped.load(Ordering::SeqCst), 1, "the proxy flipped a bit");
    (o, proxy)
}

#[test]
fn a_flipped_bit_in_a_fetched_page_stops_the_program_naming_server_and_page() {
    let _g = serial();
    let (o, proxy) = run_through_corrupting_proxy("1");
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "a corrupted page went unnoticed: {out}"
    );
    assert!(
        err.contains("came back from")
            && err.contains(&proxy)
            && err.contains("wrong contents")
            && err.contains("CRC32C")
            && err.contains("far page at 0x"),
        "{err}"
    );
    assert!(
        !out.contains("mismatches="),
        "the program must stop before it computes with the page: {out}"
    );
}

/// A server that forges a page on purpose can keep its CRC32C (it is
/// linear): that check lets the page in. The keyed MAC (`FARMEM_INTEGRITY=mac`),
/// whose key never leaves the program, stops the program instead.
#[test]
fn a_forged_page_passes_crc32c_and_is_stopped_by_the_mac() {
    let _g = serial();
    let (o, _) = run_through_proxy(
        Misbehave::ForgeKeepingCrc,
        &[("FARMEM_INTEGRITY", "crc32c")],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !err.contains("wrong contents"),
        "CRC32C caught a forgery that keeps it (the proxy is wrong): {err}"
    );
    let (o, proxy) = run_through_proxy(Misbehave::ForgeKeepingCrc, &[("FARMEM_INTEGRITY", "mac")]);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "a forged page went unnoticed: {out}");
    assert!(
        err.contains("came back from")
            && err.contains(&proxy)
            && err.contains("keyed MAC")
            && err.contains("far page at 0x"),
        "{err}"
    );
    assert!(!out.contains("mismatches="), "{out}");
}

/// With two copies, a server that returns a page with the wrong contents is
/// no longer used, the page is read from its other copy, and the copies it
/// held are made again on the servers left: the corrupted page is repaired,
/// never installed.
#[test]
fn a_corrupting_server_with_two_copies_is_repaired_around() {
    let _g = serial();
    let servers = [
        Serve::start("256M"),
        Serve::start("256M"),
        Serve::start("256M"),
    ];
    let Proxy {
        addr: proxy,
        fired: flipped,
    } = Proxy::start(&servers[2].addr, Misbehave::FlipBit, 40);
    let list = format!("{},{},{proxy}", servers[0].addr, servers[1].addr);
    let o = std::process::Command::new(build_c("integrity_omp"))
        .arg("32")
        .env("FARMEM_LOCAL", "4M")
        .env("FARMEM_SERVERS", &list)
        .env("FARMEM_REPLICAS", "2")
        .env("FARMEM_STATS", "1")
        // The proxy corrupts pages on the socket (see above).
        .env("FARMEM_TRANSPORT", "socket")
        .env("OMP_NUM_THREADS", "2")
        .output()
        .unwrap();
    assert_eq!(flipped.load(Ordering::SeqCst), 1, "the proxy flipped a bit");
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && out.contains("mismatches=0"),
        "{out}\n{err}"
    );
    assert!(
        err.contains(&format!(
            "memory server {proxy} returned a page with the wrong contents"
        )) && err.contains("every page has all its copies again"),
        "{err}"
    );
}
