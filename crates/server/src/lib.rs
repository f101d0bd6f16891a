//! `farmem serve`: a memory server holding other processes' pages.
//!
//! One thread per connection. A connection thread spins briefly on its
//! non-blocking socket after each reply before it blocks, because a blocked
//! thread on an idle vCPU costs ~100 µs to wake (docs/design.md) while a
//! faulting client sends its next request within microseconds.
//!
//! Sessions: a client names its page space with a random 128-bit token at
//! Hello. Connections with the same token share the space; nothing else can
//! read it. A session's pages are released when its last connection closes.
//!
//! The connections of one session are served in parallel: a session's pages
//! are one flat array (see `store`) that Reads send from and Writes receive
//! into, with no lock held; the only lock is the session table's, taken at
//! Hello and when a connection closes.

mod store;

use farmem_sys::net::{send_vectored, send_vectored_raw, set_nonblocking, RawBuf, Wait, MAX_IOV};
use farmem_wire::{
    self as wire, ErrorCode, Frame, Header, Op, Request, ServerStats, WireError, HEADER_LEN,
    MAX_BATCH, PAGE_SIZE,
};
use std::collections::HashMap;
use std::io;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use store::{Access, Store};
use thiserror::Error;

type Token = [u8; wire::TOKEN_LEN];

/// Socket buffers for accepted connections: room for a whole largest frame
/// (256 pages and their numbers), so a Read reply or a client's Write leaves
/// in one `sendmsg` instead of waiting for the peer to drain the socket.
const SOCKET_BUFFER: usize = HEADER_LEN + wire::MAX_PAYLOAD;

/// Errors that stop the server as a whole (connection errors never do).
#[derive(Debug, Error)]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source} (is the port in use? pick another with --listen)")]
    Bind { addr: ServerAddr, source: io::Error },
    #[error("descriptor {fd} is not a listening socket to serve on: {source}")]
    ListenFd {
        fd: std::os::fd::RawFd,
        source: io::Error,
    },
    #[error("accept failed: {0}")]
    Accept(io::Error),
    #[error("cannot start a server thread: {0}")]
    Spawn(io::Error),
}

pub use farmem_wire::ServerAddr;

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    fn bind(addr: &ServerAddr) -> io::Result<Listener> {
        match addr {
            ServerAddr::Tcp { host, port } => {
                TcpListener::bind((host.as_str(), *port)).map(Listener::Tcp)
            }
            ServerAddr::Unix(path) => UnixListener::bind(path).map(Listener::Unix),
            ServerAddr::UnixAbstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                let sa = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                UnixListener::bind_addr(&sa).map(Listener::Unix)
            }
        }
    }

    fn fd(&self) -> std::os::fd::RawFd {
        match self {
            Listener::Tcp(l) => l.as_raw_fd(),
            Listener::Unix(l) => l.as_raw_fd(),
        }
    }

    fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.set_nonblocking(true),
            Listener::Unix(l) => l.set_nonblocking(true),
        }
    }

    /// Accept one connection: its socket and a name for messages.
    fn accept(&self) -> io::Result<(OwnedFd, String)> {
        match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept()?;
                let _ = s.set_nodelay(true);
                // Best effort: a smaller buffer only costs more waits.
                let _ = farmem_sys::net::set_socket_buffers(s.as_raw_fd(), SOCKET_BUFFER);
                Ok((s.into(), peer.to_string()))
            }
            Listener::Unix(l) => {
                let (s, _) = l.accept()?;
                let _ = farmem_sys::net::set_socket_buffers(s.as_raw_fd(), SOCKET_BUFFER);
                Ok((s.into(), "unix client".into()))
            }
        }
    }
}

/// How a server is set up.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: ServerAddr,
    /// Total pages all sessions together may store.
    pub capacity_pages: u64,
    /// How long a connection thread spins for the next request before blocking.
    pub spin_ns: u64,
    /// Most connections served at once; more are refused with an error.
    pub max_connections: usize,
    /// Print one line per client error on stderr.
    pub verbose: bool,
}

impl ServerConfig {
    pub fn new(listen: impl Into<ServerAddr>, capacity_bytes: u64) -> ServerConfig {
        ServerConfig {
            listen: listen.into(),
            capacity_pages: capacity_bytes / PAGE_SIZE as u64,
            spin_ns: 1_000_000,
            max_connections: 1024,
            verbose: false,
        }
    }
}

