//! The shared-secret handshake against a real server on real sockets: the
//! right secret works; no secret, a wrong secret, a replayed handshake and
//! an out-of-order one are refused; Unix sockets need none. After the
//! handshake every frame is sealed: one without its tag, with another
//! connection's, replayed or altered ends the connection unserved.

mod common;
use common::*;
use farmem_server::{Secret, Server, ServerConfig, ServerHandle};
use farmem_wire::auth::{MAC_LEN, NONCE_LEN};
use farmem_wire::{self as wire, ErrorCode, Frame, Op};
use std::path::Path;
use std::sync::Arc;

fn key(b: u8) -> Secret {
    Secret::from_bytes(vec![b; 32], Path::new("test-secret")).unwrap()
}

fn server_with_secret(listen: &str) -> ServerHandle {
    let mut cfg = ServerConfig::new(
        listen.parse::<farmem_server::ServerAddr>().unwrap(),
        1 << 20,
    );
    cfg.spin_ns = 10_000;
    cfg.secret = Some(Arc::new(key(1)));
    Server::bind(cfg).unwrap().spawn().unwrap()
}

/// Send Auth with nonce `cn`; the server's nonce and proof.
fn challenge(c: &mut Client, cn: &[u8; NONCE_LEN]) -> ([u8; NONCE_LEN], [u8; MAC_LEN]) {
    let (h, p) = c.send(Frame::Auth { nonce: cn }, &[]);
    match wire::decode_reply(&h, &p) {
        Ok(wire::Reply::AuthChallenge { nonce, proof }) => (nonce, proof),
        other => panic!("Auth answered {other:?}"),
    }
}

fn prove(c: &mut Client, proof: &[u8; MAC_LEN]) -> Reply {
    c.send(Frame::AuthProof { proof }, &[])
}

#[test]
fn the_right_secret_opens_the_connection() {
    let h = server_with_secret("127.0.0.1:0");
    let k = key(1);
    let mut c = Client::connect(&h);
    let cn = [7u8; NONCE_LEN];
    let (sn, sp) = challenge(&mut c, &cn);
    assert!(
        k.verify_server(&cn, &sn, &sp),
        "the server proves it holds the secret"
    );
    assert_eq!(prove(&mut c, &k.client_proof(&cn, &sn)).0.op, Op::AuthOk);
    c.seal = Some((k.session_key(&cn, &sn), 0, 0));
    assert_eq!(c.hello(1, 16).0.op, Op::HelloOk);
    assert_eq!(c.write(&[3], &[pattern(3, 1)]).0.op, Op::WriteOk);
    assert_eq!(c.read(&[3]).1, pattern(3, 1));
}

#[test]
fn no_secret_is_refused_before_anything_is_served() {
    let h = server_with_secret("127.0.0.1:0");
    for op in [Op::Stats, Op::Hello] {
        let mut c = Client::connect(&h);
        let r = if op == Op::Stats {
            c.send(Frame::Stats, &[])
        } else {
            c.hello(1, 16)
        };
        assert_eq!(error_code(&r), Some(ErrorCode::AuthRequired));
        assert!(String::from_utf8_lossy(&r.1).contains("secret file"));
        assert!(c.closed());
    }
    // Page data sent without authenticating is read past, not stored.
    let mut c = Client::connect(&h);
    let r = c.write(&[1], &[pattern(1, 1)]);
    assert_eq!(error_code(&r), Some(ErrorCode::AuthRequired));
    assert_eq!(h.used_pages(), 0);
}

#[test]
fn a_wrong_secret_is_refused_and_caught_by_the_client_first() {
    let h = server_with_secret("127.0.0.1:0");
    let wrong = key(2);
    let mut c = Client::connect(&h);
    let cn = [9u8; NONCE_LEN];
    let (sn, sp) = challenge(&mut c, &cn);
    // A client with another secret rejects the server's proof...
    assert!(!wrong.verify_server(&cn, &sn, &sp));
    // ...and a proof made with it is refused.
    let r = prove(&mut c, &wrong.client_proof(&cn, &sn));
    assert_eq!(error_code(&r), Some(ErrorCode::AuthFailed));
    assert!(String::from_utf8_lossy(&r.1).contains("wrong secret"));
    assert!(c.closed());
}

#[test]
fn a_replayed_handshake_is_refused() {
    let h = server_with_secret("127.0.0.1:0");
    let k = key(1);
    // A genuine handshake, recorded by an eavesdropper.
    let cn = [5u8; NONCE_LEN];
    let mut c = Client::connect(&h);
    let (sn, _) = challenge(&mut c, &cn);
    let recorded = k.client_proof(&cn, &sn);
    assert_eq!(prove(&mut c, &recorded).0.op, Op::AuthOk);
    // Replayed on a new connection: the server draws a fresh nonce, so the
    // recorded proof no longer fits.
    let mut e = Client::connect(&h);
    let (sn2, _) = challenge(&mut e, &cn);
    assert_ne!(sn, sn2, "server nonces are fresh");
    let r = prove(&mut e, &recorded);
    assert_eq!(error_code(&r), Some(ErrorCode::AuthFailed));
    assert!(e.closed());
}

