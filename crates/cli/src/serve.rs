//! `farmem serve`.

use anyhow::{Context, Result};
use farmem_rendezvous::Launch;
use farmem_runtime::config::Config;
use farmem_server::options::{self, Serve, ServeOptions};
use farmem_server::ServerAddr;
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Address to listen on: IP:PORT (0.0.0.0:PORT serves other machines),
    /// or unix:/PATH or unix:@NAME for clients on this machine (faster).
    /// Default 127.0.0.1:7070; with --rendezvous, this node's address and
    /// any free port.
    #[arg(long)]
    listen: Option<ServerAddr>,
    /// Publish this server's rank and address to DIR, a directory on a
    /// filesystem every node shares, for clients given `--servers @DIR`.
    /// The rank and the job's size come from the launcher (mpirun, srun);
    /// the entry is removed when the server stops.
    #[arg(long, value_name = "DIR", conflicts_with = "listen_fd")]
    rendezvous: Option<PathBuf>,
    /// This server's rank, when no launcher sets one (with --rendezvous).
    #[arg(long, requires_all = ["rendezvous", "size"])]
    rank: Option<u32>,
    /// The number of servers in the job (with --rendezvous).
    #[arg(long, requires = "rendezvous")]
    size: Option<u32>,
    /// The job's identifier, to tell its entries from an earlier job's
    /// (with --rendezvous; default: the launcher's job id).
    #[arg(long, requires = "rendezvous")]
    job: Option<String>,
    /// Most memory all clients together may store here, e.g. 16G.
    #[arg(long, value_parser = crate::size_arg, required_unless_present = "print_metrics_token")]
    capacity: Option<u64>,
    /// Microseconds a connection thread spins for the next request before it
    /// blocks (spinning avoids ~100 us wake-ups on idle CPUs).
    #[arg(long, default_value_t = 1000)]
    spin_us: u64,
    /// Most simultaneous connections.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Most sessions (client processes) at once.
    #[arg(long, default_value_t = 1024)]
    max_sessions: usize,
    /// Most memory one session (one client process) may store here, e.g.
    /// 8G (default: the whole capacity).
    #[arg(long, value_parser = crate::size_arg)]
    session_quota: Option<u64>,
    /// Seconds a client may take to finish sending a frame it has begun, or
    /// to take a reply, before it is disconnected.
    #[arg(long, default_value_t = 30)]
    client_timeout: u64,
    /// Seconds a new connection may stay silent before it says Hello.
    #[arg(long, default_value_t = 10)]
    hello_timeout: u64,
    /// A user (uid) besides this server's own whose processes may hold its
    /// memory files, the one-host page path over a Unix socket (repeat for
    /// several). Any process of that user can then read and write the
    /// pages of its own sessions, never another user's.
    #[arg(long = "memfd-uid", value_name = "UID")]
    memfd_uid: Vec<u32>,
    /// Log every client error (at info; they are debug lines otherwise).
    #[arg(long)]
    verbose: bool,
    /// How much to log on stderr: off, error, warn, info (sessions,
    /// refusals), debug (every connection), trace. Default: FARMEM_LOG,
    /// else info.
    #[arg(long, value_name = "LEVEL", value_parser = log_level)]
    log_level: Option<&'static str>,
    /// Log lines as text, or as one JSON object a line for collectors.
    #[arg(long, value_enum, default_value = "text")]
    log_format: crate::logging::LogFormat,
    /// Serve on this inherited descriptor, a socket already bound and
    /// listening, instead of --listen (how farmem starts its embedded server:
    /// the parent binds, so the address is known before this process runs).
    #[arg(long, value_name = "FD", conflicts_with = "listen")]
    listen_fd: Option<i32>,
    /// Shut down when process PID, this server's parent, is gone.
    #[arg(long, value_name = "PID")]
    parent: Option<i32>,
    /// The shared secret TCP clients must prove they hold (default:
    /// FARMEM_SECRET_FILE, else ~/.config/farmem/secret if it exists; make
    /// one with `farmem secret init`).
    #[arg(long, value_name = "FILE")]
    secret_file: Option<PathBuf>,
    /// Serve Prometheus metrics (text format) at http://ADDR/metrics: PORT
    /// (on 127.0.0.1) or IP:PORT. On an address other machines can reach,
    /// every scrape must carry a bearer token derived from the shared
    /// secret (see --print-metrics-token), or --insecure serves it open.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// Label the per-session metrics with the client's IP and port (off:
    /// they tell whoever scrapes who uses this server).
    #[arg(long, requires = "metrics")]
    metrics_peers: bool,
    /// Print the bearer token that scrapes of a reachable --metrics address
    /// must send (derived from the shared secret), and exit.
    #[arg(long)]
    print_metrics_token: bool,
    /// On SIGTERM or SIGINT, leave rather than stop: take no new session,
    /// tell the clients (in their Stats polls, every 250 ms), and exit once
    /// they have moved their pages to their other servers and closed their
    /// sessions, or after --drain-timeout. Clients with one copy of their
    /// pages cannot move them, and see a lost server at the timeout.
    #[arg(long)]
    drain: bool,
    /// With --drain: the longest wait for clients to move their pages off,
    /// in seconds, before the server stops anyway.
    #[arg(long, value_name = "SECS", default_value_t = 120, requires = "drain",
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    drain_timeout: u64,
    /// Serve an address other machines can reach without a shared secret:
    /// anyone who can connect can then read and overwrite every page here.
    #[arg(long)]
    insecure: bool,
}

