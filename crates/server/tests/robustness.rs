//! A real server on loopback fed bad input: it answers with an error or closes
//! that connection, and keeps serving every other client correctly.

mod common;

use common::*;
use farmem_server::{Server, ServerConfig, ServerHandle};
use farmem_wire::{self as wire, ErrorCode, Header, Op, HEADER_LEN, PAGE_SIZE};
use std::io::{Read, Write};
use std::time::Duration;

fn error_code(r: &(Header, Vec<u8>)) -> Option<ErrorCode> {
    (r.0.op == Op::Error).then(|| ErrorCode::from_u32(r.0.status).unwrap())
}

/// A well-behaved client that must keep working throughout.
fn healthy_roundtrip(h: &ServerHandle, token: u8) {
    let mut c = Client::session(h, token as u64, 1000);
    assert_eq!(c.write_fill(&[1, 2, 3], 0x5A).0.op, Op::WriteOk);
    let (rh, data) = c.read(&[3, 1]);
    assert_eq!(rh.op, Op::ReadOk);
    assert!(data.iter().all(|&b| b == 0x5A));
}

#[test]
fn garbage_and_bad_frames_close_only_that_connection() {
    let h = server(1000);
    healthy_roundtrip(&h, 1);

    // Random garbage: error reply (bad magic), then closed.
    let mut g = Client::connect(&h);
    g.send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let r = g.reply().unwrap();
    assert_eq!(error_code(&r), Some(ErrorCode::BadMagic));
    assert!(g.closed());

    // Wrong version.
    let mut v = Client::connect(&h);
    let mut b = Header::new(Op::Stats, 1, 0, 0).encode();
    b[4] = 99;
    v.send_raw(&b);
    assert_eq!(error_code(&v.reply().unwrap()), Some(ErrorCode::BadVersion));
    assert!(v.closed());

    // Oversized frame: refused before any payload is read.
    let mut o = Client::connect(&h);
    let n = wire::MAX_FRAME_PAGES + 1;
    o.send_raw(&Header::new(Op::Read, 1, n, n * 8).encode());
    assert_eq!(error_code(&o.reply().unwrap()), Some(ErrorCode::TooLarge));
    assert!(o.closed());

    // Length that does not match the op.
    let mut l = Client::connect(&h);
    l.send_raw(&Header::new(Op::Read, 1, 2, 9).encode());
    assert_eq!(error_code(&l.reply().unwrap()), Some(ErrorCode::BadLength));
    assert!(l.closed());

    // Unknown op.
    let mut u = Client::connect(&h);
    let mut b = Header::new(Op::Stats, 1, 0, 0).encode();
    b[6] = 0x77;
    u.send_raw(&b);
    assert_eq!(error_code(&u.reply().unwrap()), Some(ErrorCode::UnknownOp));
    assert!(u.closed());

    // Truncated frame: header promises a payload, then the client vanishes.
    let mut t = Client::session(&h, 9, 1000);
    t.send_raw(&Header::new(Op::Write, 5, 1, u32::try_from(8 + PAGE_SIZE).unwrap()).encode());
    t.send_raw(&[0u8; 100]);
    drop(t);

    // Truncated header.
    let mut th = Client::connect(&h);
    th.send_raw(&Header::new(Op::Stats, 1, 0, 0).encode()[..10]);
    drop(th);

    healthy_roundtrip(&h, 2);
}

#[test]
fn requests_are_validated_and_the_connection_survives() {
    let h = server(1000);
    let mut c = Client::connect(&h);
    // No Hello yet.
    assert_eq!(error_code(&c.read(&[0])), Some(ErrorCode::NoSession));
    let mut c = Client::session(&h, 3, 1000);
    // Out of the session's declared range (1000 pages).
    assert_eq!(error_code(&c.read(&[1000])), Some(ErrorCode::OutOfRange));
    assert_eq!(
        error_code(&c.write_fill(&[5, 4000], 1)),
        Some(ErrorCode::OutOfRange)
    );
    // A page never written is an error, never silent zeros.
    assert_eq!(error_code(&c.read(&[7])), Some(ErrorCode::NotFound));
    // Free beyond the range.
    let mut p = 990u64.to_le_bytes().to_vec();
    p.extend_from_slice(&100u64.to_le_bytes());
    assert_eq!(
        error_code(&c.call(Op::Free, 0, &p)),
        Some(ErrorCode::OutOfRange)
    );
    // Still usable after all of that.
    assert_eq!(c.write_fill(&[7], 3).0.op, Op::WriteOk);
    assert_eq!(c.read(&[7]).0.op, Op::ReadOk);
}

