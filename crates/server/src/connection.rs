//! One connection: read requests, serve them, reply. Hello, Read, Free and
//! Stats are small and go through a buffer; a Write's page data goes from
//! the socket straight into the session's store, and a Read's pages from the
//! store straight into the socket.

use crate::gate::{authenticate, Gate, Seal};
use crate::input::Input;
use crate::metrics::{ConnCounters, Refusal};
use crate::session::{self, Token};
use crate::store::{Access, Store};
use crate::{lock, Shared};
use farmem_sys::net::{
    send_vectored, send_vectored_raw, send_with_fd, set_nonblocking, RawBuf, Wait, MAX_IOV,
};
use farmem_wire::{
    self as wire, seal::TAG_LEN, ErrorCode, Frame, Header, Op, Request, ServerStats, WireError,
    HEADER_LEN, MAX_FRAME_PAGES, PAGE_SIZE,
};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use thiserror::Error;

/// Why a connection ended early.
#[derive(Debug, Error)]
pub(crate) enum ConnError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("protocol error, connection closed: {0}")]
    Protocol(#[from] wire::WireError),
    #[error("a {0:?} failed its seal (altered, replayed or forged on the way, or a client with another session key); connection closed")]
    Forged(Op),
}

/// Which door a connection came in by.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Door {
    /// The TCP address the server was told to listen on.
    Tcp,
    /// The Unix socket the server was told to listen on.
    Unix,
    /// The side door of a TCP server: an abstract Unix socket of a random
    /// name that only a session's client learns (MemfdWhere), for a client
    /// on this host to take the session's memory files. It joins sessions
    /// already open, and serves only users memory files may go to.
    Side,
}

