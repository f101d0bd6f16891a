//! One-sided sessions against a real server: UcxOpen and UcxChunk after
//! the handshake only (never on a Unix socket or without a secret), remote
//! keys per session, chunks charged to capacity and quota, and a client
//! endpoint that reads and writes a granted chunk with no request to the
//! server.

mod common;
use common::*;
use farmem_server::{Secret, Server, ServerConfig, CHUNK_PAGES};
use farmem_sys::ucx::{self, Context, Endpoint, Op as UcxOp, Started, Worker};
use farmem_wire::{self as wire, ErrorCode, Frame, Op};
use std::path::Path;
use std::sync::Arc;

fn open(c: &mut Client) -> (u64, Vec<u8>) {
    let (h, p) = c.send(Frame::UcxOpen, &[]);
    match wire::decode_reply(&h, &p) {
        Ok(wire::Reply::UcxOpenOk {
            chunk_pages,
            address,
        }) => (chunk_pages, address.to_vec()),
        other => panic!("UcxOpen answered {other:?}"),
    }
}

#[test]
fn no_address_or_key_leaves_before_the_handshake() {
    let mut cfg = ServerConfig::new(
        "127.0.0.1:0".parse::<farmem_server::ServerAddr>().unwrap(),
        1 << 30,
    );
    cfg.secret = Some(Arc::new(
        Secret::from_bytes(vec![1; 32], Path::new("test-secret")).unwrap(),
    ));
    let h = Server::bind(cfg).unwrap().spawn().unwrap();
    for frame in [Frame::UcxOpen, Frame::UcxChunk { chunk: 0 }] {
        let mut c = Client::connect(&h);
        let r = c.send(frame, &[]);
        assert_eq!(r.0.op, Op::Error, "{frame:?} before the handshake");
        assert_eq!(error_code(&r), Some(ErrorCode::AuthRequired));
        assert!(c.closed());
    }
}

#[test]
fn ucx_is_never_offered_without_the_handshake() {
    // A TCP server without a secret, and a Unix one: the engine (which
    // serves software RMA to any peer that reaches it) never starts.
    let tcp = server(CHUNK_PAGES);
    let name = format!("unix:@farmem-ucx-test-{}", std::process::id());
    let mut cfg = ServerConfig::new(name.parse::<farmem_server::ServerAddr>().unwrap(), 1 << 30);
    cfg.spin_ns = 10_000;
    let unix = Server::bind(cfg).unwrap().spawn().unwrap();
    let mut c = Client::session(&tcp, 1, CHUNK_PAGES);
    let r = c.send(Frame::UcxOpen, &[]);
    assert_eq!(error_code(&r), Some(ErrorCode::Unsupported));
    assert!(String::from_utf8_lossy(&r.1).contains("shared-secret handshake"));
    let mut u = unix_session(&unix, 2, CHUNK_PAGES);
    let r = u.send(Frame::UcxOpen, &[]);
    assert_eq!(error_code(&r), Some(ErrorCode::Unsupported));
}

