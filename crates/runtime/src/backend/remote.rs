//! Pages striped over `farmem serve` memory servers.
//!
//! **Write-back does not wait for its acknowledgement.** A write request is
//! complete for the runtime once `send` has copied it into the socket buffer:
//! the arena pages can be unmapped at once. Its `WriteOk` is read later, by
//! the next request on that connection (replies come in request order), and
//! an error there stops the program as a failed write-back would.
//!
//! Hazard: a refault could overtake its own write-back. Thread A evicts page
//! p and sends `Write p` on connection 1, not waiting; thread B faults p back
//! and sends `Read p` on connection 2; the server serves connection 2 first
//! and returns the old bytes. So every page has one connection (its *route*:
//! server by stripe, connection by stripe within the server), and a server
//! serves one connection's requests in order: `Read p` queues behind
//! `Write p`. `free` drains every connection first, so a Free cannot overtake
//! a write either.
//!
//! **Replicas** (`FARMEM_REPLICAS`): copy k of a page lives on the server
//! after its primary's k places further on (by stripe), on that server's
//! connection for the page, so the ordering above holds on every copy.
//! A write goes to every live copy and, unlike a single copy's, waits for
//! every acknowledgement before the page may leave local memory; a read
//! goes to the first live one. An I/O
//! or protocol error on a server marks it down for good (one warning line),
//! and the replies it still owed are *salvaged*: an owed read is read again
//! from the next live copy into the same buffer and completed; an owed
//! write acknowledgement counts its pages as kept on fewer copies. Then the
//! failed request is retried on the next copy. With one copy left and that
//! server lost, the error reaches the runtime, which stops the program
//! naming the server: never zeros.
//!
//! Hazard: the failed-over read must not overtake the write it should see.
//! Thread A evicts p: `Write p` to primary P (conn P1) and replica R (conn
//! R1). P dies. Thread B faults p: the read fails on P, so B reads p from R,
//! on R1, behind A's `Write p` there. Had B used any other connection of R,
//! it could get the old bytes; [`RemoteBackend::route`] gives every copy of
//! a page one connection.

use super::transport::{StreamSocket, Transport};
use super::ucx::{Failure, UcxPages};
use crate::config::Transport as Choice;
use super::{Backend, BackendError, MAX_PAGES_PER_CALL};
use crate::config::Config;
use farmem_sys::net::{Wait, MAX_IOV};
use farmem_sys::PAGE_SIZE;
use farmem_wire::auth::{self, Secret};
use farmem_wire::{self as wire, Frame, Header, Op, Reply, ServerAddr, HEADER_LEN};
use std::cell::UnsafeCell;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::OnceLock;

struct Conn {
    busy: AtomicBool,
    link: Box<dyn Transport>,
    tag: AtomicU32,
    /// Requests sent whose replies are still unread, oldest first. Only the
    /// holder of `busy` touches it.
    pending: UnsafeCell<Pending>,
}

// SAFETY: `pending` (and the buffers its reads point to) is only accessed by
// the thread holding `busy`, which is taken with Acquire and released with
// Release ordering.
unsafe impl Sync for Conn {}
// SAFETY: as above; the raw buffer pointers are owned by the runtime's fetch
// slots for as long as the read is pending.
unsafe impl Send for Conn {}

/// Replies one connection may owe before a new request drains them: enough
/// to keep the pipe busy, few enough that an error surfaces soon after the
/// request that caused it.
const MAX_PENDING: usize = 16;