#[test]
fn the_handshake_must_come_in_order() {
    let h = server_with_secret("127.0.0.1:0");
    let k = key(1);
    // A proof before any challenge.
    let mut c = Client::connect(&h);
    let r = prove(&mut c, &[0u8; MAC_LEN]);
    assert_eq!(error_code(&r), Some(ErrorCode::AuthFailed));
    assert!(c.closed());
    // Auth twice.
    let mut c = Client::connect(&h);
    let cn = [1u8; NONCE_LEN];
    let _ = challenge(&mut c, &cn);
    let r = c.send(Frame::Auth { nonce: &cn }, &[]);
    assert_eq!(error_code(&r), Some(ErrorCode::AuthFailed));
    // Auth again after success.
    let mut c = Client::connect(&h);
    let (sn, _) = challenge(&mut c, &cn);
    assert_eq!(prove(&mut c, &k.client_proof(&cn, &sn)).0.op, Op::AuthOk);
    c.seal = Some((k.session_key(&cn, &sn), 0, 0));
    let r = c.send(Frame::Auth { nonce: &cn }, &[]);
    assert_eq!(error_code(&r), Some(ErrorCode::AuthFailed));
}

#[test]
fn a_server_without_a_secret_says_so_to_a_client_that_has_one() {
    let h = server(16);
    let mut c = Client::connect(&h);
    let r = c.send(
        Frame::Auth {
            nonce: &[1; NONCE_LEN],
        },
        &[],
    );
    assert_eq!(error_code(&r), Some(ErrorCode::AuthFailed));
    assert!(String::from_utf8_lossy(&r.1).contains("no shared secret"));
}

#[test]
fn unix_sockets_need_no_secret() {
    use std::io::{Read, Write};
    let name = format!("farmem-auth-test-{}", std::process::id());
    let _h = server_with_secret(&format!("unix:@{name}"));
    use std::os::linux::net::SocketAddrExt;
    let sa = std::os::unix::net::SocketAddr::from_abstract_name(&name).unwrap();
    let mut s = std::os::unix::net::UnixStream::connect_addr(&sa).unwrap();
    s.write_all(&Frame::Stats.encode(3)).unwrap();
    let mut hb = [0u8; wire::HEADER_LEN];
    s.read_exact(&mut hb).unwrap();
    assert_eq!(wire::Header::decode(&hb).unwrap().op, Op::StatsOk);
}

/// A connection through the handshake with nonce `cn`, its session key.
fn passed(h: &ServerHandle, cn: u8) -> (Client, wire::seal::SessionKey) {
    let k = key(1);
    let mut c = Client::connect(h);
    let cn = [cn; NONCE_LEN];
    let (sn, _) = challenge(&mut c, &cn);
    assert_eq!(prove(&mut c, &k.client_proof(&cn, &sn)).0.op, Op::AuthOk);
    (c, k.session_key(&cn, &sn))
}

fn hello_frame() -> Vec<u8> {
    let t = [5u8; wire::TOKEN_LEN];
    Frame::Hello {
        token: &t,
        max_pages: 16,
    }
    .encode(2)
    .to_vec()
}

#[test]
fn after_the_handshake_a_frame_without_its_seal_is_not_served() {
    use wire::seal::Direction::ToServer;
    let h = server_with_secret("127.0.0.1:0");
    // Unsealed, as an attacker who let the handshake through would send it.
    let (mut c, _) = passed(&h, 1);
    c.send_raw(&hello_frame());
    assert!(c.closed(), "an unsealed Hello was answered");
    // Sealed under another connection's key.
    let (_, other) = passed(&h, 2);
    let (mut c, _) = passed(&h, 3);
    let mut f = hello_frame();
    other.seal_frame(ToServer, 0, &mut f).unwrap();
    c.send_raw(&f);
    assert!(c.closed(), "another connection's seal was accepted");
    // Replayed: the first frame's tag again as the second.
    let (mut c, k) = passed(&h, 4);
    let mut f = hello_frame();
    k.seal_frame(ToServer, 0, &mut f).unwrap();
    c.send_raw(&f);
    c.seal = Some((k.clone(), 1, 0)); // to check the sealed reply
    assert_eq!(c.reply().unwrap().0.op, Op::HelloOk);
    c.send_raw(&f);
    assert!(c.closed(), "a replayed frame was served");
    // Altered after sealing: a Write's page list.
    let (mut c, k) = passed(&h, 5);
    c.seal = Some((k.clone(), 0, 0));
    assert_eq!(c.hello(1, 16).0.op, Op::HelloOk);
    let mut w = Frame::Write { pages: &[3] }.encode(9).to_vec();
    w.extend_from_slice(&pattern(3, 1));
    k.seal_frame(ToServer, 1, &mut w).unwrap();
    w[wire::HEADER_LEN] ^= 1; // page 3 becomes page 2
    c.send_raw(&w);
    assert!(c.closed(), "an altered Write was served");
    // The page was not written: a fresh sealed connection finds nothing.
    let (mut c, k) = passed(&h, 6);
    c.seal = Some((k, 0, 0));
    assert_eq!(c.hello(1, 16).0.op, Op::HelloOk);
    let r = c.read(&[2]);
    assert_eq!(error_code(&r), Some(ErrorCode::NotFound));
}