/// One status line on stdout. A reader that has gone away (`| head -1`, a
/// test that read the banner) must not stop the server.
fn say(line: std::fmt::Arguments) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

fn log_level(v: &str) -> Result<&'static str, String> {
    farmem_runtime::config::parse_log_level(v)
}

pub fn run(a: Args) -> Result<()> {
    let env = Config::from_env()?;
    crate::logging::init(
        "farmem serve",
        a.log_level.unwrap_or(env.log()),
        a.log_format,
    )?;
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let default_secret = home.as_deref().map_or_else(
        || "~/.config/farmem/secret".into(),
        |h| farmem_wire::auth::default_path(h).display().to_string(),
    );
    let explicit = a
        .secret_file
        .clone()
        .or(env.secret_file().map(PathBuf::from));
    if a.print_metrics_token {
        let secret = farmem_wire::auth::find(explicit.as_deref(), home.as_deref())?;
        say(format_args!(
            "{}",
            options::print_metrics_token(secret.as_ref(), &default_secret)?
        ));
        return Ok(());
    }
    let mut options = ServeOptions {
        capacity: a.capacity.unwrap_or_default(),
        spin_us: a.spin_us,
        max_connections: a.max_connections,
        max_sessions: a.max_sessions,
        session_quota: a.session_quota,
        client_timeout_s: a.client_timeout,
        hello_timeout_s: a.hello_timeout,
        verbose: a.verbose,
        secret: None,
        memfd_uids: a.memfd_uid,
    };
    // The options first, then the parent, the secret and the rank: all
    // before anything binds.
    options.check(farmem_sys::phys_memory())?;
    if let Some(p) = a.parent {
        options::check_parent(p)?;
    }
    options.secret = farmem_wire::auth::find(explicit.as_deref(), home.as_deref())?;
    let rendezvous = match a.rendezvous {
        None => None,
        Some(dir) => {
            let l = Launch::resolve(a.rank, a.size, a.job.clone(), |k| std::env::var(k).ok())
                .context("--rendezvous: this server's rank")?;
            Some((dir, l))
        }
    };
    let s = Serve {
        options,
        listen: a.listen,
        listen_fd: a.listen_fd,
        parent: a.parent,
        insecure: a.insecure,
        rendezvous,
        metrics: a.metrics,
        metrics_peers: a.metrics_peers,
        drain: a
            .drain
            .then(|| std::time::Duration::from_secs(a.drain_timeout)),
        default_secret,
    };
    Ok(options::serve(s, &say)?)
}