#[test]
fn capacity_is_enforced_all_or_nothing() {
    let h = server(10);
    let mut c = Client::session(&h, 4, 1000);
    assert_eq!(
        c.write_fill(&(0..8).collect::<Vec<_>>(), 1).0.op,
        Op::WriteOk
    );
    // 3 more would exceed 10: refused whole, with a message saying what to do.
    let r = c.write_fill(&[8, 9, 10], 2);
    assert_eq!(error_code(&r), Some(ErrorCode::Capacity));
    assert!(String::from_utf8_lossy(&r.1).contains("--capacity"));
    assert_eq!(
        error_code(&c.read(&[8])),
        Some(ErrorCode::NotFound),
        "nothing of a refused batch is stored"
    );
    // Overwriting stored pages needs no new capacity.
    assert_eq!(c.write_fill(&[0, 1], 3).0.op, Op::WriteOk);
    // Freeing gives capacity back.
    let mut p = 0u64.to_le_bytes().to_vec();
    p.extend_from_slice(&4u64.to_le_bytes());
    let (fh, _) = c.call(Op::Free, 0, &p);
    assert_eq!((fh.op, fh.count), (Op::FreeOk, 4));
    assert_eq!(c.write_fill(&[8, 9, 10], 2).0.op, Op::WriteOk);
    // Another client is refused too while the server is full, and served again later.
    let mut d = Client::session(&h, 5, 1000);
    assert_eq!(
        error_code(&d.write_fill(&[0, 1, 2, 3], 1)),
        Some(ErrorCode::Capacity)
    );
    drop(c); // session 4 ends: its pages are released
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(d.write_fill(&[0, 1, 2, 3], 1).0.op, Op::WriteOk);
}

#[test]
fn sessions_are_isolated() {
    let h = server(1000);
    let mut a = Client::session(&h, 0xA, 1000);
    let mut b = Client::session(&h, 0xB, 1000);
    assert_eq!(a.write_fill(&[42], 0xAA).0.op, Op::WriteOk);
    // b cannot see a's page 42.
    assert_eq!(error_code(&b.read(&[42])), Some(ErrorCode::NotFound));
    assert_eq!(b.write_fill(&[42], 0xBB).0.op, Op::WriteOk);
    assert!(a.read(&[42]).1.iter().all(|&x| x == 0xAA));
    assert!(b.read(&[42]).1.iter().all(|&x| x == 0xBB));
    // A second connection with a's token shares a's pages.
    let mut a2 = Client::session(&h, 0xA, 1000);
    assert!(a2.read(&[42]).1.iter().all(|&x| x == 0xAA));
}

#[test]
fn unix_socket_listener() {
    let name = format!("@farmem-test-{}", std::process::id());
    let h = Server::bind(ServerConfig::new(
        format!("unix:{name}")
            .parse::<farmem_server::ServerAddr>()
            .unwrap(),
        1 << 20,
    ))
    .unwrap()
    .spawn()
    .unwrap();
    use std::os::linux::net::SocketAddrExt;
    let sa = std::os::unix::net::SocketAddr::from_abstract_name(&name[1..]).unwrap();
    let mut s = std::os::unix::net::UnixStream::connect_addr(&sa).unwrap();
    s.write_all(&Header::new(Op::Stats, 3, 0, 0).encode())
        .unwrap();
    let mut hb = [0u8; HEADER_LEN];
    s.read_exact(&mut hb).unwrap();
    assert_eq!(Header::decode(&hb).unwrap().op, Op::StatsOk);
    assert_eq!(h.addr().to_string(), format!("unix:{name}"));
}

#[test]
fn many_clients_at_once() {
    let h = server(100_000);
    std::thread::scope(|s| {
        for t in 0..32u8 {
            let h = &h;
            s.spawn(move || {
                let mut c = Client::session(h, t as u64, 1000);
                for round in 0..20u64 {
                    let pages: Vec<u64> = (0..8).map(|i| round * 8 + i).collect();
                    assert_eq!(c.write_fill(&pages, t).0.op, Op::WriteOk);
                    let (rh, d) = c.read(&pages);
                    assert_eq!(rh.op, Op::ReadOk);
                    assert!(
                        d.iter().all(|&x| x == t),
                        "client {t} read another client's data"
                    );
                }
            });
        }
    });
    healthy_roundtrip(&h, 99);
}