#[derive(Clone, Copy)]
enum Owed {
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

struct Pending {
    q: [Owed; MAX_PENDING],
    head: usize,
    len: usize,
}

impl Pending {
    fn new() -> Pending {
        Pending {
            q: [Owed::Ack { tag: 0, pages: 0 }; MAX_PENDING],
            head: 0,
            len: 0,
        }
    }
    fn push(&mut self, o: Owed) {
        debug_assert!(self.len < MAX_PENDING);
        self.q[(self.head + self.len) % MAX_PENDING] = o;
        self.len += 1;
    }
    fn front(&self) -> Option<Owed> {
        (self.len > 0).then(|| self.q[self.head])
    }
    fn pop(&mut self) -> Option<Owed> {
        if self.len == 0 {
            return None;
        }
        let o = self.q[self.head];
        self.head = (self.head + 1) % MAX_PENDING;
        self.len -= 1;
        Some(o)
    }
}

struct Server {
    name: String,
    conns: Vec<Conn>,
    /// Lost for good: nothing is routed to it any more.
    down: AtomicBool,
}

/// Pages striped over `farmem serve` memory servers.
pub struct RemoteBackend {
    servers: Vec<Server>,
    stripe: u64,
    wait: Wait,
    /// Copies of every page, on as many different servers.
    replicas: usize,
    /// Pages whose write reached fewer than `replicas` servers.
    under_replicated: std::sync::atomic::AtomicU64,
    /// Installs a completed asynchronous read (the runtime's).
    complete: OnceLock<fn(u64)>,
    /// One-sided page I/O, when the session moved onto UCX: then every
    /// page read and write goes there, and the connections carry only
    /// control messages (grants, Free).
    ucx: Option<UcxPages>,
}

/// Whether this host has an RDMA device (`/sys/class/infiniband`).
fn has_rdma_device() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

// What `frame_u32` relies on.
const _: () = assert!(MAX_PAGES_PER_CALL * PAGE_SIZE <= u32::MAX as usize);

/// A page count or byte length of one frame, as the wire's 32-bit fields
/// hold it. A frame carries at most `MAX_PAGES_PER_CALL` pages (its page
/// list is a `[u64; MAX_PAGES_PER_CALL]`), and a handshake payload a few
/// dozen bytes, so the value fits (asserted above).
fn frame_u32(n: usize) -> u32 {
    // In range: at most MAX_PAGES_PER_CALL * PAGE_SIZE, see above.
    #[allow(clippy::cast_possible_truncation)]
    let n = n as u32;
    n
}

/// The page numbers `pages[i]` for `i` in `idx`, in that order.
fn select(pages: &[u64], idx: &[usize]) -> [u64; MAX_PAGES_PER_CALL] {
    let mut list = [0u64; MAX_PAGES_PER_CALL];
    for (k, &i) in idx.iter().enumerate() {
        list[k] = pages[i];
    }
    list
}

/// Prove this client holds the shared secret, and check that the server
/// does (see `farmem_wire::auth`).
fn authenticate(
    server: &Server,
    link: &dyn Transport,
    secret: &Secret,
    wait: Wait,
) -> Result<(), BackendError> {
    let io_err = |source| BackendError::Io {
        server: server.name.clone(),
        source,
    };
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
        return Err(BackendError::Protocol {
            server: server.name.clone(),
            why: "an AuthChallenge that does not decode".into(),
        });
    };
    if !secret.verify_server(&cn, &sn, &proof) {
        return Err(BackendError::Auth {
            server: server.name.clone(),
            why: format!(
                "it did not prove it holds the secret in {}: its secret file differs from this client's",
                secret.path().display()
            ),
        });
    }
    let mine = secret.client_proof(&cn, &sn);
    link.send(&[&Frame::AuthProof { proof: &mine }.encode(0)], wait)
        .map_err(io_err)?;
    expect_reply(server, link, Op::AuthOk, 0, &mut [], wait)?;
    Ok(())
}

fn random_token() -> [u8; wire::TOKEN_LEN] {
    let mut t = [0u8; wire::TOKEN_LEN];
    if !farmem_sys::process::random_bytes(&mut t) {
        // Fall back to time and pid: the token only separates sessions.
        let seed = farmem_sys::now_ns() ^ ((std::process::id() as u64) << 32);
        t[..8].copy_from_slice(&seed.to_le_bytes());
    }
    t
}

impl RemoteBackend {
    /// Connect `cfg.conns` connections to each server and open one session
    /// (a fresh random token) spanning `max_pages` pages.
    pub fn connect(
        cfg: &Config,
        servers: &[ServerAddr],
        max_pages: u64,
    ) -> Result<RemoteBackend, BackendError> {
        if cfg.replicas > servers.len() {
            return Err(BackendError::Protocol {
                server: servers.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(","),
                why: format!(
                    "FARMEM_REPLICAS={} needs at least {} servers, and {} are given (FARMEM_SERVERS)",
                    cfg.replicas,
                    cfg.replicas,
                    servers.len()
                ),
            });
        }
        let token = random_token();
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        let secret = farmem_wire::auth::find(cfg.secret_file.as_deref(), home.as_deref())?;
        let wait = Wait {
            spin_ns: cfg.spin_us * 1000,
            timeout_ns: cfg.timeout_ms * 1_000_000,
        };
        let mut out = Vec::new();
        // Whether to ask for UCX: decided before any server is asked, from
        // what this side knows (see FARMEM_TRANSPORT's `auto` rule); the
        // same-host half is checked per server below.
        let want_ucx = match cfg.transport {
            Choice::Socket => false,
            Choice::Ucx => {
                farmem_sys::ucx::available().map_err(|e| BackendError::Protocol {
                    server: servers.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(","),
                    why: format!("FARMEM_TRANSPORT=ucx: {e}"),
                })?;
                true
            }
            Choice::Auto => farmem_sys::ucx::available().is_ok(),
        };
        let rdma = has_rdma_device();
        let mut ucx_addrs: Vec<Option<Vec<u8>>> = Vec::new();
        let mut chunk_pages = 0u64;
        for addr in servers {
            let name = &addr.to_string();
            let mut conns = Vec::new();
            for _ in 0..cfg.conns {
                let link = StreamSocket::connect(addr, cfg.timeout_ms).map_err(|source| {
                    BackendError::Connect {
                        server: name.clone(),
                        source,
                    }
                })?;
                let conn = Conn {
                    busy: AtomicBool::new(false),
                    link: Box::new(link),
                    tag: AtomicU32::new(1),
                    pending: UnsafeCell::new(Pending::new()),
                };
                // The handshake on this connection.
                let server = Server {
                    name: name.clone(),
                    conns: vec![conn],
                    down: AtomicBool::new(false),
                };
                let io_err = |source| BackendError::Io {
                    server: name.clone(),
                    source,
                };
                let link = &*server.conns[0].link;
                if let (Some(secret), false) = (&secret, link.is_local()) {
                    authenticate(&server, link, secret, wait)?;
                }
                let hello = Frame::Hello {
                    token: &token,
                    max_pages,
                }
                .encode(0);
                link.send(&[&hello], wait).map_err(io_err)?;
                let mut payload = [0u8; 24];
                let h = expect_reply(&server, link, Op::HelloOk, 0, &mut payload, wait)?;
                if let Ok(Reply::HelloOk { page_size, .. }) = wire::decode_reply(&h, &payload) {
                    if page_size != PAGE_SIZE as u64 {
                        return Err(BackendError::Protocol {
                            server: name.clone(),
                            why: format!(
                                "the server keeps {page_size}-byte pages; this client needs {PAGE_SIZE}"
                            ),
                        });
                    }
                }
                if conns.is_empty() {
                    let ask = want_ucx
                        && (cfg.transport == Choice::Ucx || rdma || link.same_host());
                    let got = if ask {
                        open_ucx(&server, link, wait, cfg.transport == Choice::Ucx)?
                    } else {
                        None
                    };
                    if let Some((pages, a)) = &got {
                        if chunk_pages != 0 && chunk_pages != *pages {
                            return Err(BackendError::Protocol {
                                server: name.clone(),
                                why: format!("its UCX chunks are {pages} pages, another server's {chunk_pages}"),
                            });
                        }
                        chunk_pages = *pages;
                        let _ = a;
                    }
                    ucx_addrs.push(got.map(|(_, a)| a));
                }
                let Server { conns: mut c, .. } = server;
                conns.push(c.remove(0));
            }
            out.push(Server {
                name: name.clone(),
                conns,
                down: AtomicBool::new(false),
            });
        }
        // UCX only when every server offers it: pages of one session move
        // one way.
        let ucx = if ucx_addrs.iter().all(Option::is_some) && want_ucx {
            let addrs: Vec<Vec<u8>> = ucx_addrs.into_iter().flatten().collect();
            Some(
                UcxPages::new(&addrs, max_pages, chunk_pages, wait.timeout_ns).map_err(|e| {
                    BackendError::Protocol {
                        server: out.iter().map(|s| s.name.clone()).collect::<Vec<_>>().join(","),
                        why: format!("cannot set up UCX: {e}"),
                    }
                })?,
            )
        } else {
            if cfg.transport == Choice::Ucx {
                let without: Vec<String> = out
                    .iter()
                    .zip(&ucx_addrs)
                    .filter(|(_, a)| a.is_none())
                    .map(|(s, _)| s.name.clone())
                    .collect();
                return Err(BackendError::Protocol {
                    server: without.join(","),
                    why: "FARMEM_TRANSPORT=ucx, and UCX was not set up with it".into(),
                });
            }
            None
        };
        Ok(RemoteBackend {
            servers: out,
            stripe: cfg.stripe_pages,
            wait,
            replicas: cfg.replicas,
            under_replicated: std::sync::atomic::AtomicU64::new(0),
            complete: OnceLock::new(),
            ucx,
        })
    }