pub(crate) fn serve_connection(
    sh: &Shared,
    stream: OwnedFd,
    door: Door,
    peer: &str,
    counters: &ConnCounters,
) -> Result<(), ConnError> {
    let fd = stream.as_raw_fd();
    let tcp = door == Door::Tcp;
    set_nonblocking(fd)?;
    // Between frames, wait for the next one forever once the client has
    // said Hello (EOF or shutdown ends the loop), spinning first; before
    // Hello, only `hello_timeout`. Within a frame, and for a reply to
    // leave, `client_timeout`: a client that sends half a frame and stalls
    // costs this server one thread for that long, no more.
    let idle_after_hello = Wait {
        spin_ns: sh.cfg.spin_ns,
        timeout_ns: u64::MAX / 2,
    };
    let idle_before_hello = Wait {
        spin_ns: sh.cfg.spin_ns,
        timeout_ns: sh.cfg.hello_timeout_ns,
    };
    let reply_wait = Wait {
        spin_ns: sh.cfg.spin_ns,
        timeout_ns: sh.cfg.client_timeout_ns,
    };
    let base = Link {
        fd,
        wait: reply_wait,
        peer,
        tcp,
        door,
        // Such a connection serves nothing before the handshake passed
        // (the gate below), so by `handle` it has.
        authenticated: tcp && sh.cfg.secret.is_some(),
        seal: None,
    };
    // Set once the handshake has passed: from then on every frame both ways
    // carries a tag (`farmem_wire::seal`).
    let mut seal: Option<Seal> = None;
    let mut session: Option<(Token, Arc<Store>)> = None;
    let mut gate = if tcp && sh.cfg.secret.is_some() {
        Gate::Closed
    } else {
        Gate::Open
    };
    let mut input = Input::new();
    let mut out = Vec::with_capacity(HEADER_LEN + wire::MAX_ERROR_MSG);
    let result = loop {
        let idle = if session.is_some() {
            idle_after_hello
        } else {
            idle_before_hello
        };
        match input
            .fill(fd, 1, idle)
            .and_then(|more| Ok(more && input.fill(fd, HEADER_LEN, reply_wait)?))
        {
            Ok(true) => {}
            Ok(false) => break Ok(()),
            Err(e) => break Err(e.into()),
        }
        let link = Link {
            seal: seal.as_ref(),
            ..base
        };
        let tag_len = if seal.is_some() { TAG_LEN } else { 0 };
        let mut hb = [0u8; HEADER_LEN];
        hb.copy_from_slice(input.peek(HEADER_LEN));
        let h = match Header::decode(&hb) {
            Ok(h) => h,
            Err(e) => {
                let msg = e.to_string();
                let mut reply = Frame::Error {
                    code: e.code(),
                    message: &msg,
                }
                .encode(0)
                .to_vec();
                counters.error(e.code() as u32);
                if seal
                    .as_ref()
                    .is_none_or(|s| s.seal_reply(&mut reply).is_ok())
                {
                    let _ = send_vectored(fd, &[&reply], reply_wait);
                }
                break Err(e.into());
            }
        };
        out.clear();
        let gated = !matches!(gate, Gate::Open) && !matches!(h.op, Op::Auth | Op::AuthProof);
        let keep = match h.op {
            // Nothing but the handshake before it has passed: read past the
            // payload (so the refusal is not lost to a reset), refuse, close.
            _ if gated => {
                // (Never sealed: the seal starts after the handshake.)
                input.consume(HEADER_LEN);
                input.skip(fd, h.len as usize, reply_wait).map(|()| {
                    sh.metrics.refused(Refusal::Auth);
                    tracing::warn!("refused {peer}: it sent {:?} without the shared secret (give the client this server's secret file)", h.op);
                    error_reply(
                        &mut out,
                        h.tag,
                        ErrorCode::AuthRequired,
                        "this server requires the shared secret: give this client the server's secret file (FARMEM_SECRET_FILE, default ~/.config/farmem/secret; see `farmem secret init`)",
                    );
                    false
                }).map_err(ConnError::from)
            }
            // Page data goes straight into the store, not through `input`.
            Op::Write => serve_write(sh, &session, &h, &mut input, &mut out, &link),
            Op::Hello
            | Op::Read
            | Op::Free
            | Op::Stats
            | Op::Auth
            | Op::AuthProof
            | Op::UcxOpen
            | Op::UcxChunk
            | Op::MemfdOpen
            | Op::MemfdChunk
            | Op::MemfdWhere => {
                // Small payloads (a Read's page list is at most 2 KiB),
                // each covered whole by a sealed frame's tag.
                let frame = HEADER_LEN + h.len as usize;
                if let Err(e) = input.fill(fd, frame + tag_len, reply_wait) {
                    break Err(e.into());
                }
                if let Some(seal) = &seal {
                    let (covered, tag) = input.peek(frame + TAG_LEN).split_at(frame);
                    if !seal.open(covered, tag) {
                        break Err(ConnError::Forged(h.op));
                    }
                }
                let payload = &input.peek(frame)[HEADER_LEN..];
                let keep = match wire::decode_request(&h, payload) {
                    Ok(req @ (Request::Auth { .. } | Request::AuthProof { .. })) => {
                        Ok(authenticate(sh, &mut gate, &h, req, &mut out, peer))
                    }
                    Ok(req) => match Served::try_from(req) {
                        Ok(req) => handle(sh, &mut session, &h, req, &mut out, link),
                        // Writes are routed by their header before any
                        // decoding; a decoder that returned one anyway is
                        // answered, not trusted.
                        Err(_) => {
                            error_reply(
                                &mut out,
                                h.tag,
                                ErrorCode::Malformed,
                                "a request this server cannot serve here",
                            );
                            Ok(false)
                        }
                    },
                    Err(e) => {
                        error_reply(&mut out, h.tag, e.code(), &e.to_string());
                        Ok(e.code().keeps_connection())
                    }
                };
                input.consume(frame + tag_len);
                keep.map_err(ConnError::from)
            }
            // A reply sent as a request: read past its payload (closing with
            // unread input would reset the connection under the error
            // reply), refuse it and close.
            _ => {
                input.consume(HEADER_LEN);
                input
                    .skip(fd, h.len as usize + tag_len, reply_wait)
                    .map(|()| {
                        let e = WireError::UnknownOp(h.op as u16);
                        error_reply(&mut out, h.tag, e.code(), &e.to_string());
                        false
                    })
                    .map_err(ConnError::from)
            }
        };
        let keep = match keep {
            Ok(k) => k,
            Err(e) => break Err(e),
        };
        counters.frame(&h, &out);
        if !out.is_empty() {
            if let Some(seal) = &seal {
                if let Err(e) = seal.seal_reply(&mut out) {
                    break Err(e.into());
                }
            }
            if let Err(e) = send_vectored(fd, &[&out], reply_wait) {
                break Err(e.into());
            }
        }
        if !keep {
            break Ok(());
        }
        // AuthOk has left unsealed; every frame from here on is sealed.
        if let Gate::Passed { .. } = gate {
            if let Gate::Passed { key } = std::mem::replace(&mut gate, Gate::Open) {
                seal = Some(Seal::new(key));
            }
        }
    };
    if let Some((token, _)) = session {
        session::leave(sh, token);
    }
    // A client whose secret differs stops at this server's proof and
    // hangs up: say so here too.
    if let (Gate::Challenged { .. }, Some(secret)) = (&gate, sh.cfg.secret.as_deref()) {
        sh.metrics.refused(Refusal::Auth);
        sh.metrics.auth_failed();
        tracing::warn!(
            "refused {peer}: it hung up after this server's proof, which it did not accept (its secret file differs from {}?)",
            secret.path().display()
        );
    }
    result
}