#[test]
fn chunks_are_granted_per_session_and_charged_whole() {
    let h = server_with_secret(3 * CHUNK_PAGES, |_| {});
    let mut a = Client::authenticated_session(&h, 1, 4 * CHUNK_PAGES);
    // UcxChunk needs UcxOpen first.
    assert_eq!(
        ucx_chunk(&mut a, 0).unwrap_err().0,
        Some(ErrorCode::Malformed)
    );
    let (pages, address) = open(&mut a);
    assert_eq!(pages, CHUNK_PAGES);
    assert!(!address.is_empty());
    let (base0, key0) = ucx_chunk(&mut a, 0).unwrap();
    assert_eq!(h.used_pages(), CHUNK_PAGES, "a chunk is charged whole");
    // What this UCX packs has the layout a client checks, to the byte.
    farmem_sys::ucx::packed::check_rkey(&key0).unwrap();
    assert!(farmem_sys::ucx::packed::check_rkey(&key0[..key0.len() - 1]).is_err());
    assert_eq!(base0 % wire::PAGE_SIZE as u64, 0);
    // The same chunk again: the same memory, not charged twice.
    assert_eq!(ucx_chunk(&mut a, 0).unwrap(), (base0, key0.clone()));
    assert_eq!(h.used_pages(), CHUNK_PAGES);
    // Beyond the session's pages.
    assert_eq!(
        ucx_chunk(&mut a, 4).unwrap_err().0,
        Some(ErrorCode::OutOfRange)
    );
    // Another session gets its own memory, never session a's.
    let mut b = Client::authenticated_session(&h, 2, 4 * CHUNK_PAGES);
    open(&mut b);
    let (base_b, key_b) = ucx_chunk(&mut b, 0).unwrap();
    assert_ne!(base_b, base0);
    assert_ne!(key_b, key0);
    // Capacity: 3 chunks; the fourth is refused with the reason.
    ucx_chunk(&mut a, 1).unwrap();
    let (code, msg) = ucx_chunk(&mut a, 2).unwrap_err();
    assert_eq!(code, Some(ErrorCode::Capacity));
    assert!(msg.contains("--capacity"), "{msg}");
    // A session's chunks are released with its last connection.
    drop(b);
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(h.used_pages(), 2 * CHUNK_PAGES);
}

#[test]
fn the_session_quota_applies_per_chunk() {
    let h = server_with_secret(1 << 28, |cfg| cfg.session_quota_pages = CHUNK_PAGES + 1);
    let mut a = Client::authenticated_session(&h, 1, 4 * CHUNK_PAGES);
    open(&mut a);
    ucx_chunk(&mut a, 0).unwrap();
    let (code, msg) = ucx_chunk(&mut a, 1).unwrap_err();
    assert_eq!(code, Some(ErrorCode::Capacity));
    assert!(msg.contains("--session-quota"), "{msg}");
}

/// A client endpoint writes and reads a granted chunk one-sided; a Free
/// gives the memory back (it reads as zero after).
#[test]
fn pages_move_without_a_request_to_the_server() {
    let h = server_with_secret(CHUNK_PAGES, |_| {});
    let mut a = Client::authenticated_session(&h, 7, CHUNK_PAGES);
    let (_, address) = open(&mut a);
    let (base, key) = ucx_chunk(&mut a, 0).unwrap();
    let ctx = Context::new(c"farmem-test", false, &[]).unwrap();
    let worker = Worker::new(&ctx).unwrap();
    let ep = Endpoint::connect(&worker, &address).unwrap();
    let rkey = ep.unpack(&key).unwrap();
    let mut req = vec![0u8; ctx.request_size() + 64];
    // SAFETY: request_size bytes precede the pointer.
    let op = UcxOp::new(unsafe { req.as_mut_ptr().add(ctx.request_size()) }, None);
    let wait = |s: Started| match s {
        Started::Done => {}
        Started::Pending => loop {
            worker.progress();
            // SAFETY: the operation is in flight.
            let st = unsafe { op.poll() };
            if st != ucx::UCS_INPROGRESS {
                assert_eq!(st, ucx::UCS_OK);
                break;
            }
        },
        Started::Failed(s) => panic!("{}", ucx::status_string(s)),
    };
    let page = pattern(5, 1);
    let at = base + 5 * 4096;
    // SAFETY: `page` is 4 KiB and outlives the wait.
    wait(unsafe { op.put(&ep, page.as_ptr(), 4096, at, &rkey) });
    // SAFETY: no other operation is in flight on this request.
    wait(unsafe { op.flush(&ep) });
    let mut back = vec![0u8; 4096];
    // SAFETY: as above.
    wait(unsafe { op.get(&ep, back.as_mut_ptr(), 4096, at, &rkey) });
    assert_eq!(back, page);
    a.free(0, CHUNK_PAGES);
    // SAFETY: as above.
    wait(unsafe { op.get(&ep, back.as_mut_ptr(), 4096, at, &rkey) });
    assert!(back.iter().all(|&b| b == 0), "freed pages are given back");
}