    /// Ask server `s` for chunk `c` of this session's UCX pool.
    fn grant_on(&self, s: usize, c: u64) -> Result<(u64, Vec<u8>), BackendError> {
        let server = &self.servers[s];
        let conn = self.acquire(s, 0);
        let r = (|| {
            self.drain(server, conn)?;
            let tag = conn.tag.fetch_add(1, Ordering::Relaxed);
            conn.link
                .send(&[&Frame::UcxChunk { chunk: c }.encode(tag)], self.wait)
                .map_err(|source| BackendError::Io {
                    server: server.name.clone(),
                    source,
                })?;
            let mut payload = [0u8; 8 + wire::MAX_UCX_BLOB];
            let n = recv_blob(server, &*conn.link, Op::UcxChunkOk, tag, &mut payload, self.wait)?;
            let h = Header::new(Op::UcxChunkOk, tag, 0, frame_u32(n));
            match wire::decode_reply(&h, &payload[..n]) {
                Ok(Reply::UcxChunkOk { base, rkey }) => Ok((base, rkey.to_vec())),
                other => Err(BackendError::Protocol {
                    server: server.name.clone(),
                    why: format!("a UcxChunkOk that does not decode: {other:?}"),
                }),
            }
        })();
        conn.busy.store(false, Ordering::Release);
        r
    }

    /// Mark servers whose control connection closed as down (UCX over
    /// shared memory sees no error of its own when a server dies).
    fn check_control(&self) -> Result<(), BackendError> {
        for (s, server) in self.servers.iter().enumerate() {
            if !self.is_down(s) && server.conns[0].link.closed() {
                let e = BackendError::Io {
                    server: server.name.clone(),
                    source: io::Error::new(
                        io::ErrorKind::ConnectionReset,
                        "its control connection closed",
                    ),
                };
                if !self.lost(&e) {
                    return Err(e);
                }
                self.fail_over(s, &e)?;
            }
        }
        Ok(())
    }

    /// A UCX failure as the backend's error, and whether it means the
    /// server is lost (then it is failed over and the batch retried).
    fn ucx_failure(&self, f: Failure) -> Result<(), BackendError> {
        let e = BackendError::Io {
            server: self.servers[f.server].name.clone(),
            source: io::Error::other(f.why),
        };
        if !self.lost(&e) {
            return Err(e);
        }
        self.fail_over(f.server, &e)
    }