/// The requests [`handle`] serves: every request but a Write (whose pages
/// stream into the store, `serve_write`) and the handshake
/// (`authenticate`). Narrower than [`Request`], so that `handle` has no arm
/// that could only panic.
enum Served<'a> {
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

/// The connection's socket, how long a reply may wait to leave, the
/// peer's name (for sessions it opens), what kind of peer it is, and the
/// seal on its frames once the handshake has passed.
#[derive(Clone, Copy)]
struct Link<'a> {
    fd: std::os::fd::RawFd,
    wait: Wait,
    peer: &'a str,
    /// Over TCP (else a Unix socket).
    tcp: bool,
    door: Door,
    /// The peer proved it holds the shared secret (the HMAC handshake).
    authenticated: bool,
    seal: Option<&'a Seal>,
}

/// Put an Error reply into `out`.
pub(crate) fn error_reply(out: &mut Vec<u8>, tag: u32, code: ErrorCode, message: &str) {
    out.extend_from_slice(&Frame::Error { code, message }.encode(tag));
}

/// Handle one decoded request. The reply goes into `out`, except for page
/// data, which is sent straight from the store (and `out` left empty).
/// Returns whether the connection stays open.
fn handle(
    sh: &Shared,
    session: &mut Option<(Token, Arc<Store>)>,
    h: &Header,
    req: Served<'_>,
    out: &mut Vec<u8>,
    link: Link,
) -> io::Result<bool> {
    let Link { fd, wait, peer, .. } = link;
    let err = |out: &mut Vec<u8>, code: ErrorCode, msg: &str| {
        error_reply(out, h.tag, code, msg);
        Ok(code.keeps_connection())
    };
    match req {
        Served::Hello { token, max_pages } => {
            if session.is_some() {
                return err(
                    out,
                    ErrorCode::Malformed,
                    "this connection already said Hello",
                );
            }
            let s = match session::join(sh, token, max_pages, peer, link.door != Door::Side) {
                Ok(s) => s,
                Err((code, msg)) => return err(out, code, &msg),
            };
            *session = Some((token, s));
            let reply = Frame::HelloOk {
                capacity_pages: sh.cfg.capacity_pages,
                used_pages: sh.used_pages.load(Ordering::Relaxed),
            };
            out.extend_from_slice(&reply.encode(h.tag));
            Ok(true)
        }
        Served::Stats => {
            let sessions = lock(&sh.sessions).len() as u64;
            let conns = lock(&sh.conns).len() as u64;
            let reply = Frame::StatsOk(ServerStats {
                capacity_pages: sh.cfg.capacity_pages,
                used_pages: sh.used_pages.load(Ordering::Relaxed),
                sessions,
                connections: conns,
            });
            out.extend_from_slice(&reply.encode(h.tag));
            Ok(true)
        }
        Served::Read { pages } => {
            let s = match session::checked(session, wire::pages(pages), "Read") {
                Ok(s) => s,
                Err((code, msg)) => return err(out, code, &msg),
            };
            // Held until the last byte is sent: keeps Free from discarding
            // the pages meanwhile (store.rs, hazard 2).
            let access = s.access();
            if let Some(p) = access.first_absent(wire::pages(pages)) {
                return err(
                    out,
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
        Served::UcxOpen => {
            let Some((_, s)) = session else {
                return err(out, ErrorCode::NoSession, "say Hello before UcxOpen");
            };
            // UCX serves software RMA to any peer that reaches its worker,
            // whatever the key: it starts only for a peer that proved it
            // holds the secret, never for a Unix or unauthenticated one.
            if !link.authenticated {
                return err(
                    out,
                    ErrorCode::Unsupported,
                    "UCX is offered only on TCP to a client that passed the shared-secret handshake (start the server with --secret-file); on this host use the memory-file path (a Unix socket)",
                );
            }
            let engine = match sh.ucx() {
                Ok(e) => e,
                Err(why) => {
                    return err(
                        out,
                        ErrorCode::Unsupported,
                        &format!("this server has no UCX: {why}"),
                    )
                }
            };
            let pool = s
                .pool
                .get_or_init(|| crate::ucx::Pool::new(engine.clone(), s.max_pages()));
            let address = pool.engine().address();
            if address.len() > wire::MAX_UCX_BLOB {
                return err(
                    out,
                    ErrorCode::Unsupported,
                    &format!(
                        "this server's UCX worker address has {} bytes, more than the protocol carries ({}); limit its devices (UCX_NET_DEVICES)",
                        address.len(),
                        wire::MAX_UCX_BLOB
                    ),
                );
            }
            let reply = Frame::UcxOpenOk {
                chunk_pages: crate::ucx::CHUNK_PAGES,
                address,
            };
            out.extend_from_slice(&reply.encode(h.tag));
            Ok(true)
        }
        Served::UcxChunk { chunk } => {
            let Some((_, s)) = session else {
                return err(out, ErrorCode::NoSession, "say Hello before UcxChunk");
            };
            let Some(pool) = s.pool.get() else {
                return err(out, ErrorCode::Malformed, "send UcxOpen before UcxChunk");
            };
            let charge = |pages| charge_chunk(sh, s, pages);
            let uncharge = |pages| {
                sh.used_pages.fetch_sub(pages, Ordering::AcqRel);
            };
            match pool.grant(chunk, charge, uncharge) {
                Ok((base, rkey)) => {
                    out.extend_from_slice(&Frame::UcxChunkOk { base, rkey: &rkey }.encode(h.tag));
                    Ok(true)
                }
                Err(crate::ucx::GrantError::OutOfRange(m)) => err(out, ErrorCode::OutOfRange, &m),
                Err(crate::ucx::GrantError::Capacity(m)) => err(out, ErrorCode::Capacity, &m),
                Err(crate::ucx::GrantError::Ucx(m)) => err(out, ErrorCode::Unsupported, &m),
            }
        }
        Served::MemfdOpen => {
            let Some((_, s)) = session else {
                return err(out, ErrorCode::NoSession, "say Hello before MemfdOpen");
            };
            if let Err(why) = memfd_peer_ok(sh, &link) {
                sh.metrics.refused(Refusal::Auth);
                tracing::warn!("refused {peer} memory files: {why}");
                return err(out, ErrorCode::Unsupported, &why);
            }
            s.memfd.get_or_init(|| {
                crate::memfd::MemfdPool::new(s.max_pages(), same_memory_cgroup(link.fd))
            });
            let reply = Frame::MemfdOpenOk {
                chunk_pages: wire::CHUNK_PAGES,
            };
            out.extend_from_slice(&reply.encode(h.tag));
            Ok(true)
        }
        Served::MemfdWhere => {
            if session.is_none() {
                return err(out, ErrorCode::NoSession, "say Hello before MemfdWhere");
            }
            match (&sh.side_door, link.door) {
                (Some(name), Door::Tcp) => {
                    let reply = Frame::MemfdWhereOk {
                        name: name.as_bytes(),
                    };
                    out.extend_from_slice(&reply.encode(h.tag));
                    Ok(true)
                }
                _ => err(
                    out,
                    ErrorCode::Unsupported,
                    "this server has no side door for memory files (it listens on a Unix socket, or could not open one)",
                ),
            }
        }
        Served::MemfdChunk { chunk } => {
            let Some((_, s)) = session else {
                return err(out, ErrorCode::NoSession, "say Hello before MemfdChunk");
            };
            let Some(pool) = s.memfd.get() else {
                return err(
                    out,
                    ErrorCode::Malformed,
                    "send MemfdOpen before MemfdChunk",
                );
            };
            let uncharge = |pages| {
                sh.used_pages.fetch_sub(pages, Ordering::AcqRel);
            };
            match pool.grant(chunk, |pages| charge_chunk(sh, s, pages), uncharge) {
                Ok((chunk_fd, pages)) => {
                    // Never sealed: memory files pass only on a Unix
                    // socket (`memfd_peer_ok`), which takes no handshake.
                    let reply = Frame::MemfdChunkOk { chunk, pages }.encode(h.tag);
                    // Sent here, with the descriptor; `out` stays empty.
                    send_with_fd(fd, &reply, chunk_fd.as_raw_fd(), wait)?;
                    Ok(true)
                }
                Err(crate::memfd::GrantError::OutOfRange(m)) => err(out, ErrorCode::OutOfRange, &m),
                Err(crate::memfd::GrantError::Capacity(m)) => err(out, ErrorCode::Capacity, &m),
                Err(crate::memfd::GrantError::System(m)) => err(out, ErrorCode::Unsupported, &m),
            }
        }
        Served::Free { start, pages } => {
            let Some((_, s)) = session else {
                return err(out, ErrorCode::NoSession, "say Hello before Free");
            };
            let end = start.checked_add(pages);
            if end.is_none_or(|e| e > s.max_pages()) {
                return err(
                    out,
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
            sh.used_pages.fetch_sub(freed, Ordering::AcqRel);
            let released = u32::try_from(freed).unwrap_or(u32::MAX);
            out.extend_from_slice(&Frame::FreeOk { released }.encode(h.tag));
            Ok(true)
        }
    }
}

/// Reserve `pages` of the server's capacity and of session `s`'s quota
/// for a chunk of one-sided pages, or say why not (one message for both
/// one-sided paths).
fn charge_chunk(sh: &Shared, s: &Store, pages: u64) -> Result<(), String> {
    let quota = sh.cfg.session_quota_pages;
    let mine = s.charged();
    if quota > 0 && mine + pages > quota {
        sh.metrics.refused(Refusal::Quota);
        return Err(format!(
            "this session's quota is full ({mine} of {quota} pages, and a chunk is {pages}); the server was started with --session-quota"
        ));
    }
    let cap = sh.cfg.capacity_pages;
    let mut used = sh.used_pages.load(Ordering::Acquire);
    loop {
        if used + pages > cap {
            sh.metrics.refused(Refusal::Capacity);
            return Err(format!(
                "server is full ({used} of {cap} pages used, and a chunk is {pages}); start it with a larger --capacity, or add servers"
            ));
        }
        match sh.used_pages.compare_exchange_weak(
            used,
            used + pages,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return Ok(()),
            Err(now) => used = now,
        }
    }
}

/// Whether the peer on `link` may hold this server's memory files: only on
/// a Unix socket, and only a process of a user this server accepts
/// (`SO_PEERCRED`; its own user, or one named with `--memfd-uid`).
fn memfd_peer_ok(sh: &Shared, link: &Link) -> Result<(), String> {
    if link.tcp {
        return Err("memory files pass only over a Unix socket; a client on this host takes them at the side door (MemfdWhere), over TCP from elsewhere pages move through the socket (or UCX on RDMA)".into());
    }
    side_peer_ok(sh, link.fd)
}

/// Whether the process on Unix socket `fd` is in this server's memory
/// cgroup (false where either cannot be read: the server then pays).
fn same_memory_cgroup(fd: std::os::fd::RawFd) -> bool {
    let Ok(pid) = farmem_sys::net::peer_pid(fd) else {
        return false;
    };
    let mine = farmem_sys::process::memory_cgroup(None);
    pid != 0 && mine.is_some() && farmem_sys::process::memory_cgroup(Some(pid)) == mine
}

/// Whether the process on Unix socket `fd` runs as a user this server
/// hands memory files to (and so may come in by the side door).
pub(crate) fn side_peer_ok(sh: &Shared, fd: std::os::fd::RawFd) -> Result<(), String> {
    let uid = farmem_sys::net::peer_uid(fd)
        .map_err(|e| format!("the peer's credentials cannot be read (SO_PEERCRED: {e})"))?;
    let me = farmem_sys::process::geteuid();
    if uid == me || sh.cfg.memfd_uids.contains(&uid) {
        Ok(())
    } else {
        Err(format!(
            "the peer runs as uid {uid}, and this server hands its memory files only to uid {me}{}; start it with --memfd-uid {uid} to allow that user",
            if sh.cfg.memfd_uids.is_empty() { String::new() } else { format!(" and {:?}", sh.cfg.memfd_uids) }
        ))
    }
}

/// Serve a Write whose header is at the front of `input`: validate it and
/// reserve capacity from its page list, then receive the page data straight
/// into the store. Returns whether the connection stays open.
fn serve_write(
    sh: &Shared,
    session: &Option<(Token, Arc<Store>)>,
    h: &Header,
    input: &mut Input,
    out: &mut Vec<u8>,
    link: &Link,
) -> Result<bool, ConnError> {
    let Link { fd, wait, .. } = *link;
    let n = h.count as usize;
    // The header and page list, then a sealed frame's tag (covering both),
    // checked before any page data is taken.
    let head = HEADER_LEN + n * 8;
    let tag_len = if link.seal.is_some() { TAG_LEN } else { 0 };
    input.fill(fd, head + tag_len, wait)?;
    if let Some(seal) = link.seal {
        let (covered, tag) = input.peek(head + TAG_LEN).split_at(head);
        if !seal.open(covered, tag) {
            return Err(ConnError::Forged(Op::Write));
        }
    }
    let mut list = [0u64; MAX_FRAME_PAGES as usize];
    for (d, p) in list
        .iter_mut()
        .zip(wire::pages(&input.peek(head)[HEADER_LEN..]))
    {
        *d = p;
    }
    input.consume(head + tag_len);
    let pages = &list[..n];
    // A refused Write's data is still on the wire: read past it, then reply.
    let mut refuse = |code: ErrorCode, msg: &str| {
        input.skip(fd, n * PAGE_SIZE, wait)?;
        error_reply(out, h.tag, code, msg);
        Ok(code.keeps_connection())
    };
    let s = match session::checked(session, pages.iter().copied(), "Write") {
        Ok(s) => s,
        Err((code, msg)) => return refuse(code, &msg),
    };
    let mut unique = list;
    let unique = &mut unique[..n];
    unique.sort_unstable();
    let unique = {
        let mut k = 0;
        for i in 0..n {
            if i == 0 || unique[i] != unique[k - 1] {
                unique[k] = unique[i];
                k += 1;
            }
        }
        &unique[..k]
    };
    // Held from the count to the bit set: no Free may slip in between
    // (store.rs, hazard 2).
    let access = s.access();
    let new = access.count_absent(unique);
    // The session's quota (checked, not reserved: connections of one session
    // writing at once may pass it by a batch each).
    let quota = sh.cfg.session_quota_pages;
    if quota > 0 && s.len() + new > quota {
        drop(access);
        sh.metrics.refused(Refusal::Quota);
        return refuse(
            ErrorCode::Capacity,
            &format!(
                "this session's quota is full ({} of {quota} pages); the server was started with --session-quota",
                s.len()
            ),
        );
    }
    // Reserve capacity for the whole batch first: all or nothing.
    let reserved = sh
        .used_pages
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
            (u + new <= sh.cfg.capacity_pages).then_some(u + new)
        })
        .is_ok();
    if !reserved {
        drop(access);
        sh.metrics.refused(Refusal::Capacity);
        return refuse(
            ErrorCode::Capacity,
            &format!(
                "server capacity exhausted ({} of {} pages used); start it with a larger --capacity or add servers",
                sh.used_pages.load(Ordering::Relaxed),
                sh.cfg.capacity_pages
            ),
        );
    }
    if let Err(e) = receive_pages(&access, pages, input, fd, wait) {
        // Cut off mid-frame: pages new to the batch stay absent (and their
        // memory goes back); pages it was overwriting hold a mix of old and
        // new bytes, as a client whose write failed must expect.
        access.discard_absent(unique);
        sh.used_pages.fetch_sub(new, Ordering::AcqRel);
        return Err(e.into());
    }
    // Fewer than reserved only when another connection of the session wrote
    // one of these pages meanwhile (hazard 1); give the surplus back.
    let added = access.mark_present(unique);
    debug_assert!(added <= new, "only Free clears a bit, and it waits for us");
    sh.used_pages
        .fetch_sub(new.saturating_sub(added), Ordering::AcqRel);
    drop(access);
    out.extend_from_slice(&Frame::WriteOk { count: h.count }.encode(h.tag));
    Ok(true)
}

/// Receive a Write's page data (page `pages[i]` gets the i-th 4 KiB) into
/// the store: what `input` already holds is copied, the rest comes from the
/// socket straight into place.
fn receive_pages(
    access: &Access<'_>,
    pages: &[u64],
    input: &mut Input,
    fd: std::os::fd::RawFd,
    wait: Wait,
) -> io::Result<()> {
    let buffered = input.take(pages.len() * PAGE_SIZE);
    for (i, chunk) in buffered.chunks(PAGE_SIZE).enumerate() {
        // SAFETY: the destination is the start of one page inside the
        // session's mapping (the page number was range-checked) and the
        // chunk is at most a page; the source is this connection's own
        // buffer, which cannot overlap the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(chunk.as_ptr(), access.page(pages[i]).ptr, chunk.len())
        };
    }
    let done = buffered.len();
    let mut parts = [RawBuf::EMPTY; MAX_IOV];
    let mut k = 0;
    for (i, &p) in pages.iter().enumerate().skip(done / PAGE_SIZE) {
        let mut b = access.page(p);
        if i == done / PAGE_SIZE {
            // The rest of a page begun from the buffer.
            let o = done % PAGE_SIZE;
            b.ptr = b.ptr.wrapping_add(o);
            b.len -= o;
        }
        parts[k] = b;
        k += 1;
        if k == MAX_IOV {
            // SAFETY: the ranges lie in the session's mapping, kept by the
            // `Arc`, safe from Free under `access`, and never referenced by
            // Rust code.
            unsafe { farmem_sys::net::recv_exact_vectored_raw(fd, &parts[..k], wait)? };
            k = 0;
        }
    }
    // SAFETY: as above.
    unsafe { farmem_sys::net::recv_exact_vectored_raw(fd, &parts[..k], wait) }
}
