//! `farmem serve`: a memory server holding other processes' pages.
//!
//! One thread per connection. A connection thread spins briefly on its
//! non-blocking socket after each reply before it blocks, because a blocked
//! thread on an idle vCPU costs ~100 µs to wake (docs/design.md) while a
//! faulting client sends its next request within microseconds.
//!
//! The connections of one session are served in parallel: a session's pages
//! are one flat array (see `store`) that Reads send from and Writes receive
//! into, with no lock held; the only lock is the session table's, taken at
//! Hello and when a connection closes.
//!
//! Modules: `listener` (the listening socket), `connection` (one client's
//! requests and replies), `session` (the session table), `store` (a
//! session's pages), `capacity` (the pages sessions may hold: every charge
//! and refusal), `memfd` and `ucx` (the one-sided page paths), `metrics`,
//! `options` (`farmem serve`'s options checked into a [`ServerConfig`], the
//! shared-secret rule, the stop conditions).

mod capacity;
mod connection;
mod listener;
mod memfd;
mod metrics;
pub mod options;
mod session;
mod store;
mod ucx;
pub use farmem_wire::CHUNK_PAGES;
pub use metrics::{metrics_token, MetricsAccess, MetricsEndpoint, SCRAPE_DEADLINE};

use connection::{serve_connection, Door};
use farmem_sys::net::{send_vectored, Wait};
use farmem_wire::{ErrorCode, Frame, PAGE_SIZE};
use listener::{is_transient_accept_error, Listener};
use session::{SessionEntry, Token};
use std::collections::HashMap;
use std::io;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use thiserror::Error;

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
    /// An option out of its range, or a setting refused (see `options`).
    #[error("{0}")]
    Option(String),
    #[error("--rendezvous: {0}")]
    Rendezvous(#[from] farmem_rendezvous::RendezvousError),
}

pub use farmem_wire::auth::Secret;
pub use farmem_wire::ServerAddr;

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
    /// The shared secret TCP clients must prove they hold (see
    /// `farmem_wire::auth`); None serves without authentication.
    pub secret: Option<Arc<Secret>>,
    /// Most sessions (client processes) at once.
    pub max_sessions: usize,
    /// Most pages one session may store (0: up to the whole capacity).
    pub session_quota_pages: u64,
    /// How long a client may take to finish a frame it has begun, or to
    /// take a reply: a client that stalls longer is disconnected.
    pub client_timeout_ns: u64,
    /// How long a new connection may stay silent before Hello.
    pub hello_timeout_ns: u64,
    /// Users besides this server's own whose processes may hold its memory
    /// files (the one-host page path; checked by `SO_PEERCRED`).
    pub memfd_uids: Vec<u32>,
}

impl ServerConfig {
    pub fn new(listen: impl Into<ServerAddr>, capacity_bytes: u64) -> ServerConfig {
        ServerConfig {
            listen: listen.into(),
            capacity_pages: capacity_bytes / PAGE_SIZE as u64,
            spin_ns: 1_000_000,
            max_connections: 1024,
            verbose: false,
            secret: None,
            max_sessions: 1024,
            session_quota_pages: 0,
            client_timeout_ns: 30_000_000_000,
            hello_timeout_ns: 10_000_000_000,
            memfd_uids: Vec::new(),
        }
    }
}

struct Shared {
    cfg: ServerConfig,
    /// Pages charged against `cfg.capacity_pages` and each session's quota.
    capacity: capacity::Capacity,
    sessions: Mutex<HashMap<Token, SessionEntry>>,
    conns: Mutex<HashMap<u64, OwnedFd>>,
    next_conn: AtomicU64,
    shutdown: AtomicBool,
    /// Leaving (`--drain`, stopped): no new session; clients see it in
    /// Stats and move their pages off.
    draining: AtomicBool,
    /// When the last "cannot accept" line was printed (ns).
    last_accept_warning: AtomicU64,
    /// UCX, started at the first UcxOpen (or why it cannot be).
    ucx: std::sync::OnceLock<Result<Arc<ucx::Engine>, String>>,
    /// `tcp` or `unix`: how clients reach the listener.
    transport: &'static str,
    /// The side door's abstract socket name (a TCP server's, see
    /// `connection::Door::Side`).
    side_door: Option<String>,
    /// Numbers sessions for the metrics (the token itself is a secret).
    next_session: AtomicU64,
    metrics: metrics::Metrics,
}