    fn ucx_read(&self, ucx: &UcxPages, pages: &[u64], buf: &mut [u8]) -> Result<(), BackendError> {
        loop {
            let mut from = [0usize; MAX_PAGES_PER_CALL];
            for (i, &p) in pages.iter().enumerate() {
                let Some((s, _)) = self.live_route(p) else {
                    return Err(BackendError::Io {
                        server: self.holder(p),
                        source: io::Error::other("every server holding a copy of this page is down"),
                    });
                };
                from[i] = s;
            }
            match ucx.read(pages, &from[..pages.len()], buf) {
                Ok(()) => return Ok(()),
                Err(f) => self.ucx_failure(f)?,
            }
        }
    }

    fn ucx_write(&self, ucx: &UcxPages, pages: &[u64], data: &[&[u8]]) -> Result<(), BackendError> {
        self.check_control()?;
        loop {
            let mut to = [[None; crate::config::MAX_REPLICAS]; MAX_PAGES_PER_CALL];
            for (i, &p) in pages.iter().enumerate() {
                let mut n = 0;
                for k in 0..self.replicas {
                    let (s, _) = self.route(p, k);
                    if !self.is_down(s) {
                        to[i][n] = Some(s);
                        n += 1;
                    }
                }
                if n == 0 {
                    return Err(BackendError::Io {
                        server: self.holder(p),
                        source: io::Error::other("every server holding a copy of this page is down"),
                    });
                }
            }
            match ucx.write(pages, data, &to[..pages.len()]) {
                Ok(()) => {
                    let short = to[..pages.len()]
                        .iter()
                        .filter(|t| t.iter().flatten().count() < self.replicas)
                        .count();
                    self.under_replicated
                        .fetch_add(short as u64, Ordering::Relaxed);
                    return Ok(());
                }
                Err(f) => self.ucx_failure(f)?,
            }
        }
    }

    /// The server and the connection that carry every request for copy `k`
    /// of `page` (see the hazards in the module comment).
    fn route(&self, page: u64, k: usize) -> (usize, usize) {
        let stripe = page / self.stripe;
        let ns = self.servers.len() as u64;
        let s = farmem_sys::usize_from((stripe + k as u64) % ns);
        let c = farmem_sys::usize_from((stripe / ns) % self.servers[s].conns.len() as u64);
        (s, c)
    }

    fn is_down(&self, s: usize) -> bool {
        self.servers[s].down.load(Ordering::Acquire)
    }

    /// The route of the first live copy of `page`, if any is left.
    fn live_route(&self, page: u64) -> Option<(usize, usize)> {
        (0..self.replicas)
            .map(|k| self.route(page, k))
            .find(|&(s, _)| !self.is_down(s))
    }

    /// Whether `e` means server `s` is gone (rather than refusing a request).
    fn lost(&self, e: &BackendError) -> bool {
        self.replicas > 1 && matches!(e, BackendError::Io { .. } | BackendError::Protocol { .. })
    }

