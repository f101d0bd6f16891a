//! End-to-end page integrity: a proxy between an unmodified OpenMP program
//! and a real `farmem serve` flips one bit in one page of one read reply.
//! The program must stop with a message naming the server and the page, and
//! never compute with the wrong page.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const READ_OK: u16 = 0x82;

/// Forward `from` to `to` frame by frame, flipping one bit in the page data
/// of the `flip_at`-th ReadOk seen across all connections (counted in
/// `seen`; `flipped` records that it happened).
fn pump_replies(
    mut from: TcpStream,
    mut to: TcpStream,
    seen: Arc<AtomicU64>,
    flip_at: u64,
    flipped: Arc<AtomicU64>,
) {
    let mut head = [0u8; 24];
    loop {
        if from.read_exact(&mut head).is_err() {
            break;
        }
        let op = u16::from_le_bytes([head[6], head[7]]);
        let len = u32::from_le_bytes([head[16], head[17], head[18], head[19]]) as usize;
        let mut payload = vec![0u8; len];
        if from.read_exact(&mut payload).is_err() {
            break;
        }
        if op == READ_OK && len > 0 && seen.fetch_add(1, Ordering::SeqCst) + 1 == flip_at {
            payload[len / 2 + 3] ^= 0x10;
            flipped.fetch_add(1, Ordering::SeqCst);
        }
        if to.write_all(&head).is_err() || to.write_all(&payload).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}

/// A TCP proxy to `server`; returns its address and the flip counter.
fn corrupting_proxy(server: String, flip_at: u64) -> (String, Arc<AtomicU64>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let seen = Arc::new(AtomicU64::new(0));
    let flipped = Arc::new(AtomicU64::new(0));
    let f = flipped.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { break };
            let Ok(s) = TcpStream::connect(&server) else {
                break;
            };
            let _ = c.set_nodelay(true);
            let _ = s.set_nodelay(true);
            let (mut c2, mut s2) = (c.try_clone().unwrap(), s.try_clone().unwrap());
            // Requests pass through untouched.
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c2, &mut s2);
                let _ = s2.shutdown(std::net::Shutdown::Both);
            });
            let (seen, f) = (seen.clone(), f.clone());
            std::thread::spawn(move || pump_replies(s, c, seen, flip_at, f));
        }
    });
    (addr, flipped)
}

/// integrity_omp at 8x expansion, its pages through a proxy that flips one
/// bit of the 40th page reply (late enough that pages written back earlier
/// are being read again).
fn run_through_corrupting_proxy(checksum: &str) -> (std::process::Output, String) {
    let server = Serve::start("256M");
    let (proxy, flipped) = corrupting_proxy(server.addr.clone(), 40);
    let exe = build_c("integrity_omp");
    let o = std::process::Command::new(exe)
        .arg("32")
        .env("FARMEM_LOCAL", "4M")
        .env("FARMEM_SERVERS", &proxy)
        .env("OMP_NUM_THREADS", "2")
        .env("FARMEM_CHECKSUM", checksum)
        .output()
        .unwrap();
    assert_eq!(flipped.load(Ordering::SeqCst), 1, "the proxy flipped a bit");
    (o, proxy)
}

#[test]
fn a_flipped_bit_in_a_fetched_page_stops_the_program_naming_server_and_page() {
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

/// The control: without checksums the same flip reaches the program, whose
/// own check finds it. This is what the checksum prevents.
#[test]
fn without_checksums_the_same_flip_reaches_the_program() {
    let (o, _) = run_through_corrupting_proxy("0");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success());
    assert!(
        out.contains("mismatches=") && !out.contains("mismatches=0"),
        "{out}"
    );
}