impl Shared {
    /// The UCX engine, started on first use.
    fn ucx(&self) -> Result<&Arc<ucx::Engine>, &str> {
        self.ucx
            .get_or_init(|| {
                // Shared memory is a test path, for a server only this host
                // can reach; one other hosts reach gets RDMA verbs only.
                let transports = if options::is_local(&self.cfg.listen) {
                    farmem_sys::ucx::Transports::PosixTestPath
                } else {
                    farmem_sys::ucx::Transports::Verbs
                };
                ucx::Engine::start_on(self.cfg.spin_ns, transports).map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(String::as_str)
    }
}

/// A bound server, not yet accepting.
pub struct Server {
    listener: Listener,
    /// A TCP server's side door (`connection::Door::Side`).
    side: Option<Listener>,
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
        let transport = if listener.is_tcp() { "tcp" } else { "unix" };
        let side = if listener.is_tcp() {
            match side_door() {
                Ok(door) => Some(door),
                Err(e) => {
                    tracing::warn!("no side door for memory files ({e}): clients on this host move pages over TCP");
                    None
                }
            }
        } else {
            None
        };
        let (side, side_door) = side.map_or((None, None), |(l, n)| (Some(l), Some(n)));
        Server {
            listener,
            side,
            shared: Arc::new(Shared {
                transport,
                side_door,
                next_session: AtomicU64::new(1),
                metrics: metrics::Metrics::default(),
                capacity: capacity::Capacity::new(cfg.capacity_pages, cfg.session_quota_pages),
                cfg,
                sessions: Mutex::new(HashMap::new()),
                conns: Mutex::new(HashMap::new()),
                next_conn: AtomicU64::new(1),
                shutdown: AtomicBool::new(false),
                draining: AtomicBool::new(false),
                last_accept_warning: AtomicU64::new(0),
                ucx: std::sync::OnceLock::new(),
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
        let server_span = tracing::info_span!("serve", server = %self.local_addr());
        let _in = server_span.enter();
        let shared = self.shared;
        let front = if self.listener.is_tcp() {
            Door::Tcp
        } else {
            Door::Unix
        };
        // Both doors in one loop, polled together: no thread of their own.
        let mut doors = vec![(&self.listener, front)];
        if let Some(side) = &self.side {
            doors.push((side, Door::Side));
        }
        accept_loop(&doors, &shared, &server_span)?;
        if let Some(Ok(e)) = shared.ucx.get() {
            e.stop();
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

/// Accept on each of `doors` (a listener, and how clients arriving there
/// came in) and serve each connection on a thread of its own, until the
/// shutdown flag is set.
fn accept_loop(
    doors: &[(&Listener, Door)],
    shared: &Arc<Shared>,
    server_span: &tracing::Span,
) -> Result<(), ServerError> {
    let fds: Vec<_> = doors.iter().map(|(l, _)| l.fd()).collect();
    while !shared.shutdown.load(Ordering::Acquire) {
        let mut idle = 0;
        for &(listener, door) in doors {
            match listener.accept() {
                Ok((stream, peer)) => {
                    // The side door lets in only the users this server
                    // hands memory files to.
                    if door == Door::Side {
                        if let Err(why) = connection::side_peer_ok(shared, stream.as_raw_fd()) {
                            shared.metrics.refused(metrics::Refusal::Auth);
                            tracing::warn!("refused a client at the side door: {why}");
                            continue;
                        }
                    }
                    let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
                    let sh = shared.clone();
                    let full = lock(&shared.conns).len() >= shared.cfg.max_connections;
                    if full {
                        shared.metrics.refused(metrics::Refusal::Limit);
                        tracing::warn!(
                            "refused {peer}: this server has its most connections ({}); start it with a larger --max-connections",
                            shared.cfg.max_connections
                        );
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
                    let counters = shared.metrics.open(id);
                    // Every line this connection logs names the server,
                    // the peer and (once it says Hello) the session.
                    let span = tracing::info_span!(
                        parent: server_span,
                        "conn",
                        peer = %peer,
                        session = tracing::field::Empty
                    );
                    let spawned = std::thread::Builder::new()
                        .name(format!("farmem-conn-{id}"))
                        .spawn(move || {
                            let _in = span.enter();
                            tracing::debug!("connected");
                            let r = serve_connection(&sh, stream, door, &peer, &counters);
                            match r {
                                Err(e) if !sh.shutdown.load(Ordering::Relaxed) => {
                                    if sh.cfg.verbose {
                                        tracing::info!("client {peer}: {e}");
                                    } else {
                                        tracing::debug!("client {peer}: {e}");
                                    }
                                }
                                _ => tracing::debug!("disconnected"),
                            }
                            sh.metrics.close(id);
                            lock(&sh.conns).remove(&id);
                        });
                    if let Err(e) = spawned {
                        shared.metrics.close(id);
                        lock(&shared.conns).remove(&id);
                        tracing::error!("cannot start a connection thread: {e}");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => idle += 1,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_transient_accept_error(&e) => {
                    // Out of descriptors (or memory) for now: new clients
                    // wait in the backlog, and those connected go on. Say so
                    // once a minute at most.
                    let now = farmem_sys::now_ns();
                    if now.saturating_sub(shared.last_accept_warning.load(Ordering::Relaxed))
                        > 60_000_000_000
                    {
                        shared.last_accept_warning.store(now, Ordering::Relaxed);
                        tracing::warn!(
                            "cannot accept connections for now ({e}); they wait until some close{}",
                            if e.raw_os_error() == Some(libc::EMFILE) {
                                ": raise the descriptor limit (ulimit -n) or lower --max-connections"
                            } else {
                                ""
                            }
                        );
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(e) => return Err(ServerError::Accept(e)),
            }
        }
        if idle == doors.len() {
            farmem_sys::net::wait_readable_any(&fds, 100);
        }
    }
    Ok(())
}

/// A side door: an abstract Unix socket of a random name (nothing on the
/// file system, and no name another user could guess), listening.
fn side_door() -> io::Result<(Listener, String)> {
    let mut r = [0u8; 16];
    farmem_sys::process::fill_random(&mut r)?;
    let name = format!("farmem-side-{}", hex(&r));
    let l = Listener::bind(&ServerAddr::UnixAbstract(name.clone()))?;
    l.set_nonblocking()?;
    Ok((l, name))
}

/// `bytes` in lowercase hex (the side door's name, the metrics token).
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Stops a running server from another thread or a signal handler.
#[derive(Clone)]
pub struct ServerStop(Arc<Shared>);

impl ServerStop {
    pub fn stop(&self) {
        self.0.shutdown.store(true, Ordering::Release);
    }

    /// Begin leaving: no new session from now on, and Stats tells the
    /// clients, which move their pages off and close their sessions.
    pub fn drain(&self) {
        self.0.draining.store(true, Ordering::Release);
    }

    /// Sessions open, and the pages they hold.
    pub fn held(&self) -> (usize, u64) {
        (lock(&self.0.sessions).len(), self.0.capacity.used())
    }
}

impl ServerHandle {
    pub fn addr(&self) -> ServerAddr {
        self.addr.clone()
    }

    /// Pages stored across all sessions.
    pub fn used_pages(&self) -> u64 {
        self.shared.capacity.used()
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn quick_wait() -> Wait {
    Wait {
        spin_ns: 0,
        timeout_ns: 2_000_000_000,
    }
}
