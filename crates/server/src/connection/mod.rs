//! One connection: read requests, serve them, reply. Hello, Read, Free and
//! Stats are small and go through a buffer; a Write's page data goes from
//! the socket straight into the session's store, and a Read's pages from
//! the store straight into the socket.
//!
//! This module is the connection loop: a frame's header, then who serves
//! it, then its reply, sealed once the handshake has passed. Its parts:
//! `gate` (the shared-secret handshake and the seal), `input` (the input
//! buffer), `requests` (one function per small request), `grants` (the
//! one-sided page paths: UCX and memory-file chunks, the side door) and
//! `write` (a Write's pages, from the socket into the store).

mod gate;
mod grants;
mod input;
mod requests;
mod write;

pub(crate) use grants::side_peer_ok;

use crate::capacity::{Refused, Reservation};
use crate::metrics::{ConnCounters, Refusal};
use crate::session::{self, Token};
use crate::store::Store;
use crate::Shared;
use farmem_sys::net::{send_vectored, set_nonblocking, Wait};
use farmem_wire::{
    self as wire, seal::TAG_LEN, ErrorCode, Frame, Header, Op, Request, WireError, HEADER_LEN,
};
use gate::{authenticate, Gate, Seal};
use input::Input;
use requests::Served;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
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

/// Put an Error reply to request `tag` into `out`; returns whether the
/// connection stays open after it.
fn refuse(out: &mut Vec<u8>, tag: u32, code: ErrorCode, message: &str) -> io::Result<bool> {
    error_reply(out, tag, code, message);
    Ok(code.keeps_connection())
}

/// Reserve `pages` of the server's capacity and of session `s`'s quota
/// (`crate::capacity`), counting a refusal in the metrics: for a Write and
/// for a one-sided chunk alike.
fn reserve<'a>(sh: &'a Shared, s: &Store, pages: u64) -> Result<Reservation<'a>, Refused> {
    sh.capacity
        .reserve(s.charged(), pages)
        .inspect_err(|r| sh.metrics.refused(r.reason()))
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
    let reply_wait = Wait {
        spin_ns: sh.cfg.spin_ns,
        timeout_ns: sh.cfg.client_timeout_ns,
    };
    let mut conn = Conn {
        sh,
        counters,
        base: Link {
            fd,
            wait: reply_wait,
            peer,
            tcp,
            door,
            // Such a connection serves nothing before the handshake passed
            // (the gate below), so by `handle` it has.
            authenticated: tcp && sh.cfg.secret.is_some(),
            seal: None,
        },
        idle_after_hello: Wait {
            spin_ns: sh.cfg.spin_ns,
            timeout_ns: u64::MAX / 2,
        },
        idle_before_hello: Wait {
            spin_ns: sh.cfg.spin_ns,
            timeout_ns: sh.cfg.hello_timeout_ns,
        },
        seal: None,
        session: None,
        gate: if tcp && sh.cfg.secret.is_some() {
            Gate::Closed
        } else {
            Gate::Open
        },
        input: Input::new(),
        out: Vec::with_capacity(HEADER_LEN + wire::MAX_ERROR_MSG),
    };
    let result = conn.run();
    conn.close();
    result
}

/// A connection's state from frame to frame (one thread owns it).
struct Conn<'a> {
    sh: &'a Shared,
    counters: &'a ConnCounters,
    /// The link, but for its seal (`seal` below, lent to each request).
    base: Link<'a>,
    idle_after_hello: Wait,
    idle_before_hello: Wait,
    /// Set once the handshake has passed: from then on every frame both
    /// ways carries a tag (`farmem_wire::seal`).
    seal: Option<Seal>,
    session: Option<(Token, Arc<Store>)>,
    gate: Gate,
    input: Input,
    /// The reply being made.
    out: Vec<u8>,
}