/// A session in the session table. Its pages are reached through the `Arc`
/// each connection holds, never through the table's lock.
struct SessionEntry {
    store: Arc<Store>,
    /// Connections that said Hello with this token; at 0 the pages go.
    connections: u64,
}

struct Shared {
    cfg: ServerConfig,
    used_pages: AtomicU64,
    sessions: Mutex<HashMap<Token, SessionEntry>>,
    conns: Mutex<HashMap<u64, OwnedFd>>,
    next_conn: AtomicU64,
    shutdown: AtomicBool,
}

/// A bound server, not yet accepting.
pub struct Server {
    listener: Listener,
    shared: Arc<Shared>,
}

/// A server running on its own thread; dropping it shuts it down.
pub struct ServerHandle {
    addr: ServerAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<Result<(), ServerError>>>,
}

impl Server {
    pub fn bind(cfg: ServerConfig) -> Result<Server, ServerError> {
        let bind_err = |source| ServerError::Bind {
            addr: cfg.listen.clone(),
            source,
        };
        let listener = Listener::bind(&cfg.listen).map_err(bind_err)?;
        listener.set_nonblocking().map_err(bind_err)?;
        Ok(Server::with_listener(listener, cfg))
    }

    fn with_listener(listener: Listener, cfg: ServerConfig) -> Server {
        Server {
            listener,
            shared: Arc::new(Shared {
                cfg,
                used_pages: AtomicU64::new(0),
                sessions: Mutex::new(HashMap::new()),
                conns: Mutex::new(HashMap::new()),
                next_conn: AtomicU64::new(1),
                shutdown: AtomicBool::new(false),
            }),
        }
    }

    /// Serve on `fd`, a socket already bound and listening (inherited from a
    /// parent that chose the address: the runtime's embedded server). The
    /// address in `cfg.listen` is replaced by the socket's own.
    pub fn from_listening_fd(fd: OwnedFd, mut cfg: ServerConfig) -> Result<Server, ServerError> {
        let raw = fd.as_raw_fd();
        let err = |source: io::Error| ServerError::ListenFd { fd: raw, source };
        let listener = match farmem_sys::net::listening_family(raw).map_err(err)? {
            libc::AF_UNIX => {
                let l = UnixListener::from(fd);
                let a = l.local_addr().map_err(err)?;
                use std::os::linux::net::SocketAddrExt;
                cfg.listen = match (a.as_abstract_name(), a.as_pathname()) {
                    (Some(name), _) => {
                        ServerAddr::UnixAbstract(String::from_utf8_lossy(name).into_owned())
                    }
                    (None, Some(path)) => ServerAddr::Unix(path.display().to_string()),
                    (None, None) => {
                        return Err(err(io::Error::new(
                            io::ErrorKind::InvalidInput,
                            "an unnamed Unix socket",
                        )))
                    }
                };
                Listener::Unix(l)
            }
            libc::AF_INET | libc::AF_INET6 => {
                let l = TcpListener::from(fd);
                cfg.listen = ServerAddr::from(l.local_addr().map_err(err)?);
                Listener::Tcp(l)
            }
            other => {
                return Err(err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("a socket of address family {other}, not TCP or Unix"),
                )))
            }
        };
        listener.set_nonblocking().map_err(err)?;
        Ok(Server::with_listener(listener, cfg))
    }

    /// The address clients connect to (with the real port when bound to port 0).
    pub fn local_addr(&self) -> ServerAddr {
        match &self.listener {
            Listener::Tcp(l) => l
                .local_addr()
                .map(ServerAddr::from)
                .unwrap_or_else(|_| self.shared.cfg.listen.clone()),
            Listener::Unix(_) => self.shared.cfg.listen.clone(),
        }
    }

    /// A flag that makes [`Server::run`] return when set.
    pub fn shutdown_flag(&self) -> ServerStop {
        ServerStop(self.shared.clone())
    }

    /// Accept and serve until the shutdown flag is set.
    pub fn run(self) -> Result<(), ServerError> {
        let shared = self.shared;
        while !shared.shutdown.load(Ordering::Acquire) {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
                    let sh = shared.clone();
                    let full = lock(&shared.conns).len() >= shared.cfg.max_connections;
                    if full {
                        let out = Frame::Error {
                            code: ErrorCode::Capacity,
                            message: "server has too many connections",
                        }
                        .encode(0);
                        let _ = send_vectored(stream.as_raw_fd(), &[&out], quick_wait());
                        drop(stream);
                        continue;
                    }
                    if let Ok(clone) = stream.try_clone() {
                        lock(&shared.conns).insert(id, clone);
                    }
                    let spawned = std::thread::Builder::new()
                        .name(format!("farmem-conn-{id}"))
                        .spawn(move || {
                            let r = serve_connection(&sh, stream);
                            if let Err(e) = r {
                                if sh.cfg.verbose && !sh.shutdown.load(Ordering::Relaxed) {
                                    eprintln!("farmem serve: client {peer}: {e}");
                                }
                            }
                            lock(&sh.conns).remove(&id);
                        });
                    if let Err(e) = spawned {
                        lock(&shared.conns).remove(&id);
                        eprintln!("farmem serve: cannot start a connection thread: {e}");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let mut pfd = libc::pollfd {
                        fd: self.listener.fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: pfd is one live pollfd.
                    unsafe { libc::poll(&mut pfd, 1, 100) };
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_transient_accept_error(&e) => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(e) => return Err(ServerError::Accept(e)),
            }
        }
        // Close every connection so their threads see EOF and exit.
        for (_, s) in lock(&shared.conns).drain() {
            farmem_sys::net::shutdown(s.as_raw_fd());
        }
        Ok(())
    }

    /// Run on a background thread.
    pub fn spawn(self) -> Result<ServerHandle, ServerError> {
        let addr = self.local_addr();
        let shared = self.shared.clone();
        let thread = std::thread::Builder::new()
            .name("farmem-server".into())
            .spawn(move || self.run())
            .map_err(ServerError::Spawn)?;
        Ok(ServerHandle {
            addr,
            shared,
            thread: Some(thread),
        })
    }
}

