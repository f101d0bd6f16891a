//! `farmem serve`'s options as a [`ServerConfig`]: every value checked,
//! the rule for addresses other machines can reach (Redis's protected
//! mode: a shared secret, or an explicit `--insecure`), and the server's
//! stop conditions.

use crate::{Server, ServerConfig, ServerError, ServerStop};
use farmem_rendezvous::Launch;
use farmem_sys::format_size;
use farmem_wire::auth::Secret;
use farmem_wire::{ServerAddr, PAGE_SIZE};
use std::net::ToSocketAddrs;
use std::os::fd::{OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What `farmem serve` is told, in its units (bytes, microseconds,
/// seconds), before it is checked.
#[derive(Debug)]
pub struct ServeOptions {
    pub capacity: u64,
    pub spin_us: u64,
    pub max_connections: usize,
    pub max_sessions: usize,
    /// Most one session may store (default: the whole capacity).
    pub session_quota: Option<u64>,
    pub client_timeout_s: u64,
    pub hello_timeout_s: u64,
    pub verbose: bool,
    pub secret: Option<Secret>,
    /// Users besides the server's own who may hold its memory files.
    pub memfd_uids: Vec<u32>,
}

fn bad(why: String) -> ServerError {
    ServerError::Option(why)
}

impl ServeOptions {
    /// Every option in its range (`phys`: this machine's memory, which
    /// holds the pages).
    pub fn check(&self, phys: u64) -> Result<(), ServerError> {
        let o = self;
        if o.capacity < 1 << 20 {
            return Err(bad(format!(
                "--capacity {} is too small; give at least 1M (e.g. --capacity 4G)",
                o.capacity
            )));
        }
        if o.capacity > phys {
            return Err(bad(format!(
                "--capacity {} is more than this machine's memory ({}); the server keeps pages in RAM",
                format_size(o.capacity),
                format_size(phys)
            )));
        }
        if o.spin_us > 1_000_000 {
            return Err(bad(format!(
                "--spin-us {} is too long; use at most 1000000",
                o.spin_us
            )));
        }
        if o.max_connections == 0 {
            return Err(bad("--max-connections must be at least 1".into()));
        }
        if o.max_sessions == 0 {
            return Err(bad("--max-sessions must be at least 1".into()));
        }
        if let Some(q) = o.session_quota {
            if q < PAGE_SIZE as u64 || q > o.capacity {
                return Err(bad(format!(
                    "--session-quota {} must be at least one page (4K) and at most --capacity ({})",
                    format_size(q),
                    format_size(o.capacity)
                )));
            }
        }
        for (name, v) in [
            ("--client-timeout", o.client_timeout_s),
            ("--hello-timeout", o.hello_timeout_s),
        ] {
            if !(1..=86_400).contains(&v) {
                return Err(bad(format!("{name} {v}: give 1 to 86400 seconds")));
            }
        }
        Ok(())
    }

    /// The server's configuration on `listen`, once [`Self::check`] passes.
    pub fn config(self, listen: ServerAddr, phys: u64) -> Result<ServerConfig, ServerError> {
        self.check(phys)?;
        let o = self;
        let mut cfg = ServerConfig::new(listen, o.capacity);
        cfg.secret = o.secret.map(Arc::new);
        cfg.spin_ns = o.spin_us * 1000;
        cfg.max_connections = o.max_connections;
        cfg.verbose = o.verbose;
        cfg.max_sessions = o.max_sessions;
        cfg.session_quota_pages = o.session_quota.map_or(0, |q| q / PAGE_SIZE as u64);
        cfg.client_timeout_ns = o.client_timeout_s * 1_000_000_000;
        cfg.hello_timeout_ns = o.hello_timeout_s * 1_000_000_000;
        cfg.memfd_uids = o.memfd_uids;
        Ok(cfg)
    }
}

/// Whether only this machine can reach `addr` (loopback or a Unix socket).
pub fn is_local(addr: &ServerAddr) -> bool {
    match addr {
        ServerAddr::Tcp { host, port } => (host.as_str(), *port)
            .to_socket_addrs()
            .map(|mut a| a.all(|a| a.ip().is_loopback()))
            .unwrap_or(false),
        ServerAddr::Unix(_) | ServerAddr::UnixAbstract(_) => true,
    }
}

/// Whether serving `addr` is allowed: a reachable address needs the shared
/// secret or `insecure`. `Ok(Some(warning))` when it is served open on
/// purpose; `default_secret` names where `farmem secret init` writes.
pub fn guard(
    addr: &ServerAddr,
    authenticated: bool,
    insecure: bool,
    default_secret: &str,
) -> Result<Option<String>, ServerError> {
    match (authenticated, is_local(addr), insecure) {
        (false, false, false) => Err(bad(format!(
            "refusing to serve {addr} without a shared secret: anyone who can reach it could read and overwrite the pages stored here. \
             Run `farmem secret init` (it writes {default_secret}), give every client the same file (a shared home does), and start again; \
             or pass --insecure on a network only you use"
        ))),
        (false, false, true) => Ok(Some(format!(
            "serving {addr} with NO authentication (--insecure): anyone who can reach this port can read and overwrite every page stored here"
        ))),
        _ => Ok(None),
    }
}

/// `parent` is this process's parent, as `--parent` claims.
///
/// Process 1 is a valid parent: in a container the program is often its
/// pid namespace's init, and when it exits the kernel kills everything in
/// the namespace, this server included. Outside a container, a server whose
/// parent is the real init was started by hand to live on, as it will.
pub fn check_parent(parent: i32) -> Result<(), ServerError> {
    if parent < 1 {
        return Err(bad(format!(
            "--parent {parent} is not a parent process id; give the pid of the process this server belongs to"
        )));
    }
    if farmem_sys::process::getppid() != parent {
        return Err(bad(format!(
            "--parent {parent}: this server's parent is not process {parent} (it has exited, or the pid is wrong)"
        )));
    }
    Ok(())
}

/// Stop the server on SIGINT or SIGTERM, or when `parent` (its parent at
/// start) has gone: reparenting changes `getppid`. A thread polls every
/// 50 ms. With `drain`, a signal makes the server leave first: it takes no
/// new session and tells its clients, then stops once no session is open
/// (each client closes its own once its pages are on its other servers),
/// or when `drain` has passed.
pub fn stop_on_signal_or_orphan(
    stop: ServerStop,
    parent: Option<i32>,
    drain: Option<std::time::Duration>,
) {
    let signalled = farmem_sys::signal::interrupt_flag();
    std::thread::spawn(move || {
        let tick = std::time::Duration::from_millis(50);
        let orphan = || parent.is_some_and(|p| farmem_sys::process::getppid() != p);
        while !signalled.load(Ordering::Acquire) && !orphan() {
            std::thread::sleep(tick);
        }
        if let (Some(limit), false) = (drain, orphan()) {
            stop.drain();
            let (sessions, pages) = stop.held();
            tracing::info!(
                "draining: {sessions} sessions hold {pages} pages; waiting up to {} s for their clients to move them to other servers",
                limit.as_secs()
            );
            let start = std::time::Instant::now();
            while stop.held().0 > 0 && start.elapsed() < limit && !orphan() {
                std::thread::sleep(tick);
            }
            match stop.held() {
                (0, _) => tracing::info!(
                    "drained in {:.1} s: every client moved its pages off",
                    start.elapsed().as_secs_f64()
                ),
                (n, p) => tracing::warn!(
                    "stopping with {n} sessions still open ({p} pages) after the drain timeout; their clients see a lost server"
                ),
            }
        }
        stop.stop();
    });
}

/// A whole `farmem serve`: the options, where to listen, and what to tell.
#[derive(Debug)]
pub struct Serve {
    pub options: ServeOptions,
    /// Default: 127.0.0.1:7070; with a rendezvous, this node's address and
    /// any free port.
    pub listen: Option<ServerAddr>,
    /// An inherited socket, bound and listening, instead of `listen`.
    pub listen_fd: Option<RawFd>,
    /// Stop when this process, the parent, is gone.
    pub parent: Option<i32>,
    /// Serve a reachable address without a secret, on purpose.
    pub insecure: bool,
    /// Publish this server's rank and address to the directory.
    pub rendezvous: Option<(PathBuf, Launch)>,
    /// Where `farmem secret init` writes, for the refusal's advice.
    pub default_secret: String,
    /// `--metrics`: serve Prometheus metrics on this address (IP:PORT, or
    /// a PORT on loopback).
    pub metrics: Option<String>,
    /// `--metrics-peers`: label the per-session metrics with the client's
    /// IP and port.
    pub metrics_peers: bool,
    /// `--drain`: on a stop signal, leave (see [`stop_on_signal_or_orphan`]),
    /// waiting at most this long.
    pub drain: Option<std::time::Duration>,
}

/// `--metrics`'s address: `PORT` (on loopback) or `HOST:PORT`.
pub fn metrics_addr(arg: &str) -> Result<ServerAddr, ServerError> {
    if let Ok(port) = arg.parse::<u16>() {
        return Ok(ServerAddr::Tcp {
            host: "127.0.0.1".into(),
            port,
        });
    }
    match arg.parse::<ServerAddr>() {
        Ok(a @ ServerAddr::Tcp { .. }) => Ok(a),
        _ => Err(bad(format!(
            "--metrics {arg:?}: give PORT (served on 127.0.0.1) or IP:PORT, e.g. --metrics 9464"
        ))),
    }
}

/// Who may scrape a metrics endpoint on `addr`: anyone on loopback; on an
/// address other machines can reach, a request with the bearer token
/// derived from the shared secret ([`crate::metrics_token`]), or anyone
/// with `--insecure` (no secret to derive it from), with a warning.
fn metrics_access(
    addr: &ServerAddr,
    secret: Option<&Secret>,
    insecure: bool,
    peers: bool,
) -> Result<(crate::MetricsAccess, Option<String>), ServerError> {
    let open = crate::MetricsAccess { token: None, peers };
    match (secret, is_local(addr), insecure) {
        (_, true, _) => Ok((open, None)),
        (Some(s), false, _) => Ok((
            crate::MetricsAccess {
                token: Some(crate::metrics_token(s)),
                peers,
            },
            None,
        )),
        (None, false, true) => Ok((
            open,
            Some(format!(
                "metrics on {addr} are served without authentication to anyone who can reach the port (--insecure)"
            )),
        )),
        (None, false, false) => Err(bad(format!(
            "refusing to serve metrics on {addr} without a shared secret: a scrape there needs a bearer token derived from it. \
             Serve them on loopback (--metrics PORT), start the server with a shared secret (`farmem secret init`), \
             or pass --insecure on a network only you use"
        ))),
    }
}

/// `farmem serve --print-metrics-token`: the bearer token a scraper of a
/// reachable `--metrics` address sends, from the server's secret.
pub fn print_metrics_token(
    secret: Option<&Secret>,
    default_secret: &str,
) -> Result<String, ServerError> {
    match secret {
        Some(s) => Ok(crate::metrics_token(s)),
        None => Err(bad(format!(
            "--print-metrics-token: this server has no shared secret to derive the token from; \
             run `farmem secret init` (it writes {default_secret}) or give --secret-file"
        ))),
    }
}

/// The kernel gives random bytes: the handshake's nonces come from
/// nowhere else (there is no fallback to time or pid), so a server that
/// could not draw them stops before it serves.
fn check_random() -> Result<(), ServerError> {
    let mut probe = [0u8; farmem_wire::auth::NONCE_LEN];
    farmem_sys::process::fill_random(&mut probe).map_err(|e| {
        bad(format!(
            "cannot draw random bytes from the kernel (getrandom: {e}); the authentication nonces need them, and farmem uses no weaker source"
        ))
    })
}

/// Check `s`, bind, say where it listens (and what it published), and
/// serve until a signal or the parent's exit. `say` prints one status line.
pub fn serve(s: Serve, say: &dyn Fn(std::fmt::Arguments)) -> Result<(), ServerError> {
    let secret_path = s
        .options
        .secret
        .as_ref()
        .map(|x| x.path().display().to_string());
    if let (Some(p), true) = (&secret_path, s.insecure) {
        return Err(bad(format!(
            "--insecure and a shared secret ({p}) contradict each other; drop --insecure"
        )));
    }
    if let Some(p) = s.parent {
        check_parent(p)?;
    }
    let listen = match (s.listen, &s.rendezvous) {
        (Some(l), _) => l,
        (None, None) => ServerAddr::Tcp {
            host: "127.0.0.1".into(),
            port: 7070,
        },
        (None, Some(_)) => std::net::SocketAddr::new(farmem_rendezvous::node_address()?, 0).into(),
    };
    if s.options.secret.is_some() {
        check_random()?;
    }
    // The metrics address is checked before anything binds.
    let metrics_at = match &s.metrics {
        Some(arg) => {
            let at = metrics_addr(arg)?;
            let (access, warning) =
                metrics_access(&at, s.options.secret.as_ref(), s.insecure, s.metrics_peers)?;
            if let Some(w) = warning {
                tracing::warn!("{w}");
            }
            Some((at, access))
        }
        None => None,
    };
    let capacity = s.options.capacity;
    let cfg = s.options.config(listen, farmem_sys::phys_memory())?;
    let server = match s.listen_fd {
        Some(fd) => {
            if fd < 0 {
                return Err(bad(format!(
                    "--listen-fd {fd} is not a descriptor; give an inherited listening socket's number"
                )));
            }
            if let Err(e) = farmem_sys::net::listening_family(fd) {
                return Err(bad(format!(
                    "--listen-fd {fd}: {e}; give an inherited socket that is bound and listening"
                )));
            }
            // SAFETY: the descriptor is open (checked just above), inherited
            // for this purpose, and nothing else in this process uses it.
            let owned = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            Server::from_listening_fd(owned, cfg)?
        }
        None => Server::bind(cfg)?,
    };
    let addr = server.local_addr();
    if let Some(w) = guard(&addr, secret_path.is_some(), s.insecure, &s.default_secret)? {
        tracing::warn!("WARNING: {w}");
    }
    let metrics = match metrics_at {
        Some((at, access)) => {
            let needs_token = access.token.is_some();
            let e = crate::MetricsEndpoint::bind(&at.to_string())
                .map_err(|source| {
                    bad(format!(
                        "cannot serve metrics on {at}: {source} (is the port in use? pick another with --metrics)"
                    ))
                })?
                .with_access(access);
            let bound = e.local_addr().map_err(|e| bad(format!("--metrics: {e}")))?;
            if needs_token {
                tracing::info!(
                    "metrics on {bound} answer only requests with the bearer token (`farmem serve --print-metrics-token` prints it)"
                );
            }
            e.serve(&server)
                .map_err(|e| bad(format!("cannot start the metrics thread: {e}")))?;
            Some(bound)
        }
        None => None,
    };
    stop_on_signal_or_orphan(server.shutdown_flag(), s.parent, s.drain);
    say(format_args!(
        "farmem serve: listening on {addr} (capacity {}, protocol v{}, {})",
        format_size(capacity),
        farmem_wire::VERSION,
        match &secret_path {
            Some(p) => format!("TCP clients authenticated with {p}"),
            None => "no authentication".into(),
        }
    ));
    if let Some(m) = metrics {
        say(format_args!("farmem serve: metrics on http://{m}/metrics"));
    }
    let _entry = match &s.rendezvous {
        Some((dir, l)) => {
            let at = farmem_rendezvous::advertised(&addr)?;
            let p = farmem_rendezvous::publish(dir, &farmem_rendezvous::Entry::new(l, &at))?;
            say(format_args!(
                "farmem serve: rank {} of {} ({}, job {}) published {at} in {}",
                l.rank,
                l.size,
                l.launcher,
                if l.job.is_empty() { "unnamed" } else { &l.job },
                p.path().display()
            ));
            Some(p)
        }
        None => None,
    };
    server.run()?;
    say(format_args!("farmem serve: shut down"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> ServeOptions {
        ServeOptions {
            capacity: 64 << 20,
            spin_us: 1000,
            max_connections: 8,
            max_sessions: 8,
            session_quota: None,
            client_timeout_s: 30,
            hello_timeout_s: 10,
            verbose: false,
            secret: None,
            memfd_uids: Vec::new(),
        }
    }

    fn error(o: ServeOptions) -> String {
        let addr: ServerAddr = "127.0.0.1:1".parse().unwrap();
        o.config(addr, 1 << 30).unwrap_err().to_string()
    }

    #[test]
    fn each_bad_option_is_named() {
        let addr: ServerAddr = "127.0.0.1:1".parse().unwrap();
        let c = options().config(addr, 1 << 30).unwrap();
        assert_eq!(c.capacity_pages, (64 << 20) / 4096);
        assert_eq!(c.spin_ns, 1_000_000);
        type Change = fn(&mut ServeOptions);
        let cases: [(Change, &str); 6] = [
            (|o| o.capacity = 1000, "--capacity"),
            (|o| o.capacity = 2 << 30, "this machine's memory"),
            (|o| o.spin_us = 2_000_000, "--spin-us"),
            (|o| o.max_sessions = 0, "--max-sessions"),
            (|o| o.session_quota = Some(128 << 20), "--session-quota"),
            (|o| o.hello_timeout_s = 0, "--hello-timeout"),
        ];
        for (change, name) in cases {
            let mut o = options();
            change(&mut o);
            let e = error(o);
            assert!(e.contains(name), "{name}: {e}");
        }
    }

    #[test]
    fn reachable_addresses_need_a_secret_or_insecure() {
        let lo: ServerAddr = "127.0.0.1:7070".parse().unwrap();
        let any: ServerAddr = "0.0.0.0:7070".parse().unwrap();
        let unix: ServerAddr = "unix:@x".parse().unwrap();
        assert_eq!(guard(&lo, false, false, "s").unwrap(), None);
        assert_eq!(guard(&unix, false, false, "s").unwrap(), None);
        assert_eq!(guard(&any, true, false, "s").unwrap(), None);
        assert!(guard(&any, false, false, "s")
            .unwrap_err()
            .to_string()
            .contains("farmem secret init"));
        assert!(guard(&any, false, true, "s")
            .unwrap()
            .unwrap()
            .contains("NO authentication"));
        assert!(check_parent(1).is_err());
        // The metrics endpoint: open on loopback; a reachable address needs
        // the token derived from the secret, or --insecure.
        let secret = Secret::from_bytes(vec![7; 32], std::path::Path::new("s")).unwrap();
        let (a, w) = metrics_access(&lo, Some(&secret), false, false).unwrap();
        assert!(a.token.is_none() && w.is_none() && !a.peers);
        assert!(metrics_access(&any, None, false, false)
            .unwrap_err()
            .to_string()
            .contains("refusing to serve metrics"));
        let (a, w) = metrics_access(&any, Some(&secret), false, true).unwrap();
        assert_eq!(a.token.as_deref(), Some(&*crate::metrics_token(&secret)));
        assert!(a.peers && w.is_none());
        let (a, w) = metrics_access(&any, None, true, false).unwrap();
        assert!(a.token.is_none() && w.unwrap().contains("--insecure"));
        // The token: 64 hex digits, the same for the same secret, and
        // another for another secret.
        let t = print_metrics_token(Some(&secret), "d").unwrap();
        assert!(t.len() == 64 && t.bytes().all(|b| b.is_ascii_hexdigit()));
        let other = Secret::from_bytes(vec![8; 32], std::path::Path::new("s")).unwrap();
        assert_ne!(t, crate::metrics_token(&other));
        assert!(print_metrics_token(None, "d")
            .unwrap_err()
            .to_string()
            .contains("farmem secret init"));
        assert!(check_random().is_ok());
        assert_eq!(
            metrics_addr("9464").unwrap(),
            "127.0.0.1:9464".parse().unwrap()
        );
        assert!(metrics_addr("unix:/x").is_err());
        assert!(metrics_addr("nonsense").is_err());
        assert!(check_parent(farmem_sys::process::getppid()).is_ok());
    }
}