    /// Mark server `s` down (once, with one warning line), then salvage what
    /// its connections still owed. Called with no connection held.
    fn fail_over(&self, s: usize, e: &BackendError) -> Result<(), BackendError> {
        if !self.servers[s].down.swap(true, Ordering::AcqRel) {
            use std::fmt::Write as _;
            let mut m = crate::signals::MsgBuf::new();
            let name = &self.servers[s].name;
            let _ = match e {
                BackendError::Io { source, .. } => write!(
                    m,
                    "farmem: warning: memory server {name} is down ({source})"
                ),
                BackendError::Protocol { why, .. } => {
                    write!(
                        m,
                        "farmem: warning: memory server {name} is down (a bad reply: {why})"
                    )
                }
                other => write!(m, "farmem: warning: memory server {name} is down ({other})"),
            };
            let _ = writeln!(m, "; its pages are served from their other copies");
            farmem_sys::write_stderr(m.as_bytes());
        }
        for c in 0..self.servers[s].conns.len() {
            let conn = self.acquire(s, c);
            let mut owed = [Owed::Ack { tag: 0, pages: 0 }; MAX_PENDING];
            let mut n = 0;
            while let Some(o) = self.pending(conn).pop() {
                owed[n] = o;
                n += 1;
            }
            conn.busy.store(false, Ordering::Release);
            for o in &owed[..n] {
                match *o {
                    Owed::Ack { pages, .. } => {
                        self.under_replicated
                            .fetch_add(u64::from(pages), Ordering::Relaxed);
                    }
                    Owed::Read {
                        first,
                        pages,
                        buf,
                        token,
                        ..
                    } => {
                        let mut list = [0u64; MAX_PAGES_PER_CALL];
                        for (i, p) in list[..pages as usize].iter_mut().enumerate() {
                            *p = first + i as u64;
                        }
                        // SAFETY: `read_async`'s caller keeps `buf` valid and
                        // untouched for `pages` pages until this completion.
                        let dst = unsafe {
                            std::slice::from_raw_parts_mut(buf, pages as usize * PAGE_SIZE)
                        };
                        self.read(&list[..pages as usize], dst)?;
                        if let Some(done) = self.complete.get() {
                            done(token);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Take connection `c` of server `s` (spinning while another thread holds it).
    fn acquire(&self, s: usize, c: usize) -> &Conn {
        let conn = &self.servers[s].conns[c];
        let mut spins = 0u32;
        while conn
            .busy
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins.is_multiple_of(32) {
                farmem_sys::sched_yield();
            } else {
                farmem_sys::cpu_relax();
            }
        }
        conn
    }

    /// The pending replies of `conn`, which the caller holds.
    #[allow(clippy::mut_from_ref)]
    fn pending<'a>(&self, conn: &'a Conn) -> &'a mut Pending {
        debug_assert!(conn.busy.load(Ordering::Relaxed));
        // SAFETY: the caller holds `conn.busy`, so no other thread touches
        // `pending` until it is released (see `Conn`).
        unsafe { &mut *conn.pending.get() }
    }

    /// Receive every reply `conn` (held) still owes, in order: write
    /// acknowledgements, and asynchronous reads, each installed by the
    /// completion function as soon as its pages are in.
    ///
    /// An entry leaves the queue only once its reply is in, so after an
    /// error the queue still holds every reply owed, for [`Self::fail_over`].
    fn drain(&self, server: &Server, conn: &Conn) -> Result<(), BackendError> {
        while let Some(o) = self.pending(conn).front() {
            match o {
                Owed::Ack { tag, .. } => {
                    let h = read_header(server, &*conn.link, self.wait)?;
                    check_reply(server, &*conn.link, &h, Op::WriteOk, tag, 0, self.wait)?;
                    self.pending(conn).pop();
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
                    self.pending(conn).pop();
                    if let Some(done) = self.complete.get() {
                        done(token);
                    }
                }
            }
        }
        Ok(())
    }

    /// Take connection `c` of server `s`, receive what it owes, release it.
    fn drain_conn(&self, s: usize, c: usize) -> Result<(), BackendError> {
        let conn = self.acquire(s, c);
        let r = self.drain(&self.servers[s], conn);
        conn.busy.store(false, Ordering::Release);
        r
    }

    /// Send a Read request for the pages of `pages` at positions `idx` on
    /// `conn` (held); returns its tag.
    fn send_read(
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
            .map_err(|source| BackendError::Io {
                server: server.name.clone(),
                source,
            })?;
        Ok(tag)
    }

    /// Make room for one more owed reply on `conn` (held).
    fn room(&self, server: &Server, conn: &Conn) -> Result<(), BackendError> {
        if self.pending(conn).len >= MAX_PENDING {
            self.drain(server, conn)?;
        }
        Ok(())
    }

    /// Read the pages of `pages` held by server `s` (at positions `idx`) into `buf`.
    fn read_from(
        &self,
        (s, c): (usize, usize),
        pages: &[u64],
        idx: &[usize],
        buf: &mut [u8],
    ) -> Result<(), BackendError> {
        let server = &self.servers[s];
        let conn = self.acquire(s, c);
        let r = (|| {
            let tag = self.send_read(server, conn, pages, idx)?;
            let n = idx.len();
            let io_err = |source| BackendError::Io {
                server: server.name.clone(),
                source,
            };
            // Earlier requests' replies come first; this one is already on
            // its way meanwhile.
            self.drain(server, conn)?;
            // Common case: the whole batch, in order: receive header and
            // pages with one scattered recvmsg, straight into place.
            let contiguous = idx.iter().enumerate().all(|(k, &i)| i == idx[0] + k);
            if contiguous {
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
        })();
        conn.busy.store(false, Ordering::Release);
        r
    }

    fn write_to(
        &self,
        (s, c): (usize, usize),
        pages: &[u64],
        data: &[&[u8]],
        idx: &[usize],
    ) -> Result<(), BackendError> {
        let server = &self.servers[s];
        let conn = self.acquire(s, c);
        let r = (|| {
            self.room(server, conn)?;
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
                .map_err(|source| BackendError::Io {
                    server: server.name.clone(),
                    source,
                })?;
            // Sent: the data is in the socket buffer. The reply is read by
            // the next request on this connection (see the module comment).
            self.pending(conn).push(Owed::Ack {
                tag,
                pages: frame_u32(n),
            });
            Ok(())
        })();
        conn.busy.store(false, Ordering::Release);
        r
    }

    /// Run `f` on each route of copy `k` of `pages` whose server is live;
    /// the positions where it returned true come back marked. A server
    /// lost there is failed over once the round is done (its positions stay
    /// unmarked); any other error ends the round.
    fn on_copy(
        &self,
        pages: &[u64],
        k: usize,
        mut f: impl FnMut((usize, usize), &[usize]) -> Result<bool, BackendError>,
    ) -> Result<[bool; MAX_PAGES_PER_CALL], BackendError> {
        let mut done = [false; MAX_PAGES_PER_CALL];
        let mut lost = None;
        self.per_route(
            pages,
            |p| self.route(p, k),
            |r, idx| {
                if self.is_down(r.0) {
                    return Ok(());
                }
                match f(r, idx) {
                    Ok(ok) => {
                        for &i in idx {
                            done[i] = ok;
                        }
                        Ok(())
                    }
                    Err(e) if self.lost(&e) => {
                        lost = Some((r.0, e));
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            },
        )?;
        if let Some((s, e)) = lost {
            self.fail_over(s, &e)?;
        }
        Ok(done)
    }

    /// Group a batch's positions by route (server and connection), then call
    /// `f` once per route, in order of first appearance.
    fn per_route(
        &self,
        pages: &[u64],
        route_of: impl Fn(u64) -> (usize, usize),
        mut f: impl FnMut((usize, usize), &[usize]) -> Result<(), BackendError>,
    ) -> Result<(), BackendError> {
        assert!(pages.len() <= MAX_PAGES_PER_CALL);
        let mut done = [false; MAX_PAGES_PER_CALL];
        for i in 0..pages.len() {
            if done[i] {
                continue;
            }
            let route = route_of(pages[i]);
            let mut idx = [0usize; MAX_PAGES_PER_CALL];
            let mut n = 0;
            for (k, &p) in pages.iter().enumerate().skip(i) {
                if !done[k] && route_of(p) == route {
                    done[k] = true;
                    idx[n] = k;
                    n += 1;
                }
            }
            f(route, &idx[..n])?;
        }
        Ok(())
    }

    /// Free `[start, start+n)` on server `s`, after draining its connections
    /// (see `Backend::free`).
    fn free_on(&self, s: usize, server: &Server, start: u64, n: u64) -> Result<(), BackendError> {
        for c in 1..server.conns.len() {
            self.drain_conn(s, c)?;
        }
        let conn = self.acquire(s, 0);
        let r = (|| {
            self.drain(server, conn)?;
            let tag = conn.tag.fetch_add(1, Ordering::Relaxed);
            let head = Frame::Free { start, pages: n }.encode(tag);
            conn.link
                .send(&[&head], self.wait)
                .map_err(|source| BackendError::Io {
                    server: server.name.clone(),
                    source,
                })?;
            let h = read_header(server, &*conn.link, self.wait)?;
            check_reply(server, &*conn.link, &h, Op::FreeOk, tag, 0, self.wait)
        })();
        conn.busy.store(false, Ordering::Release);
        r
    }
}

fn read_header(server: &Server, link: &dyn Transport, wait: Wait) -> Result<Header, BackendError> {
    let mut hb = [0u8; HEADER_LEN];
    link.recv_exact(&mut hb, wait)
        .map_err(|source| BackendError::Io {
            server: server.name.clone(),
            source,
        })?;
    Header::decode(&hb).map_err(|e| BackendError::Protocol {
        server: server.name.clone(),
        why: e.to_string(),
    })
}

/// Check a reply header; an Error reply becomes `Refused` with its message.
fn check_reply(
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
            .map_err(|source| BackendError::Io {
                server: server.name.clone(),
                source,
            })?;
        return Err(refused(server, h, &msg[..n]));
    }
    if h.op != op || h.tag != tag || h.len != len {
        return Err(BackendError::Protocol {
            server: server.name.clone(),
            why: format!(
                "expected {op:?} tag {tag} len {len}, got {:?} tag {} len {}",
                h.op, h.tag, h.len
            ),
        });
    }
    Ok(())
}

/// Receive a reply whose payload is expected to be exactly `data.len()`
/// bytes, header and payload in as few system calls as possible. An Error
/// reply (shorter) is recognised from its header and returned as `Refused`.
fn recv_reply(
    server: &Server,
    link: &dyn Transport,
    op: Op,
    tag: u32,
    data: &mut [u8],
    wait: Wait,
) -> Result<(), BackendError> {
    let io_err = |source| BackendError::Io {
        server: server.name.clone(),
        source,
    };
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
    let h = Header::decode(&hb).map_err(|e| BackendError::Protocol {
        server: server.name.clone(),
        why: e.to_string(),
    })?;
    if h.op == Op::Error {
        let n = h.len as usize;
        let mut msg = [0u8; wire::MAX_ERROR_MSG];
        let have = in_data.min(n);
        msg[..have].copy_from_slice(&data[..have]);
        link.recv_exact(&mut msg[have..n], wait).map_err(io_err)?;
        return Err(refused(server, &h, &msg[..n]));
    }
    if h.op != op || h.tag != tag || h.len as usize != data.len() {
        return Err(BackendError::Protocol {
            server: server.name.clone(),
            why: format!(
                "expected {op:?} tag {tag} len {}, got {:?} tag {} len {}",
                data.len(),
                h.op,
                h.tag,
                h.len
            ),
        });
    }
    link.recv_exact(&mut data[in_data..], wait).map_err(io_err)
}

/// An Error reply (header `h`, message `msg`) as the backend's error.
fn refused(server: &Server, h: &Header, msg: &[u8]) -> BackendError {
    match wire::decode_reply(h, msg) {
        Ok(Reply::Error { code, message }) => BackendError::Refused {
            server: server.name.clone(),
            code,
            message: String::from_utf8_lossy(message).into_owned(),
        },
        other => BackendError::Protocol {
            server: server.name.clone(),
            why: format!("an Error reply that does not decode: {other:?}"),
        },
    }
}

fn expect_reply(
    server: &Server,
    link: &dyn Transport,
    op: Op,
    tag: u32,
    payload: &mut [u8],
    wait: Wait,
) -> Result<Header, BackendError> {
    let h = read_header(server, link, wait)?;
    check_reply(server, link, &h, op, tag, frame_u32(payload.len()), wait)?;
    link.recv_exact(payload, wait)
        .map_err(|source| BackendError::Io {
            server: server.name.clone(),
            source,
        })?;
    Ok(h)
}

impl Backend for RemoteBackend {
    fn read(&self, pages: &[u64], buf: &mut [u8]) -> Result<(), BackendError> {
        if let Some(ucx) = &self.ucx {
            return self.ucx_read(ucx, pages, buf);
        }
        // Each round reads from the first live copy of every page; a server
        // lost meanwhile is failed over and the round tried again.
        loop {
            let mut lost = None;
            let r = self.per_route(
                pages,
                |p| self.live_route(p).unwrap_or(self.route(p, 0)),
                |r, idx| {
                    let res = self.read_from(r, pages, idx, buf);
                    match res {
                        Err(e) if self.lost(&e) => {
                            lost = Some((r.0, e));
                            Ok(())
                        }
                        other => other,
                    }
                },
            );
            match lost {
                Some((s, e)) => {
                    self.fail_over(s, &e)?;
                    if pages.iter().any(|&p| self.live_route(p).is_none()) {
                        return Err(e);
                    }
                }
                None => return r,
            }
        }
    }

    fn write(&self, pages: &[u64], data: &[&[u8]]) -> Result<(), BackendError> {
        if let Some(ucx) = &self.ucx {
            return self.ucx_write(ucx, pages, data);
        }
        if self.replicas == 1 {
            return self.per_route(
                pages,
                |p| self.route(p, 0),
                |r, idx| self.write_to(r, pages, data, idx),
            );
        }
        // Send to every live copy, then wait for every acknowledgement: with
        // replicas, a page leaves local memory only once each live copy has
        // stored it (with one copy the acknowledgement is read later; see
        // the module comment). A copy whose server is lost is counted, and
        // the write fails only if no copy of some page is left.
        let mut sent = [[false; MAX_PAGES_PER_CALL]; crate::config::MAX_REPLICAS];
        for (k, sent_k) in sent[..self.replicas].iter_mut().enumerate() {
            *sent_k = self.on_copy(pages, k, |r, idx| {
                self.write_to(r, pages, data, idx).map(|()| true)
            })?;
        }
        let mut copies = [0u8; MAX_PAGES_PER_CALL];
        for (k, sent_k) in sent[..self.replicas].iter().enumerate() {
            // Routes group the same positions in both rounds, so one
            // position tells whether the route's write was sent.
            let acked = self.on_copy(pages, k, |r, idx| {
                Ok(sent_k[idx[0]] && self.drain_conn(r.0, r.1).map(|()| true)?)
            })?;
            for (c, ok) in copies.iter_mut().zip(acked) {
                *c += u8::from(ok);
            }
        }
        for (i, &c) in copies[..pages.len()].iter().enumerate() {
            if c == 0 {
                return Err(BackendError::Io {
                    server: self.holder(pages[i]),
                    source: io::Error::other("every server holding a copy of this page is down"),
                });
            }
            if (c as usize) < self.replicas {
                self.under_replicated.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    fn free(&self, start: u64, n: u64) -> Result<(), BackendError> {
        // Every server may hold part of the range. Write-backs of these pages
        // were all sent before the pages were released; draining every
        // connection makes sure the server stored them before it frees.
        for (s, server) in self.servers.iter().enumerate() {
            if self.is_down(s) {
                continue;
            }
            let r = self.free_on(s, server, start, n);
            match r {
                Err(e) if self.lost(&e) => self.fail_over(s, &e)?,
                other => other?,
            }
        }
        Ok(())
    }

    fn describe(&self) -> String {
        let names: Vec<_> = self.servers.iter().map(|s| s.name.as_str()).collect();
        format!("memory servers {}", names.join(","))
    }

    fn holder(&self, page: u64) -> String {
        let names: Vec<&str> = (0..self.replicas)
            .map(|k| self.servers[self.route(page, k).0].name.as_str())
            .collect();
        names.join(" and ")
    }

    fn distrust(&self, page: u64) -> bool {
        if self.replicas == 1 {
            return false;
        }
        let Some((s, _)) = self.live_route(page) else {
            return false;
        };
        // Only the flag: this may run inside `drain` (an asynchronous read's
        // completion) holding one of this server's connections, so no
        // salvage here. The server still answers; what it owes arrives and
        // is checked like any page. Hazard: the re-read that follows takes
        // a connection of the next copy's server while this thread may hold
        // one of the distrusted server's; a thread doing the same the other
        // way round at once (two servers corrupting pages at the same
        // moment) would wait for ever.
        if !self.servers[s].down.swap(true, Ordering::AcqRel) {
            use std::fmt::Write as _;
            let mut m = crate::signals::MsgBuf::new();
            let _ = writeln!(
                m,
                "farmem: warning: memory server {} returned a page with the wrong contents (checksum mismatch); it is no longer used, and its pages are served from their other copies",
                self.servers[s].name
            );
            farmem_sys::write_stderr(m.as_bytes());
        }
        self.live_route(page).is_some()
    }

    fn health(&self) -> Option<String> {
        if self.replicas == 1 {
            return None;
        }
        let ns = self.servers.len();
        let down: Vec<usize> = (0..ns).filter(|&s| self.is_down(s)).collect();
        let names: Vec<&str> = down
            .iter()
            .map(|&s| self.servers[s].name.as_str())
            .collect();
        // Copy k of stripe unit u is on server (u + k) % ns: the units with
        // fewer live copies now are those with a copy on a lost server.
        let short = (0..ns)
            .filter(|u| (0..self.replicas).any(|k| down.contains(&((u + k) % ns))))
            .count();
        let under = self.under_replicated.load(Ordering::Relaxed);
        Some(format!(
            "  replicas                       {:>12} (servers down: {}; fewer copies now: the pages of {short} in every {ns} stripe units of {} pages, stripe unit u having copies on servers u..u+{} mod {ns}; page writes that reached fewer copies: {under})\n",
            self.replicas,
            if names.is_empty() { "none".into() } else { names.join(", ") },
            self.stripe,
            self.replicas - 1,
        ))
    }

    unsafe fn read_async(
        &self,
        pages: &[u64],
        buf: *mut u8,
        token: u64,
    ) -> Result<bool, BackendError> {
        if self.ucx.is_some() {
            // Gets complete within the caller's own batch read.
            return Ok(false);
        }
        let Some(route) = self.live_route(pages[0]) else {
            // Every copy is down: the synchronous read reports it.
            return Ok(false);
        };
        let (s, c) = route;
        let server = &self.servers[s];
        let conn = self.acquire(s, c);
        let r = (|| {
            self.room(server, conn)?;
            let n = pages.len();
            let idx: [usize; MAX_PAGES_PER_CALL] = std::array::from_fn(|i| i);
            let tag = self.send_read(server, conn, pages, &idx[..n])?;
            self.pending(conn).push(Owed::Read {
                tag,
                first: pages[0],
                pages: frame_u32(n),
                buf,
                token,
            });
            Ok(true)
        })();
        conn.busy.store(false, Ordering::Release);
        match r {
            // Every error comes before the request is queued (the push
            // is the last step): salvage what the server owed, and let the
            // caller read synchronously from another copy.
            Err(e) if self.lost(&e) => {
                self.fail_over(s, &e)?;
                Ok(false)
            }
            other => other,
        }
    }

    fn progress(&self, page: u64) -> Result<(), BackendError> {
        // Every copy's connection: a read owed by a server that is now down
        // is salvaged here, or its page would wait for ever.
        for k in 0..self.replicas {
            let (s, c) = self.route(page, k);
            if let Err(e) = self.drain_conn(s, c) {
                if !self.lost(&e) {
                    return Err(e);
                }
                self.fail_over(s, &e)?;
            }
        }
        Ok(())
    }

    fn progress_all(&self) -> Result<(), BackendError> {
        for (s, server) in self.servers.iter().enumerate() {
            for c in 0..server.conns.len() {
                if let Err(e) = self.drain_conn(s, c) {
                    if !self.lost(&e) {
                        return Err(e);
                    }
                    self.fail_over(s, &e)?;
                }
            }
        }
        Ok(())
    }

    fn route_run(&self, page: u64) -> u64 {
        self.stripe - page % self.stripe
    }

    fn set_completion(&self, f: fn(u64)) {
        let _ = self.complete.set(f);
    }

    fn reserve(&self, first: u64, n: u64) -> Result<(), BackendError> {
        let Some(ucx) = &self.ucx else {
            return Ok(());
        };
        // Every server that holds a copy of a page of the range gets the
        // page's chunk (pages sit at their own number's offset).
        let end = first + n;
        let mut p = first;
        while p < end {
            let run_end = (p + self.route_run(p)).min(end);
            for k in 0..self.replicas {
                let (s, _) = self.route(p, k);
                if self.is_down(s) || ucx.granted(s, p) {
                    continue;
                }
                let c = p / ucx.chunk_pages();
                match ucx.ensure(s, c, || self.grant_on(s, c)) {
                    Err(e) if self.lost(&e) => self.fail_over(s, &e)?,
                    other => other?,
                }
            }
            p = run_end;
        }
        Ok(())
    }

    fn register_slots(&self, ptr: *mut u8, len: usize) {
        if let Some(ucx) = &self.ucx {
            ucx.register_slots(ptr, len);
        }
    }

    fn transport(&self) -> &'static str {
        match &self.ucx {
            Some(u) if u.is_local() => "ucx (one-sided, shared memory)",
            Some(_) => "ucx (one-sided)",
            None => "socket",
        }
    }
}

/// Ask the server behind `link` (this session's first connection) to move
/// the session's pages onto UCX: its chunk size and worker address, or
/// None where it has no UCX and `required` is false.
fn open_ucx(
    server: &Server,
    link: &dyn Transport,
    wait: Wait,
    required: bool,
) -> Result<Option<(u64, Vec<u8>)>, BackendError> {
    link.send(&[&Frame::UcxOpen.encode(0)], wait)
        .map_err(|source| BackendError::Io {
            server: server.name.clone(),
            source,
        })?;
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
            return Err(BackendError::Protocol {
                server: server.name.clone(),
                why: format!("FARMEM_TRANSPORT=ucx, and the server cannot: {message}"),
            })
        }
        Err(e) => return Err(e),
    };
    let h = Header::new(Op::UcxOpenOk, 0, 0, frame_u32(n));
    match wire::decode_reply(&h, &payload[..n]) {
        Ok(Reply::UcxOpenOk {
            chunk_pages,
            address,
        }) if chunk_pages > 0 => Ok(Some((chunk_pages, address.to_vec()))),
        other => Err(BackendError::Protocol {
            server: server.name.clone(),
            why: format!("a UcxOpenOk that does not decode: {other:?}"),
        }),
    }
}

/// Receive a reply `op` (tag `tag`) with a payload of variable length into
/// `payload`; its length.
fn recv_blob(
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
            .map_err(|source| BackendError::Io {
                server: server.name.clone(),
                source,
            })?;
        return Ok(n);
    }
    // An Error reply, or the wrong one: `check_reply` says which.
    check_reply(server, link, &h, op, tag, h.len, wait)?;
    Ok(0)
}
