//! Serving one decoded request but a Write and the handshake: one function
//! per request, each putting its reply into `out` (but a Read's pages and a
//! memory file's descriptor, which go straight to the socket).

use super::{grants, refuse, Door, Link};
use crate::session::{self, Token};
use crate::store::Store;
use crate::{lock, Shared};
use farmem_sys::net::{send_vectored_raw, RawBuf, MAX_IOV};
use farmem_wire::{self as wire, ErrorCode, Frame, Header, Request, ServerStats};
use std::io;
use std::sync::Arc;

/// The requests [`handle`] serves: every request but a Write (whose pages
/// stream into the store, `write::serve_write`) and the handshake
/// (`gate::authenticate`). Narrower than [`Request`], so that `handle` has
/// no arm that could only panic.
pub(super) enum Served<'a> {
    Hello {
        token: [u8; wire::TOKEN_LEN],
        max_pages: u64,
    },
    Read {
        pages: &'a [u8],
    },
    Free {
        start: u64,
        pages: u64,
    },
    Stats,
    UcxOpen,
    UcxChunk {
        chunk: u64,
    },
    MemfdOpen,
    MemfdChunk {
        chunk: u64,
    },
    MemfdWhere,
}

impl<'a> TryFrom<Request<'a>> for Served<'a> {
    type Error = Request<'a>;

    fn try_from(r: Request<'a>) -> Result<Self, Self::Error> {
        Ok(match r {
            Request::Hello { token, max_pages } => Served::Hello { token, max_pages },
            Request::Read { pages } => Served::Read { pages },
            Request::Free { start, pages } => Served::Free { start, pages },
            Request::Stats => Served::Stats,
            Request::UcxOpen => Served::UcxOpen,
            Request::UcxChunk { chunk } => Served::UcxChunk { chunk },
            Request::MemfdOpen => Served::MemfdOpen,
            Request::MemfdWhere => Served::MemfdWhere,
            Request::MemfdChunk { chunk } => Served::MemfdChunk { chunk },
            other @ (Request::Write { .. } | Request::Auth { .. } | Request::AuthProof { .. }) => {
                return Err(other)
            }
        })
    }
}

/// Handle one decoded request. The reply goes into `out`, except for page
/// data, which is sent straight from the store (and `out` left empty).
/// Returns whether the connection stays open.
pub(super) fn handle(
    sh: &Shared,
    session: &mut Option<(Token, Arc<Store>)>,
    h: &Header,
    req: Served<'_>,
    out: &mut Vec<u8>,
    link: Link,
) -> io::Result<bool> {
    match req {
        Served::Hello { token, max_pages } => hello(sh, session, h, token, max_pages, out, link),
        Served::Stats => stats(sh, h, out),
        Served::Read { pages } => in_session(session, pages, "Read", h, out, |s, out| {
            read(s, h, pages, out, link)
        }),
        Served::Free { start, pages } => in_session(session, &[], "Free", h, out, |s, out| {
            free(sh, s, h, start, pages, out)
        }),
        Served::UcxOpen => in_session(session, &[], "UcxOpen", h, out, |s, out| {
            grants::ucx_open(sh, s, h, out, link)
        }),
        Served::UcxChunk { chunk } => in_session(session, &[], "UcxChunk", h, out, |s, out| {
            grants::ucx_chunk(sh, s, h, chunk, out)
        }),
        Served::MemfdOpen => in_session(session, &[], "MemfdOpen", h, out, |s, out| {
            grants::memfd_open(sh, s, h, out, link)
        }),
        Served::MemfdWhere => in_session(session, &[], "MemfdWhere", h, out, |_, out| {
            grants::memfd_where(sh, h, out, link)
        }),
        Served::MemfdChunk { chunk } => in_session(session, &[], "MemfdChunk", h, out, |s, out| {
            grants::memfd_chunk(sh, s, h, chunk, out, link)
        }),
    }
}

/// Serve `op` in the connection's session, or refuse it: before Hello, or
/// for any of `pages` (a page list) beyond the session's pages.
fn in_session(
    session: &Option<(Token, Arc<Store>)>,
    pages: &[u8],
    op: &str,
    h: &Header,
    out: &mut Vec<u8>,
    serve: impl FnOnce(&Store, &mut Vec<u8>) -> io::Result<bool>,
) -> io::Result<bool> {
    match session::checked(session, wire::pages(pages), op) {
        Ok(s) => serve(s, out),
        Err((code, msg)) => refuse(out, h.tag, code, &msg),
    }
}

