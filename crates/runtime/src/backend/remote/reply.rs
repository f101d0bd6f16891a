//! Receiving and checking replies on a connection: headers, an Error
//! reply as `Refused` with its message, pages scattered straight into
//! place, and variable-length UCX replies.

use super::Server;
use crate::backend::transport::Transport;
use crate::backend::{BackendError, MAX_BATCH};
use farmem_sys::net::Wait;
use farmem_sys::PAGE_SIZE;
use farmem_wire::{self as wire, Header, Op, Reply, HEADER_LEN};
use std::io;

// What `frame_u32` relies on.
const _: () = assert!(MAX_BATCH * PAGE_SIZE <= u32::MAX as usize);

/// A page count or byte length of one frame, as the wire's 32-bit fields
/// hold it. A frame carries at most `MAX_BATCH` pages (its page
/// list is a `[u64; MAX_BATCH]`), and a handshake payload a few
/// dozen bytes, so the value fits (asserted above).
pub(super) fn frame_u32(n: usize) -> u32 {
    // In range: at most MAX_BATCH * PAGE_SIZE, see above.
    #[allow(clippy::cast_possible_truncation)]
    let n = n as u32;
    n
}

/// The page numbers `pages[i]` for `i` in `idx`, in that order.
pub(super) fn select(pages: &[u64], idx: &[usize]) -> [u64; MAX_BATCH] {
    let mut list = [0u64; MAX_BATCH];
    for (k, &i) in idx.iter().enumerate() {
        list[k] = pages[i];
    }
    list
}

pub(super) fn read_header(
    server: &Server,
    link: &dyn Transport,
    wait: Wait,
) -> Result<Header, BackendError> {
    let mut hb = [0u8; HEADER_LEN];
    link.recv_exact(&mut hb, wait).map_err(|e| server.io(e))?;
    Header::decode(&hb).map_err(|e| server.protocol(e.to_string()))
}

/// Check a reply header; an Error reply becomes `Refused` with its message.
pub(super) fn check_reply(
    server: &Server,
    link: &dyn Transport,
    h: &Header,
    op: Op,
    tag: u32,
    len: u32,
    wait: Wait,
) -> Result<(), BackendError> {
    if h.op == Op::Error {
        let mut msg = [0u8; wire::MAX_ERROR_MSG];
        let n = h.len as usize;
        link.recv_exact(&mut msg[..n], wait)
            .map_err(|e| server.io(e))?;
        return Err(refused(server, h, &msg[..n]));
    }
    if h.op != op || h.tag != tag || h.len != len {
        return Err(server.protocol(format!(
            "expected {op:?} tag {tag} len {len}, got {:?} tag {} len {}",
            h.op, h.tag, h.len
        )));
    }
    Ok(())
}

/// Receive a reply whose payload is expected to be exactly `data.len()`
/// bytes, header and payload in as few system calls as possible. An Error
/// reply (shorter) is recognised from its header and returned as `Refused`.
pub(super) fn recv_reply(
    server: &Server,
    link: &dyn Transport,
    op: Op,
    tag: u32,
    data: &mut [u8],
    wait: Wait,
) -> Result<(), BackendError> {
    let io_err = |e| server.io(e);
    let mut hb = [0u8; HEADER_LEN];
    let mut got = 0usize;
    // Until the header is complete, scatter into header and payload; only one
    // request is outstanding per connection, so nothing beyond this reply
    // can arrive.
    while got < HEADER_LEN {
        let r = link
            .recv_some(&mut [&mut hb[got..], &mut data[..]], wait)
            .map_err(io_err)?;
        if r == 0 {
            let eof = io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed by peer");
            return Err(io_err(eof));
        }
        got += r;
    }
    let in_data = got - HEADER_LEN;
    let h = Header::decode(&hb).map_err(|e| server.protocol(e.to_string()))?;
    if h.op == Op::Error {
        let n = h.len as usize;
        let mut msg = [0u8; wire::MAX_ERROR_MSG];
        let have = in_data.min(n);
        msg[..have].copy_from_slice(&data[..have]);
        link.recv_exact(&mut msg[have..n], wait).map_err(io_err)?;
        return Err(refused(server, &h, &msg[..n]));
    }
    if h.op != op || h.tag != tag || h.len as usize != data.len() {
        return Err(server.protocol(format!(
            "expected {op:?} tag {tag} len {}, got {:?} tag {} len {}",
            data.len(),
            h.op,
            h.tag,
            h.len
        )));
    }
    link.recv_exact(&mut data[in_data..], wait).map_err(io_err)
}

/// An Error reply (header `h`, message `msg`) as the backend's error.
pub(super) fn refused(server: &Server, h: &Header, msg: &[u8]) -> BackendError {
    match wire::decode_reply(h, msg) {
        Ok(Reply::Error { code, message }) => BackendError::Refused {
            server: server.name.clone(),
            code,
            message: String::from_utf8_lossy(message).into_owned(),
        },
        other => server.protocol(format!("an Error reply that does not decode: {other:?}")),
    }
}

pub(super) fn expect_reply(
    server: &Server,
    link: &dyn Transport,
    op: Op,
    tag: u32,
    payload: &mut [u8],
    wait: Wait,
) -> Result<Header, BackendError> {
    let h = read_header(server, link, wait)?;
    check_reply(server, link, &h, op, tag, frame_u32(payload.len()), wait)?;
    link.recv_exact(payload, wait).map_err(|e| server.io(e))?;
    Ok(h)
}

/// Receive a reply `op` (tag `tag`) with a payload of variable length into
/// `payload`; its length.
pub(super) fn recv_blob(
    server: &Server,
    link: &dyn Transport,
    op: Op,
    tag: u32,
    payload: &mut [u8],
    wait: Wait,
) -> Result<usize, BackendError> {
    let h = read_header(server, link, wait)?;
    if h.op == op && h.tag == tag {
        let n = h.len as usize;
        link.recv_exact(&mut payload[..n], wait)
            .map_err(|e| server.io(e))?;
        return Ok(n);
    }
    // An Error reply, or the wrong one: `check_reply` says which.
    check_reply(server, link, &h, op, tag, h.len, wait)?;
    Ok(0)
}