/// Stops a running server from another thread or a signal handler.
#[derive(Clone)]
pub struct ServerStop(Arc<Shared>);

impl ServerStop {
    pub fn stop(&self) {
        self.0.shutdown.store(true, Ordering::Release);
    }
}

impl ServerHandle {
    pub fn addr(&self) -> ServerAddr {
        self.addr.clone()
    }

    /// Pages stored across all sessions.
    pub fn used_pages(&self) -> u64 {
        self.shared.used_pages.load(Ordering::Relaxed)
    }

    pub fn shutdown(mut self) -> Result<(), ServerError> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<(), ServerError> {
        self.shared.shutdown.store(true, Ordering::Release);
        match self.thread.take() {
            Some(t) => t.join().unwrap_or(Ok(())),
            None => Ok(()),
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

fn is_transient_accept_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE)
            | Some(libc::ENFILE)
            | Some(libc::ENOBUFS)
            | Some(libc::ENOMEM)
            | Some(libc::ECONNABORTED)
    )
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn quick_wait() -> Wait {
    Wait {
        spin_ns: 0,
        timeout_ns: 2_000_000_000,
    }
}

/// Why a connection ended early.
#[derive(Debug, Error)]
enum ConnError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("protocol error, connection closed: {0}")]
    Protocol(#[from] wire::WireError),
}

fn serve_connection(sh: &Shared, stream: OwnedFd) -> Result<(), ConnError> {
    let fd = stream.as_raw_fd();
    set_nonblocking(fd)?;
    // Wait for requests forever (EOF or shutdown ends the loop), spinning first.
    let idle = Wait {
        spin_ns: sh.cfg.spin_ns,
        timeout_ns: u64::MAX / 2,
    };
    let reply_wait = Wait {
        spin_ns: sh.cfg.spin_ns,
        timeout_ns: 30_000_000_000,
    };
    let mut session: Option<(Token, Arc<Store>)> = None;
    let mut input = Input::new();
    let mut out = Vec::with_capacity(HEADER_LEN + wire::MAX_ERROR_MSG);
    let result = loop {
        match input.fill(fd, HEADER_LEN, idle) {
            Ok(true) => {}
            Ok(false) => break Ok(()),
            Err(e) => break Err(e.into()),
        }
        let mut hb = [0u8; HEADER_LEN];
        hb.copy_from_slice(input.peek(HEADER_LEN));
        let h = match Header::decode(&hb) {
            Ok(h) => h,
            Err(e) => {
                let msg = e.to_string();
                let reply = Frame::Error {
                    code: e.code(),
                    message: &msg,
                };
                let _ = send_vectored(fd, &[&reply.encode(0)], reply_wait);
                break Err(e.into());
            }
        };
        out.clear();
        let keep = match h.op {
            // Page data goes straight into the store, not through `input`.
            Op::Write => serve_write(sh, &session, &h, &mut input, &mut out, fd, reply_wait),
            Op::Hello | Op::Read | Op::Free | Op::Stats => {
                // Small payloads (a Read's page list is at most 2 KiB).
                let frame = HEADER_LEN + h.len as usize;
                if let Err(e) = input.fill(fd, frame, reply_wait) {
                    break Err(e.into());
                }
                let payload = &input.peek(frame)[HEADER_LEN..];
                let keep = match wire::decode_request(&h, payload) {
                    Ok(req) => handle(sh, &mut session, &h, req, &mut out, fd, reply_wait),
                    Err(e) => {
                        error_reply(&mut out, h.tag, e.code(), &e.to_string());
                        Ok(e.code().keeps_connection())
                    }
                };
                input.consume(frame);
                keep
            }
            // A reply sent as a request: read past its payload (closing with
            // unread input would reset the connection under the error
            // reply), refuse it and close.
            _ => {
                input.consume(HEADER_LEN);
                input.skip(fd, h.len as usize, reply_wait).map(|()| {
                    let e = WireError::UnknownOp(h.op as u16);
                    error_reply(&mut out, h.tag, e.code(), &e.to_string());
                    false
                })
            }
        };
        let keep = match keep {
            Ok(k) => k,
            Err(e) => break Err(e.into()),
        };
        if !out.is_empty() {
            if let Err(e) = send_vectored(fd, &[&out], reply_wait) {
                break Err(e.into());
            }
        }
        if !keep {
            break Ok(());
        }
    };
    if let Some((token, _)) = session {
        leave_session(sh, token);
    }
    result
}