impl Conn<'_> {
    /// Serve frames until the peer closes, a request closes the
    /// connection, or something fails.
    fn run(&mut self) -> Result<(), ConnError> {
        let Link { fd, wait, .. } = self.base;
        loop {
            let Some(h) = self.next_header()? else {
                return Ok(());
            };
            self.out.clear();
            let keep = self.serve_frame(&h)?;
            self.counters.frame(&h, &self.out);
            if !self.out.is_empty() {
                if let Some(seal) = &self.seal {
                    seal.seal_reply(&mut self.out)?;
                }
                send_vectored(fd, &[&self.out], wait)?;
            }
            if !keep {
                return Ok(());
            }
            // AuthOk has left unsealed; every frame from here on is sealed.
            if let Gate::Passed { .. } = self.gate {
                if let Gate::Passed { key } = std::mem::replace(&mut self.gate, Gate::Open) {
                    self.seal = Some(Seal::new(key));
                }
            }
        }
    }

    /// The next frame's header, once it is buffered; None when the peer
    /// closed cleanly between frames. A header that does not decode is
    /// answered (if the reply can leave) and ends the connection.
    fn next_header(&mut self) -> Result<Option<Header>, ConnError> {
        let Link { fd, wait, .. } = self.base;
        let idle = if self.session.is_some() {
            self.idle_after_hello
        } else {
            self.idle_before_hello
        };
        if !self.input.fill(fd, 1, idle)? || !self.input.fill(fd, HEADER_LEN, wait)? {
            return Ok(None);
        }
        let mut hb = [0u8; HEADER_LEN];
        hb.copy_from_slice(self.input.peek(HEADER_LEN));
        match Header::decode(&hb) {
            Ok(h) => Ok(Some(h)),
            Err(e) => {
                let msg = e.to_string();
                let mut reply = Frame::Error {
                    code: e.code(),
                    message: &msg,
                }
                .encode(0)
                .to_vec();
                self.counters.error(e.code() as u32);
                if self
                    .seal
                    .as_ref()
                    .is_none_or(|s| s.seal_reply(&mut reply).is_ok())
                {
                    let _ = send_vectored(fd, &[&reply], wait);
                }
                Err(e.into())
            }
        }
    }

    /// Serve the frame whose header `h` is at the front of the input, its
    /// reply left in `out`. Returns whether the connection stays open.
    fn serve_frame(&mut self, h: &Header) -> Result<bool, ConnError> {
        let tag_len = if self.seal.is_some() { TAG_LEN } else { 0 };
        let gated = !matches!(self.gate, Gate::Open) && !matches!(h.op, Op::Auth | Op::AuthProof);
        match h.op {
            // Nothing but the handshake before it has passed.
            _ if gated => self.refuse_before_handshake(h),
            // Page data goes straight into the store, not through `input`.
            Op::Write => {
                let link = Link {
                    seal: self.seal.as_ref(),
                    ..self.base
                };
                write::serve_write(
                    self.sh,
                    &self.session,
                    h,
                    &mut self.input,
                    &mut self.out,
                    &link,
                )
            }
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
            | Op::MemfdWhere => self.serve_small(h, tag_len),
            // A reply sent as a request: read past its payload (closing with
            // unread input would reset the connection under the error
            // reply), refuse it and close.
            _ => {
                let Link { fd, wait, .. } = self.base;
                self.input.consume(HEADER_LEN);
                self.input.skip(fd, h.len as usize + tag_len, wait)?;
                let e = WireError::UnknownOp(h.op as u16);
                error_reply(&mut self.out, h.tag, e.code(), &e.to_string());
                Ok(false)
            }
        }
    }

    /// A request before the handshake has passed: read past the payload
    /// (so the refusal is not lost to a reset), refuse, close. (Never
    /// sealed: the seal starts after the handshake.)
    fn refuse_before_handshake(&mut self, h: &Header) -> Result<bool, ConnError> {
        let Link { fd, wait, peer, .. } = self.base;
        self.input.consume(HEADER_LEN);
        self.input.skip(fd, h.len as usize, wait)?;
        self.sh.metrics.refused(Refusal::Auth);
        tracing::warn!("refused {peer}: it sent {:?} without the shared secret (give the client this server's secret file)", h.op);
        error_reply(
            &mut self.out,
            h.tag,
            ErrorCode::AuthRequired,
            "this server requires the shared secret: give this client the server's secret file (FARMEM_SECRET_FILE, default ~/.config/farmem/secret; see `farmem secret init`)",
        );
        Ok(false)
    }

    /// A request but a Write: small payloads (a Read's page list is at
    /// most 2 KiB), each covered whole by a sealed frame's tag, decoded
    /// from the input buffer and served.
    fn serve_small(&mut self, h: &Header, tag_len: usize) -> Result<bool, ConnError> {
        let Link { fd, wait, peer, .. } = self.base;
        let frame = HEADER_LEN + h.len as usize;
        self.input.fill(fd, frame + tag_len, wait)?;
        if let Some(seal) = &self.seal {
            let (covered, tag) = self.input.peek(frame + TAG_LEN).split_at(frame);
            if !seal.open(covered, tag) {
                return Err(ConnError::Forged(h.op));
            }
        }
        let link = Link {
            seal: self.seal.as_ref(),
            ..self.base
        };
        let payload = &self.input.peek(frame)[HEADER_LEN..];
        let keep = match wire::decode_request(h, payload) {
            Ok(req @ (Request::Auth { .. } | Request::AuthProof { .. })) => Ok(authenticate(
                self.sh,
                &mut self.gate,
                h,
                req,
                &mut self.out,
                peer,
            )),
            Ok(req) => match Served::try_from(req) {
                Ok(req) => {
                    requests::handle(self.sh, &mut self.session, h, req, &mut self.out, link)
                }
                // Writes are routed by their header before any decoding; a
                // decoder that returned one anyway is answered, not trusted.
                Err(_) => refuse(
                    &mut self.out,
                    h.tag,
                    ErrorCode::Malformed,
                    "a request this server cannot serve here",
                )
                .map(|_| false),
            },
            Err(e) => refuse(&mut self.out, h.tag, e.code(), &e.to_string()),
        };
        self.input.consume(frame + tag_len);
        Ok(keep?)
    }

    /// The connection is over: leave its session, and say why a client
    /// that stopped in the handshake did.
    fn close(self) {
        let sh = self.sh;
        if let Some((token, _)) = self.session {
            session::leave(sh, token);
        }
        // A client whose secret differs stops at this server's proof and
        // hangs up: say so here too.
        if let (Gate::Challenged { .. }, Some(secret)) = (&self.gate, sh.cfg.secret.as_deref()) {
            sh.metrics.refused(Refusal::Auth);
            sh.metrics.auth_failed();
            tracing::warn!(
                "refused {}: it hung up after this server's proof, which it did not accept (its secret file differs from {}?)",
                self.base.peer,
                secret.path().display()
            );
        }
    }
}
