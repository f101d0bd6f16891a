//! `farmem serve`.

use anyhow::{bail, Context, Result};
use farmem_runtime::config::format_size;
use farmem_runtime::config::Config;
use farmem_server::{Server, ServerAddr, ServerConfig};
use std::io::Write;
use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

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
    #[arg(long, value_parser = crate::size_arg)]
    capacity: u64,
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
    /// Print a line for every client error.
    #[arg(long)]
    verbose: bool,
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
    /// Serve an address other machines can reach without a shared secret:
    /// anyone who can connect can then read and overwrite every page here.
    #[arg(long)]
    insecure: bool,
}

/// Whether only this machine can reach `addr` (loopback or a Unix socket).
fn is_local(addr: &ServerAddr) -> bool {
    match addr {
        ServerAddr::Tcp { host, port } => (host.as_str(), *port)
            .to_socket_addrs()
            .map(|mut a| a.all(|a| a.ip().is_loopback()))
            .unwrap_or(false),
        ServerAddr::Unix(_) | ServerAddr::UnixAbstract(_) => true,
    }
}

/// This server's rank and job: the command line's, else the launcher's.
fn launch_of(a: &Args) -> Result<farmem_rendezvous::Launch> {
    let detected = farmem_rendezvous::Launch::detect(|k| std::env::var(k).ok())
        .context("reading the launcher's environment")?;
    let launch = match (a.rank, a.size, detected) {
        (Some(rank), Some(size), d) => farmem_rendezvous::Launch {
            launcher: "command line",
            job: d.map(|d| d.job).unwrap_or_default(),
            rank,
            size,
        },
        (None, size, Some(mut d)) => {
            if let Some(s) = size {
                d.size = s;
            }
            d
        }
        (None, _, None) => bail!(
            "--rendezvous: no launcher variables (OMPI_COMM_WORLD_RANK, SLURM_PROCID, PMIX_RANK, PMI_RANK) say this server's rank; \
             start it with mpirun or srun, or pass --rank R --size N"
        ),
        (Some(_), None, _) => unreachable!("clap requires --size with --rank"),
    };
    let launch = farmem_rendezvous::Launch {
        job: a.job.clone().unwrap_or(launch.job),
        ..launch
    };
    Ok(launch.checked()?)
}

/// One status line on stdout. A reader that has gone away (`| head -1`, a
/// test that read the banner) must not stop the server.
fn say(line: std::fmt::Arguments) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Release);
}