/// Requests arrive through a buffer: one `recv` usually brings a whole
/// request (header and payload), saving a system call per request. It is
/// small, so that little of a Write's page data lands here (to be copied)
/// rather than straight in the store.
struct Input {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl Input {
    fn new() -> Input {
        Input {
            buf: vec![0u8; INPUT_BUFFER].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    /// Make `n` bytes available (n <= the buffer size). Ok(false): the peer
    /// closed cleanly between frames.
    fn fill(&mut self, fd: std::os::fd::RawFd, n: usize, wait: Wait) -> io::Result<bool> {
        if self.start + n > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        // Ask for no more than the largest request but a Write's data, so
        // that a Write's pages mostly stay in the socket for `receive_pages`
        // (limit > end: the loop runs while end < start + n <= buf.len()).
        let limit = (self.start + n.max(SMALL_REQUEST)).min(self.buf.len());
        while self.end - self.start < n {
            let r = farmem_sys::net::recv_some(fd, &mut self.buf[self.end..limit], wait)?;
            if r == 0 {
                if self.end == self.start {
                    return Ok(false);
                }
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "truncated frame",
                ));
            }
            self.end += r;
        }
        Ok(true)
    }

    fn peek(&self, n: usize) -> &[u8] {
        &self.buf[self.start..self.start + n]
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Up to `max` bytes already buffered, consumed.
    fn take(&mut self, max: usize) -> &[u8] {
        let n = max.min(self.end - self.start);
        let from = self.start;
        self.consume(n);
        &self.buf[from..from + n]
    }

    /// Read and drop the next `n` bytes of the stream (a refused frame's payload).
    fn skip(&mut self, fd: std::os::fd::RawFd, n: usize, wait: Wait) -> io::Result<()> {
        let mut left = n - self.take(n).len();
        while left > 0 {
            let k = left.min(self.buf.len());
            let r = farmem_sys::net::recv_some(fd, &mut self.buf[..k], wait)?;
            if r == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "truncated frame",
                ));
            }
            left -= r;
        }
        Ok(())
    }
}

/// The largest request but a Write's page data: a header and `MAX_BATCH`
/// page numbers.
const SMALL_REQUEST: usize = HEADER_LEN + MAX_BATCH as usize * 8;
/// Room for a small request, with space to spare for a following one.
const INPUT_BUFFER: usize = 8192;
const _: () = assert!(2 * SMALL_REQUEST <= INPUT_BUFFER);

/// Put an Error reply into `out`.
fn error_reply(out: &mut Vec<u8>, tag: u32, code: ErrorCode, message: &str) {
    out.extend_from_slice(&Frame::Error { code, message }.encode(tag));
}

