//! Limits that keep a server healthy, each against a client that breaks it:
//! too many sessions, a session over its quota, a client that sends half a
//! frame and stalls, one that connects and says nothing.

mod common;
use common::*;
use farmem_server::{Server, ServerConfig, ServerHandle};
use farmem_wire::{ErrorCode, Header, Op, PAGE_SIZE};
use std::io::Write;
use std::time::{Duration, Instant};

fn server_with(f: impl FnOnce(&mut ServerConfig)) -> ServerHandle {
    let mut cfg = ServerConfig::new(
        "127.0.0.1:0".parse::<std::net::SocketAddr>().unwrap(),
        1000 * PAGE_SIZE as u64,
    );
    cfg.spin_ns = 10_000;
    f(&mut cfg);
    Server::bind(cfg).unwrap().spawn().unwrap()
}

/// How long until the server closes `c`'s connection (None: not within `limit`).
fn closed_within(c: &mut Client, limit: Duration) -> Option<Duration> {
    let t = Instant::now();
    c.s.set_read_timeout(Some(limit)).unwrap();
    c.closed().then(|| t.elapsed())
}

#[test]
fn sessions_beyond_the_limit_are_refused_and_others_go_on() {
    let h = server_with(|c| c.max_sessions = 2);
    let mut a = Client::session(&h, 1, 16);
    let _b = Client::session(&h, 2, 16);
    let mut c = Client::connect(&h);
    let r = c.hello(3, 16);
    assert_eq!(error_code(&r), Some(ErrorCode::Capacity));
    assert!(String::from_utf8_lossy(&r.1).contains("--max-sessions"));
    // Another connection of an existing session is no new session.
    let _a2 = Client::session(&h, 1, 16);
    assert_eq!(a.write_fill(&[1], 7).0.op, Op::WriteOk);
}

#[test]
fn a_session_over_its_quota_is_refused_and_others_go_on() {
    let h = server_with(|c| c.session_quota_pages = 10);
    let mut a = Client::session(&h, 1, 100);
    let pages: Vec<u64> = (0..8).collect();
    assert_eq!(a.write_fill(&pages, 1).0.op, Op::WriteOk);
    // Rewriting stored pages needs no quota; new ones past it are refused.
    assert_eq!(a.write_fill(&pages, 2).0.op, Op::WriteOk);
    let r = a.write_fill(&[8, 9, 10, 11], 3);
    assert_eq!(error_code(&r), Some(ErrorCode::Capacity));
    assert!(String::from_utf8_lossy(&r.1).contains("quota"));
    assert_eq!(h.used_pages(), 8, "the refused batch stored nothing");
    let mut b = Client::session(&h, 2, 100);
    assert_eq!(b.write_fill(&pages, 4).0.op, Op::WriteOk);
    assert!(a.read(&[3]).1.iter().all(|&x| x == 2));
}

#[test]
fn half_a_frame_then_silence_is_cut_off_after_the_client_timeout() {
    let h = server_with(|c| c.client_timeout_ns = 400_000_000);
    // Half a header.
    let mut c = Client::session(&h, 1, 16);
    let head = Header::new(Op::Read, 9, 1, 8).encode();
    c.s.write_all(&head[..10]).unwrap();
    let t = closed_within(&mut c, Duration::from_secs(5)).expect("closed");
    assert!(t >= Duration::from_millis(300), "{t:?}");
    // A Write's header and half its page: cut off, and the capacity it
    // reserved is given back.
    let mut w = Client::session(&h, 2, 16);
    let mut b = farmem_wire::Frame::Write { pages: &[1] }.encode(3).to_vec();
    b.extend_from_slice(&[5u8; PAGE_SIZE / 2]);
    w.s.write_all(&b).unwrap();
    closed_within(&mut w, Duration::from_secs(5)).expect("closed");
    assert_eq!(h.used_pages(), 0);
    // Meanwhile and after, a healthy client is served.
    let mut ok = Client::session(&h, 3, 16);
    assert_eq!(ok.write_fill(&[2], 9).0.op, Op::WriteOk);
}

#[test]
fn a_connection_that_never_says_hello_is_closed() {
    let h = server_with(|c| c.hello_timeout_ns = 300_000_000);
    let mut c = Client::connect(&h);
    let t = closed_within(&mut c, Duration::from_secs(5)).expect("closed");
    assert!(t >= Duration::from_millis(200), "{t:?}");
    // One that says Hello may then stay idle past that.
    let mut s = Client::session(&h, 1, 16);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(s.write_fill(&[1], 1).0.op, Op::WriteOk);
}