pub fn run(a: Args) -> Result<()> {
    if a.capacity < 1 << 20 {
        bail!(
            "--capacity {} is too small; give at least 1M (e.g. --capacity 4G)",
            a.capacity
        );
    }
    let phys = farmem_sys::phys_memory();
    if a.capacity > phys {
        bail!(
            "--capacity {} is more than this machine's memory ({}); the server keeps pages in RAM",
            format_size(a.capacity),
            format_size(phys)
        );
    }
    if a.spin_us > 1_000_000 {
        bail!("--spin-us {} is too long; use at most 1000000", a.spin_us);
    }
    if a.max_connections == 0 {
        bail!("--max-connections must be at least 1");
    }
    if a.max_sessions == 0 {
        bail!("--max-sessions must be at least 1");
    }
    if let Some(q) = a.session_quota {
        if q < 4096 || q > a.capacity {
            bail!(
                "--session-quota {} must be at least one page (4K) and at most --capacity ({})",
                format_size(q),
                format_size(a.capacity)
            );
        }
    }
    for (name, v) in [
        ("--client-timeout", a.client_timeout),
        ("--hello-timeout", a.hello_timeout),
    ] {
        if !(1..=86_400).contains(&v) {
            bail!("{name} {v}: give 1 to 86400 seconds");
        }
    }
    if let Some(p) = a.parent {
        if p <= 1 {
            bail!("--parent {p} is not a parent process id; give the pid of the process this server belongs to");
        }
        if farmem_sys::process::getppid() != p {
            bail!("--parent {p}: this server's parent is not process {p} (it has exited, or the pid is wrong)");
        }
    }
    let explicit = a
        .secret_file
        .clone()
        .or(Config::from_env()?.secret_file().map(PathBuf::from));
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let secret = farmem_wire::auth::find(explicit.as_deref(), home.as_deref())?;
    if secret.is_some() && a.insecure {
        bail!(
            "--insecure and a shared secret ({}) contradict each other; drop --insecure",
            secret
                .as_ref()
                .map(|s| s.path().display().to_string())
                .unwrap_or_default()
        );
    }
    // Where this server stands in its job, checked before anything binds.
    let launch = match &a.rendezvous {
        None => None,
        Some(_) => Some(launch_of(&a)?),
    };
    let listen = match (&a.listen, &a.rendezvous) {
        (Some(l), _) => l.clone(),
        (None, None) => ServerAddr::Tcp {
            host: "127.0.0.1".into(),
            port: 7070,
        },
        (None, Some(_)) => ServerAddr::from(std::net::SocketAddr::new(
            farmem_rendezvous::node_address()?,
            0,
        )),
    };
    let mut cfg = ServerConfig::new(listen, a.capacity);
    cfg.secret = secret.map(std::sync::Arc::new);
    cfg.spin_ns = a.spin_us * 1000;
    cfg.max_connections = a.max_connections;
    cfg.verbose = a.verbose;
    cfg.max_sessions = a.max_sessions;
    cfg.session_quota_pages = a.session_quota.map_or(0, |q| q / 4096);
    cfg.client_timeout_ns = a.client_timeout * 1_000_000_000;
    cfg.hello_timeout_ns = a.hello_timeout * 1_000_000_000;
    let cfg_secret_path = cfg.secret.as_ref().map(|s| s.path().to_path_buf());
    let server = match a.listen_fd {
        Some(fd) => {
            if fd < 0 {
                bail!("--listen-fd {fd} is not a descriptor; give an inherited listening socket's number");
            }
            if let Err(e) = farmem_sys::net::listening_family(fd) {
                bail!(
                    "--listen-fd {fd}: {e}; give an inherited socket that is bound and listening"
                );
            }
            // SAFETY: the descriptor is open (checked just above), inherited
            // for this purpose, and nothing else in this process uses it.
            let owned =
                unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            Server::from_listening_fd(owned, cfg)?
        }
        None => Server::bind(cfg)?,
    };
    // Like Redis's protected mode: an address other machines can reach
    // needs the shared secret, or an explicit --insecure.
    let addr = server.local_addr();
    match (&cfg_secret_path, is_local(&addr), a.insecure) {
        (None, false, false) => bail!(
            "refusing to serve {addr} without a shared secret: anyone who can reach it could read and overwrite the pages stored here. \
             Run `farmem secret init` (it writes {}), give every client the same file (a shared home does), and start again; \
             or pass --insecure on a network only you use",
            home.as_deref()
                .map(|h| farmem_wire::auth::default_path(h).display().to_string())
                .unwrap_or_else(|| "~/.config/farmem/secret".into())
        ),
        (None, false, true) => eprintln!(
            "farmem serve: WARNING: serving {addr} with NO authentication (--insecure): anyone who can reach this port can read and overwrite every page stored here"
        ),
        _ => {}
    }
    farmem_sys::signal::on_signal(libc::SIGINT, on_signal);
    farmem_sys::signal::on_signal(libc::SIGTERM, on_signal);
    let stop = server.shutdown_flag();
    let parent = a.parent;
    std::thread::spawn(move || {
        // Reparenting changes getppid: the parent has exited.
        while !STOP.load(Ordering::Acquire)
            && parent.is_none_or(|p| farmem_sys::process::getppid() == p)
        {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        stop.stop();
    });
    say(format_args!(
        "farmem serve: listening on {addr} (capacity {}, protocol v{}, {})",
        format_size(a.capacity),
        farmem_wire::VERSION,
        match &cfg_secret_path {
            Some(p) => format!("TCP clients authenticated with {}", p.display()),
            None => "no authentication".into(),
        }
    ));
    let _entry = match (&a.rendezvous, &launch) {
        (Some(dir), Some(l)) => {
            let at = farmem_rendezvous::advertised(&addr)?;
            let entry = farmem_rendezvous::Entry::new(l, &at);
            let p = farmem_rendezvous::publish(dir, &entry)?;
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
        _ => None,
    };
    server.run().context("server stopped")?;
    say(format_args!("farmem serve: shut down"));
    Ok(())
}
