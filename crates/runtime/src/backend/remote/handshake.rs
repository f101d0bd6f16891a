//! Greeting a server on a new connection: its credentials (on a Unix
//! socket), the mutual HMAC handshake (over TCP, when there is a secret),
//! Hello with the session's token, and on the first connection MemfdOpen or
//! UcxOpen, after which the session's pages may move one-sided. Nothing of
//! either is asked for before the handshake passed.

use super::conn::Conn;
use super::reply::{expect_reply, frame_u32, recv_blob};
use super::Server;
use crate::backend::transport::{StreamSocket, Transport};
use crate::backend::BackendError;
use farmem_sys::net::Wait;
use farmem_sys::PAGE_SIZE;
use farmem_wire::auth::{self, Secret};
use farmem_wire::seal::SessionKey;
use farmem_wire::{self as wire, Frame, Header, Op, Reply, ServerAddr};
use std::io;

/// Prove this client holds the shared secret, and check that the server
/// does (see `farmem_wire::auth`); the key that seals every later frame on
/// this connection.
pub(super) fn authenticate(
    server: &Server,
    link: &dyn Transport,
    secret: &Secret,
    wait: Wait,
) -> Result<SessionKey, BackendError> {
    let io_err = |e| server.io(e);
    let mut cn = [0u8; auth::NONCE_LEN];
    if !farmem_sys::process::random_bytes(&mut cn) {
        return Err(io_err(io::Error::other(
            "getrandom failed: no nonce for the handshake",
        )));
    }
    link.send(&[&Frame::Auth { nonce: &cn }.encode(0)], wait)
        .map_err(io_err)?;
    let mut payload = [0u8; auth::NONCE_LEN + auth::MAC_LEN];
    let h = expect_reply(server, link, Op::AuthChallenge, 0, &mut payload, wait)?;
    let Ok(Reply::AuthChallenge { nonce: sn, proof }) = wire::decode_reply(&h, &payload) else {
        return Err(server.protocol("an AuthChallenge that does not decode"));
    };
    if !secret.verify_server(&cn, &sn, &proof) {
        return Err(server.auth(format!(
                "it did not prove it holds the secret in {}: its secret file differs from this client's",
                secret.path().display()
            )));
    }
    let mine = secret.client_proof(&cn, &sn);
    link.send(&[&Frame::AuthProof { proof: &mine }.encode(0)], wait)
        .map_err(io_err)?;
    expect_reply(server, link, Op::AuthOk, 0, &mut [], wait)?;
    Ok(secret.session_key(&cn, &sn))
}

/// A fresh session token from the kernel's random source. The token is
/// what keeps other clients out of this session, so there is no fallback:
/// a predictable token would hand the session to anyone who guesses it.
pub(super) fn random_token() -> io::Result<[u8; wire::TOKEN_LEN]> {
    let mut t = [0u8; wire::TOKEN_LEN];
    farmem_sys::process::fill_random(&mut t).map(|()| t)
}

/// A server on a Unix socket proves who it is by its credentials
/// (`SO_PEERCRED`): it must run as this program's user, or as root. Any
/// other user could have bound the socket's name to read every page sent.
pub(super) fn check_peer(server: &Server, link: &dyn Transport) -> Result<(), BackendError> {
    let Some(uid) = link.peer_uid() else {
        return Ok(());
    };
    let uid = uid.map_err(|e| server.io(e))?;
    let me = farmem_sys::process::geteuid();
    if uid == me || uid == 0 {
        return Ok(());
    }
    Err(server.auth(format!(
            "the process on this Unix socket runs as uid {uid}, not as this program's user ({me}) or root; start your own memory server, or reach that one over TCP with its shared secret"
        )))
}

/// Ask the server behind `link` (this session's first connection) to move
/// the session's pages onto sealed memory files: true if it will, false
/// where it cannot and `required` is false.
pub(super) fn open_memfd(
    server: &Server,
    link: &dyn Transport,
    wait: Wait,
    required: bool,
) -> Result<bool, BackendError> {
    link.send(&[&Frame::MemfdOpen.encode(0)], wait)
        .map_err(|e| server.io(e))?;
    let mut payload = [0u8; 8];
    match expect_reply(server, link, Op::MemfdOpenOk, 0, &mut payload, wait) {
        Ok(h) => match wire::decode_reply(&h, &payload) {
            Ok(Reply::MemfdOpenOk { chunk_pages }) if chunk_pages == wire::CHUNK_PAGES => Ok(true),
            other => Err(server.protocol(format!(
                "a MemfdOpenOk that is not the protocol's ({} pages a chunk): {other:?}",
                wire::CHUNK_PAGES
            ))),
        },
        Err(BackendError::Refused {
            code: Some(wire::ErrorCode::Unsupported | wire::ErrorCode::UnknownOp),
            ..
        }) if !required => Ok(false),
        Err(BackendError::Refused { message, .. }) if required => Err(server.transport(format!(
            "FARMEM_TRANSPORT=memfd, and the server cannot: {message}"
        ))),
        Err(e) => Err(e),
    }
}