/// Hello: join the session named by `token` (opening it, at the front
/// doors), once per connection.
fn hello(
    sh: &Shared,
    session: &mut Option<(Token, Arc<Store>)>,
    h: &Header,
    token: Token,
    max_pages: u64,
    out: &mut Vec<u8>,
    link: Link,
) -> io::Result<bool> {
    if session.is_some() {
        return refuse(
            out,
            h.tag,
            ErrorCode::Malformed,
            "this connection already said Hello",
        );
    }
    let s = match session::join(sh, token, max_pages, link.peer, link.door != Door::Side) {
        Ok(s) => s,
        Err((code, msg)) => return refuse(out, h.tag, code, &msg),
    };
    *session = Some((token, s));
    let reply = Frame::HelloOk {
        capacity_pages: sh.capacity.total(),
        used_pages: sh.capacity.used(),
    };
    out.extend_from_slice(&reply.encode(h.tag));
    Ok(true)
}

fn stats(sh: &Shared, h: &Header, out: &mut Vec<u8>) -> io::Result<bool> {
    let sessions = lock(&sh.sessions).len() as u64;
    let conns = lock(&sh.conns).len() as u64;
    let reply = Frame::StatsOk(ServerStats {
        capacity_pages: sh.capacity.total(),
        used_pages: sh.capacity.used(),
        sessions,
        connections: conns,
        draining: sh.draining.load(std::sync::atomic::Ordering::Acquire),
    });
    out.extend_from_slice(&reply.encode(h.tag));
    Ok(true)
}

/// Read: the pages (each in range) go straight from the store into the
/// socket, after the reply's header (and its tag, on a sealed link).
fn read(s: &Store, h: &Header, pages: &[u8], out: &mut Vec<u8>, link: Link) -> io::Result<bool> {
    let Link { fd, wait, .. } = link;
    // Held until the last byte is sent: keeps Free from discarding
    // the pages meanwhile (store.rs, hazard 2).
    let access = s.access();
    if let Some(p) = access.first_absent(wire::pages(pages)) {
        return refuse(
            out,
            h.tag,
            ErrorCode::NotFound,
            &format!("page {p} was never written"),
        );
    }
    // Gather the pages straight from the store into the socket, in
    // groups that fit one sendmsg.
    let hdr = Frame::ReadOk { count: h.count }.encode(h.tag);
    // A ReadOk's tag covers its header and goes before the pages.
    let tag = link.seal.map(|s| s.reply_tag(&hdr));
    let mut parts = [RawBuf::EMPTY; MAX_IOV];
    parts[0] = RawBuf::of(&hdr);
    let mut k = 1;
    if let Some(tag) = &tag {
        parts[1] = RawBuf::of(tag);
        k = 2;
    }
    for p in wire::pages(pages) {
        if k == MAX_IOV {
            // SAFETY: `hdr` and `tag` are live; the pages are inside the
            // session's mapping, kept by the `Arc` and, under
            // `access`, safe from Free's discard.
            unsafe { send_vectored_raw(fd, &parts[..k], wait)? };
            k = 0;
        }
        parts[k] = access.page(p);
        k += 1;
    }
    // SAFETY: as above.
    unsafe { send_vectored_raw(fd, &parts[..k], wait)? };
    Ok(true)
}

/// Free: drop pages `[start, start+pages)` wherever the session keeps them
/// (its store and its one-sided chunks), and give back the capacity of
/// those it stored.
fn free(
    sh: &Shared,
    s: &Store,
    h: &Header,
    start: u64,
    pages: u64,
    out: &mut Vec<u8>,
) -> io::Result<bool> {
    let end = start.checked_add(pages);
    if end.is_none_or(|e| e > s.max_pages()) {
        return refuse(
            out,
            h.tag,
            ErrorCode::OutOfRange,
            "free range is beyond the session's pages",
        );
    }
    let freed = s.exclusive().remove_range(start, pages);
    if let Some(pool) = s.pool.get() {
        pool.discard(start, pages);
    }
    if let Some(pool) = s.memfd.get() {
        pool.discard(start, pages);
    }
    sh.capacity.give_back(freed);
    let released = u32::try_from(freed).unwrap_or(u32::MAX);
    out.extend_from_slice(&Frame::FreeOk { released }.encode(h.tag));
    Ok(true)
}
