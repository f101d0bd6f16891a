//! One connection's state: who holds it, its request tags, and the
//! replies it still owes (write acknowledgements and asynchronous reads),
//! oldest first; and the calls that use it: send, drain, read, write, free.
//!
//! A connection is used by one thread at a time, for a whole request and
//! its reply (the stream has one position): [`Held`] is that use, taken by
//! [`RemoteBackend::acquire`] and given back when it drops, on every path,
//! `?` included.

use super::reply::{check_reply, frame_u32, read_header, recv_reply, select};
use super::{RemoteBackend, Server};
use crate::backend::transport::Transport;
use crate::backend::BackendError;
use crate::sync::{SpinGuard, SpinLock};
use farmem_sys::net::MAX_IOV;
use farmem_sys::PAGE_SIZE;
use farmem_wire::{Frame, Op};
use std::ops::Deref;
use std::sync::atomic::{AtomicU32, Ordering};

pub(super) struct Conn {
    pub(super) link: Box<dyn Transport>,
    pub(super) tag: AtomicU32,
    /// Requests sent whose replies are still unread, oldest first; its
    /// lock is the connection's: held for a request's I/O, by one user.
    pending: SpinLock<Pending>,
}

/// A connection in use: the only way to reach its pending replies, and
/// given back when dropped.
pub(super) struct Held<'a> {
    conn: &'a Conn,
    pending: SpinGuard<'a, Pending>,
}

impl Deref for Held<'_> {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        self.conn
    }
}

impl Held<'_> {
    pub(super) fn pending(&mut self) -> &mut Pending {
        &mut self.pending
    }
}

/// Replies one connection may owe before a new request drains them: enough
/// to keep the pipe busy, few enough that an error surfaces soon after the
/// request that caused it.
pub(super) const MAX_PENDING: usize = 16;

#[derive(Clone, Copy)]
pub(super) enum Owed {
    /// A write's acknowledgement, for `pages` pages.
    Ack { tag: u32, pages: u32 },
    /// An asynchronous read of `pages` pages from `first` on, to land in
    /// `buf`.
    Read {
        tag: u32,
        first: u64,
        pages: u32,
        buf: *mut u8,
        token: u64,
    },
}

pub(super) struct Pending {
    q: [Owed; MAX_PENDING],
    head: usize,
    pub(super) len: usize,
}

// SAFETY: the only non-Send parts are the buffer pointers of pending
// reads, which the runtime's fetch slots own, untouched, until the read
// completes (`read_async`'s contract), whichever thread completes it.
unsafe impl Send for Pending {}

impl Pending {
    pub(super) fn new() -> Pending {
        Pending {
            q: [Owed::Ack { tag: 0, pages: 0 }; MAX_PENDING],
            head: 0,
            len: 0,
        }
    }
    pub(super) fn push(&mut self, o: Owed) {
        debug_assert!(self.len < MAX_PENDING);
        self.q[(self.head + self.len) % MAX_PENDING] = o;
        self.len += 1;
    }
    pub(super) fn front(&self) -> Option<Owed> {
        (self.len > 0).then(|| self.q[self.head])
    }
    pub(super) fn pop(&mut self) -> Option<Owed> {
        if self.len == 0 {
            return None;
        }
        let o = self.q[self.head];
        self.head = (self.head + 1) % MAX_PENDING;
        self.len -= 1;
        Some(o)
    }
}

impl Conn {
    /// A connection not yet used.
    pub(super) fn new(link: Box<dyn Transport>) -> Conn {
        Conn {
            link,
            tag: AtomicU32::new(1),
            pending: SpinLock::new(Pending::new()),
        }
    }
}