/// Handle one decoded request. The reply goes into `out`, except for page
/// data, which is sent straight from the store (and `out` left empty).
/// Returns whether the connection stays open.
fn handle(
    sh: &Shared,
    session: &mut Option<(Token, Arc<Store>)>,
    h: &Header,
    req: Request<'_>,
    out: &mut Vec<u8>,
    fd: std::os::fd::RawFd,
    wait: Wait,
) -> io::Result<bool> {
    let err = |out: &mut Vec<u8>, code: ErrorCode, msg: &str| {
        error_reply(out, h.tag, code, msg);
        Ok(code.keeps_connection())
    };
    match req {
        Request::Hello { token, max_pages } => {
            if session.is_some() {
                return err(
                    out,
                    ErrorCode::Malformed,
                    "this connection already said Hello",
                );
            }
            let s = {
                let mut sessions = lock(&sh.sessions);
                let entry = match sessions.entry(token) {
                    std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::hash_map::Entry::Vacant(v) => match Store::new(max_pages) {
                        Ok(store) => v.insert(SessionEntry {
                            store: Arc::new(store),
                            connections: 0,
                        }),
                        Err(e) => return err(out, ErrorCode::Capacity, &e.to_string()),
                    },
                };
                if entry.store.max_pages() != max_pages {
                    return err(
                        out,
                        ErrorCode::Malformed,
                        "max_pages differs from the session's",
                    );
                }
                entry.connections += 1;
                entry.store.clone()
            };
            *session = Some((token, s));
            let reply = Frame::HelloOk {
                capacity_pages: sh.cfg.capacity_pages,
                used_pages: sh.used_pages.load(Ordering::Relaxed),
            };
            out.extend_from_slice(&reply.encode(h.tag));
            Ok(true)
        }
        Request::Stats => {
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
        Request::Read { pages } => {
            let s = match checked_session(session, wire::pages(pages), "Read") {
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
            let mut parts = [RawBuf::EMPTY; MAX_IOV];
            parts[0] = RawBuf::of(&hdr);
            let mut k = 1;
            for p in wire::pages(pages) {
                if k == MAX_IOV {
                    // SAFETY: `hdr` is live; the pages are inside the
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
        Request::Write { .. } => unreachable!("Writes are served by serve_write"),
        Request::Free { start, pages } => {
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
            sh.used_pages.fetch_sub(freed, Ordering::AcqRel);
            let released = u32::try_from(freed).unwrap_or(u32::MAX);
            out.extend_from_slice(&Frame::FreeOk { released }.encode(h.tag));
            Ok(true)
        }
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
    fd: std::os::fd::RawFd,
    wait: Wait,
) -> io::Result<bool> {
    let n = h.count as usize;
    input.fill(fd, HEADER_LEN + n * 8, wait)?;
    let mut list = [0u64; MAX_BATCH as usize];
    for (d, p) in list
        .iter_mut()
        .zip(wire::pages(&input.peek(HEADER_LEN + n * 8)[HEADER_LEN..]))
    {
        *d = p;
    }
    input.consume(HEADER_LEN + n * 8);
    let pages = &list[..n];
    // A refused Write's data is still on the wire: read past it, then reply.
    let mut refuse = |code: ErrorCode, msg: &str| {
        input.skip(fd, n * PAGE_SIZE, wait)?;
        error_reply(out, h.tag, code, msg);
        Ok(code.keeps_connection())
    };
    let s = match checked_session(session, pages.iter().copied(), "Write") {
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
    // Reserve capacity for the whole batch first: all or nothing.
    let reserved = sh
        .used_pages
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
            (u + new <= sh.cfg.capacity_pages).then_some(u + new)
        })
        .is_ok();
    if !reserved {
        drop(access);
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
        return Err(e);
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

/// The connection's session, if it said Hello and every page is in its range.
fn checked_session<'a>(
    session: &'a Option<(Token, Arc<Store>)>,
    mut pages: impl Iterator<Item = u64>,
    op: &str,
) -> Result<&'a Store, (ErrorCode, String)> {
    let Some((_, s)) = session else {
        return Err((ErrorCode::NoSession, format!("say Hello before {op}")));
    };
    if let Some(p) = pages.find(|&p| p >= s.max_pages()) {
        return Err((
            ErrorCode::OutOfRange,
            format!("page {p} is beyond the session's {} pages", s.max_pages()),
        ));
    }
    Ok(s)
}

fn leave_session(sh: &Shared, token: Token) {
    let mut sessions = lock(&sh.sessions);
    let Some(entry) = sessions.get_mut(&token) else {
        return;
    };
    entry.connections -= 1;
    if entry.connections == 0 {
        // No connection of the session is left, so nothing is in flight:
        // the count is final. The mappings go with the last `Arc`.
        sh.used_pages.fetch_sub(entry.store.len(), Ordering::AcqRel);
        sessions.remove(&token);
    }
}