/// Come in by the side door of a TCP server on this host (see
/// `farmem_wire`): ask it where the door is (on the session's greeted,
/// and where there is a secret sealed, first connection), connect there,
/// check who holds it (`SO_PEERCRED`: this program's user or root), and
/// join the session with its token. None where the server has no door or
/// it cannot be used and `required` is false: pages then move over TCP.
pub(super) fn side_door(
    server: &Server,
    token: &[u8; wire::TOKEN_LEN],
    max_pages: u64,
    timeout_ms: u64,
    wait: Wait,
    required: bool,
) -> Result<Option<Conn>, BackendError> {
    let link = &*server.conns[0].link;
    link.send(&[&Frame::MemfdWhere.encode(0)], wait)
        .map_err(|e| server.io(e))?;
    let mut payload = [0u8; wire::MAX_UNIX_NAME];
    let n = match recv_blob(server, link, Op::MemfdWhereOk, 0, &mut payload, wait) {
        Ok(n) => n,
        Err(BackendError::Refused {
            code: Some(wire::ErrorCode::Unsupported | wire::ErrorCode::UnknownOp),
            ..
        }) if !required => return Ok(None),
        Err(BackendError::Refused { message, .. }) if required => {
            return Err(server.transport(format!(
            "FARMEM_TRANSPORT=memfd, and the server has no side door for memory files: {message}"
        )))
        }
        Err(e) => return Err(e),
    };
    let h = Header::new(Op::MemfdWhereOk, 0, 0, frame_u32(n));
    let name = match wire::decode_reply(&h, &payload[..n]) {
        Ok(Reply::MemfdWhereOk { name }) if name.iter().all(u8::is_ascii_graphic) => {
            String::from_utf8_lossy(name).into_owned()
        }
        other => {
            return Err(server.protocol(format!(
                "a side door's name that is not printable: {other:?}"
            )))
        }
    };
    let door = ServerAddr::UnixAbstract(name);
    let opened = (|| {
        let sock =
            StreamSocket::connect(&door, timeout_ms).map_err(|source| BackendError::Connect {
                server: format!("{} (its side door {door})", server.name),
                source,
            })?;
        check_peer(server, &sock)?;
        hello(server, &sock, token, max_pages, wait)?;
        Ok(Conn::new(Box::new(sock)))
    })();
    match opened {
        Ok(c) => Ok(Some(c)),
        Err(_) if !required => Ok(None),
        Err(e) => Err(e),
    }
}

/// Say Hello with `token` on `link`: join (or open) the session of
/// `max_pages` pages, and check the server's page size.
pub(super) fn hello(
    server: &Server,
    link: &dyn Transport,
    token: &[u8; wire::TOKEN_LEN],
    max_pages: u64,
    wait: Wait,
) -> Result<(), BackendError> {
    let hello = Frame::Hello { token, max_pages }.encode(0);
    link.send(&[&hello], wait).map_err(|e| server.io(e))?;
    let mut payload = [0u8; 24];
    let h = expect_reply(server, link, Op::HelloOk, 0, &mut payload, wait)?;
    if let Ok(Reply::HelloOk { page_size, .. }) = wire::decode_reply(&h, &payload) {
        if page_size != PAGE_SIZE as u64 {
            return Err(server.protocol(format!(
                "the server keeps {page_size}-byte pages; this client needs {PAGE_SIZE}"
            )));
        }
    }
    Ok(())
}

/// Ask the server behind `link` (this session's first connection) to move
/// the session's pages onto UCX: its worker address, or None where it has
/// no UCX and `required` is false. Its chunks must be the protocol's size.
pub(super) fn open_ucx(
    server: &Server,
    link: &dyn Transport,
    wait: Wait,
    required: bool,
) -> Result<Option<Vec<u8>>, BackendError> {
    link.send(&[&Frame::UcxOpen.encode(0)], wait)
        .map_err(|e| server.io(e))?;
    let mut payload = [0u8; 8 + wire::MAX_UCX_BLOB];
    let n = match recv_blob(server, link, Op::UcxOpenOk, 0, &mut payload, wait) {
        Ok(n) => n,
        Err(BackendError::Refused {
            code: Some(wire::ErrorCode::Unsupported | wire::ErrorCode::UnknownOp),
            message,
            ..
        }) if !required => {
            let _ = message;
            return Ok(None);
        }
        Err(BackendError::Refused { message, .. }) if required => {
            return Err(server.transport(format!(
                "FARMEM_TRANSPORT=ucx, and the server cannot: {message}"
            )))
        }
        Err(e) => return Err(e),
    };
    let h = Header::new(Op::UcxOpenOk, 0, 0, frame_u32(n));
    match wire::decode_reply(&h, &payload[..n]) {
        Ok(Reply::UcxOpenOk {
            chunk_pages,
            address,
        }) if chunk_pages == wire::CHUNK_PAGES => Ok(Some(address.to_vec())),
        other => Err(server.protocol(format!(
            "a UcxOpenOk that is not the protocol's ({} pages a chunk): {other:?}",
            wire::CHUNK_PAGES
        ))),
    }
}