impl RemoteBackend {
    /// Take connection `c` of server `s` (spinning while another thread holds it).
    pub(super) fn acquire(&self, s: usize, c: usize) -> Held<'_> {
        Self::hold(&self.servers[s].conns[c])
    }

    /// Connection `c` of server `s` if no other thread holds it now.
    pub(super) fn try_acquire(&self, s: usize, c: usize) -> Option<Held<'_>> {
        let conn = &self.servers[s].conns[c];
        conn.pending
            .try_lock()
            .map(|pending| Held { conn, pending })
    }

    /// Take `conn` (spinning while another thread holds it).
    pub(super) fn hold(conn: &Conn) -> Held<'_> {
        Held {
            conn,
            pending: conn.pending.lock(),
        }
    }

    /// Receive every reply `conn` (held) still owes, in order: write
    /// acknowledgements, and asynchronous reads, each installed by the
    /// completion function as soon as its pages are in.
    ///
    /// An entry leaves the queue only once its reply is in, so after an
    /// error the queue still holds every reply owed, for [`Self::fail_over`].
    pub(super) fn drain(&self, server: &Server, conn: &mut Held) -> Result<(), BackendError> {
        while let Some(o) = conn.pending().front() {
            match o {
                Owed::Ack { tag, .. } => {
                    let h = read_header(server, &*conn.link, self.wait)?;
                    check_reply(server, &*conn.link, &h, Op::WriteOk, tag, 0, self.wait)?;
                    conn.pending().pop();
                }
                Owed::Read {
                    tag,
                    pages,
                    buf,
                    token,
                    ..
                } => {
                    // SAFETY: `read_async`'s caller keeps `buf` valid and
                    // untouched for `pages` pages until this completion.
                    let dst =
                        unsafe { std::slice::from_raw_parts_mut(buf, pages as usize * PAGE_SIZE) };
                    recv_reply(server, &*conn.link, Op::ReadOk, tag, dst, self.wait)?;
                    conn.pending().pop();
                    if let Some(done) = self.complete.get() {
                        done(token);
                    }
                }
            }
        }
        Ok(())
    }

    /// Take connection `c` of server `s`, receive what it owes, release it.
    pub(super) fn drain_conn(&self, s: usize, c: usize) -> Result<(), BackendError> {
        let mut conn = self.acquire(s, c);
        self.drain(&self.servers[s], &mut conn)
    }

    /// Send a Read request for the pages of `pages` at positions `idx` on
    /// `conn` (held); returns its tag.
    pub(super) fn send_read(
        &self,
        server: &Server,
        conn: &Conn,
        pages: &[u64],
        idx: &[usize],
    ) -> Result<u32, BackendError> {
        let tag = conn.tag.fetch_add(1, Ordering::Relaxed);
        let list = select(pages, idx);
        let head = Frame::Read {
            pages: &list[..idx.len()],
        }
        .encode(tag);
        conn.link
            .send(&[&head], self.wait)
            .map_err(|e| server.io(e))?;
        Ok(tag)
    }

    /// Make room for one more owed reply on `conn` (held).
    pub(super) fn room(&self, server: &Server, conn: &mut Held) -> Result<(), BackendError> {
        if conn.pending().len >= MAX_PENDING {
            self.drain(server, conn)?;
        }
        Ok(())
    }

    /// Read the pages of `pages` held by server `s` (at positions `idx`) into `buf`.
    pub(super) fn read_from(
        &self,
        (s, c): (usize, usize),
        pages: &[u64],
        idx: &[usize],
        buf: &mut [u8],
    ) -> Result<(), BackendError> {
        let server = &self.servers[s];
        let mut conn = self.acquire(s, c);
        let tag = self.send_read(server, &conn, pages, idx)?;
        self.recv_read(server, &mut conn, tag, idx, buf, false)
    }

    /// Receive the reply to read `tag` (sent on `conn`, held, for the
    /// positions `idx`) into `buf`, after every reply owed before it.
    /// `more_sent`: other requests were sent on `conn` after this one, so
    /// not a byte past this reply may be read (the one-call receive below
    /// takes a page's worth after the header, which after a short Error
    /// reply would be the next reply's).
    pub(super) fn recv_read(
        &self,
        server: &Server,
        conn: &mut Held,
        tag: u32,
        idx: &[usize],
        buf: &mut [u8],
        more_sent: bool,
    ) -> Result<(), BackendError> {
        let n = idx.len();
        let io_err = |e| server.io(e);
        // Earlier requests' replies come first; this one is already on
        // its way meanwhile.
        self.drain(server, conn)?;
        // Common case: the whole batch, in order: receive header and
        // pages with one scattered recvmsg, straight into place.
        let contiguous = idx.iter().enumerate().all(|(k, &i)| i == idx[0] + k);
        if contiguous && !more_sent {
            let start = idx[0] * PAGE_SIZE;
            let dst = &mut buf[start..start + n * PAGE_SIZE];
            recv_reply(server, &*conn.link, Op::ReadOk, tag, dst, self.wait)?;
        } else {
            let h = read_header(server, &*conn.link, self.wait)?;
            let len = frame_u32(n * PAGE_SIZE);
            check_reply(server, &*conn.link, &h, Op::ReadOk, tag, len, self.wait)?;
            for &i in idx {
                let dst = &mut buf[i * PAGE_SIZE..(i + 1) * PAGE_SIZE];
                conn.link.recv_exact(dst, self.wait).map_err(io_err)?;
            }
        }
        Ok(())
    }

    pub(super) fn write_to(
        &self,
        (s, c): (usize, usize),
        pages: &[u64],
        data: &[&[u8]],
        idx: &[usize],
    ) -> Result<(), BackendError> {
        let server = &self.servers[s];
        let mut conn = self.acquire(s, c);
        self.room(server, &mut conn)?;
        let tag = conn.tag.fetch_add(1, Ordering::Relaxed);
        let n = idx.len();
        let list = select(pages, idx);
        let head = Frame::Write { pages: &list[..n] }.encode(tag);
        let mut parts: [&[u8]; MAX_IOV] = [&[]; MAX_IOV];
        parts[0] = &head;
        for (k, &i) in idx.iter().enumerate() {
            parts[1 + k] = data[i];
        }
        conn.link
            .send(&parts[..1 + n], self.wait)
            .map_err(|e| server.io(e))?;
        // Sent: the data is in the socket buffer. The reply is read by
        // the next request on this connection (see the module comment).
        conn.pending().push(Owed::Ack {
            tag,
            pages: frame_u32(n),
        });
        Ok(())
    }

    /// Free `[start, start+n)` on server `s`, after draining its connections
    /// (see `Backend::free`).
    pub(super) fn free_on(
        &self,
        s: usize,
        server: &Server,
        start: u64,
        n: u64,
    ) -> Result<(), BackendError> {
        for c in 1..server.conns.len() {
            self.drain_conn(s, c)?;
        }
        let mut conn = self.acquire(s, 0);
        self.drain(server, &mut conn)?;
        let tag = conn.tag.fetch_add(1, Ordering::Relaxed);
        let head = Frame::Free { start, pages: n }.encode(tag);
        conn.link
            .send(&[&head], self.wait)
            .map_err(|e| server.io(e))?;
        let h = read_header(server, &*conn.link, self.wait)?;
        check_reply(server, &*conn.link, &h, Op::FreeOk, tag, 0, self.wait)
    }
}
