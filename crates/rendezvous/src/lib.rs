//! Rendezvous of memory servers through a shared directory.
//!
//! A job launcher (`mpirun`, `srun`, a Slurm heterogeneous job) starts
//! `farmem serve --rendezvous DIR` on N nodes. Each server finds its rank and
//! the job's size in the launcher's environment ([`Launch::detect`]), binds,
//! and publishes one file, `DIR/rank-R.json`, written under a temporary name
//! and renamed into place so that a reader sees all of it or none
//! ([`publish`]). A client given `@DIR` ([`wait`]) waits until every rank of
//! the newest job has published and answers, then stripes over them in rank
//! order. farmem links no MPI: the launcher's environment variables and a
//! shared filesystem are all it needs.
//!
//! Stale entries: a job that ended without removing its files (a killed
//! server never runs its clean-up) leaves them behind. Each entry names its
//! job, so entries of an earlier job are told apart from the current one's;
//! and a complete job whose servers do not accept connections is not used,
//! so the client goes on waiting for the job that is starting.

use farmem_wire::ServerAddr;
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::{self, Write};
use std::net::{IpAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use thiserror::Error;

/// The `format` field of every entry.
pub const FORMAT: &str = "farmem-rendezvous-1";
/// Most ranks in one job.
pub const MAX_SIZE: u32 = 65_536;
/// Longest job identifier.
const MAX_JOB_LEN: usize = 128;

#[derive(Debug, Error)]
pub enum RendezvousError {
    #[error("cannot tell this server's rank: {0}")]
    NoRank(String),
    #[error("{what} {given:?}: {why}")]
    Invalid {
        what: &'static str,
        given: String,
        why: String,
    },
    #[error("cannot write the rendezvous directory {dir}: {source}; give a directory that every server rank can write, on a filesystem the client can read (a shared home or scratch directory)")]
    Publish { dir: PathBuf, source: io::Error },
    #[error("cannot read the rendezvous directory {dir}: {source}")]
    Read { dir: PathBuf, source: io::Error },
    #[error("no address of this node to publish: {0}; name one with --listen ADDR:0")]
    NoAddress(String),
    #[error("{0}")]
    Timeout(String),
}

/// A server's place in its job, from the launcher or the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// The launcher that set the variables ("Open MPI", "Slurm", ...), or
    /// "command line".
    pub launcher: &'static str,
    /// Identifies this job: entries of another job are stale. Empty when
    /// the launcher gives none (MPICH's Hydra); staleness is then told by
    /// whether the servers answer.
    pub job: String,
    pub rank: u32,
    pub size: u32,
}

fn number(var: &str, v: &str) -> Result<u32, RendezvousError> {
    v.trim().parse().map_err(|_| RendezvousError::Invalid {
        what: "environment variable",
        given: format!("{var}={v}"),
        why: "not a whole number".into(),
    })
}

impl Launch {
    /// Find rank, size and job in the variables a launcher sets, the first
    /// of these that is present: Open MPI (`OMPI_COMM_WORLD_RANK`/`SIZE`,
    /// job `PMIX_NAMESPACE` or `OMPI_MCA_ess_base_jobid`), Slurm
    /// (`SLURM_PROCID`/`SLURM_NTASKS`, job `SLURM_JOB_ID.SLURM_STEP_ID`),
    /// PMIx (`PMIX_RANK`, job `PMIX_NAMESPACE`; the size must come from
    /// elsewhere), MPICH/Hydra (`PMI_RANK`/`PMI_SIZE`). `None` when none is.
    /// `var` reads one variable (the environment, or a test's table).
    pub fn detect(var: impl Fn(&str) -> Option<String>) -> Result<Option<Launch>, RendezvousError> {
        let both = |r: &str, s: &str| -> Result<Option<(u32, Option<u32>)>, RendezvousError> {
            let Some(rank) = var(r) else { return Ok(None) };
            let size = var(s).map(|v| number(s, &v)).transpose()?;
            Ok(Some((number(r, &rank)?, size)))
        };
        let found = if let Some(rs) = both("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")? {
            let job = var("PMIX_NAMESPACE")
                .or_else(|| var("OMPI_MCA_ess_base_jobid"))
                .unwrap_or_default();
            Some(("Open MPI", job, rs))
        } else if let Some(rs) = both("SLURM_PROCID", "SLURM_NTASKS")? {
            let job = match (var("SLURM_JOB_ID"), var("SLURM_STEP_ID")) {
                (Some(j), Some(s)) => format!("{j}.{s}"),
                (Some(j), None) => j,
                _ => String::new(),
            };
            Some(("Slurm", job, rs))
        } else if let Some(rs) = both("PMIX_RANK", "PMIX_SIZE")? {
            Some(("PMIx", var("PMIX_NAMESPACE").unwrap_or_default(), rs))
        } else {
            both("PMI_RANK", "PMI_SIZE")?.map(|rs| ("MPICH (PMI)", String::new(), rs))
        };
        let Some((launcher, job, (rank, size))) = found else {
            return Ok(None);
        };
        let size = size.ok_or_else(|| {
            RendezvousError::NoRank(format!(
                "{launcher} gives this server rank {rank} but not the job's size; pass --size N"
            ))
        })?;
        Launch {
            launcher,
            job,
            rank,
            size,
        }
        .checked()
        .map(Some)
    }

    /// This server's place: `rank` and `size` from the command line when
    /// given (then `size` alone overrides the launcher's), else the
    /// launcher's variables, read by `var`; `job` overrides the launcher's.
    pub fn resolve(
        rank: Option<u32>,
        size: Option<u32>,
        job: Option<String>,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Launch, RendezvousError> {
        let detected = Launch::detect(var)?;
        let launch = match (rank, size, detected) {
            (Some(rank), Some(size), d) => Launch {
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
            (None, _, None) => {
                return Err(RendezvousError::NoRank(
                    "no launcher variables (OMPI_COMM_WORLD_RANK, SLURM_PROCID, PMIX_RANK, PMI_RANK) say it; \
                     start it with mpirun or srun, or pass --rank R --size N"
                        .into(),
                ))
            }
            (Some(_), None, _) => {
                return Err(RendezvousError::NoRank(
                    "--rank needs --size, the number of servers in the job".into(),
                ))
            }
        };
        Launch {
            job: job.unwrap_or(launch.job),
            ..launch
        }
        .checked()
    }

    /// Validate rank, size and job.
    pub fn checked(self) -> Result<Launch, RendezvousError> {
        let bad = |what, given: String, why: String| RendezvousError::Invalid { what, given, why };
        if self.size == 0 || self.size > MAX_SIZE {
            return Err(bad(
                "job size",
                self.size.to_string(),
                format!("give 1 to {MAX_SIZE} ranks"),
            ));
        }
        if self.rank >= self.size {
            return Err(bad(
                "rank",
                self.rank.to_string(),
                format!(
                    "ranks of a job of {} run from 0 to {}",
                    self.size,
                    self.size - 1
                ),
            ));
        }
        check_job(&self.job)?;
        Ok(self)
    }
}

fn check_job(job: &str) -> Result<(), RendezvousError> {
    if job.len() > MAX_JOB_LEN
        || !job
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._:@+-".contains(c))
    {
        return Err(RendezvousError::Invalid {
            what: "job identifier",
            given: job.into(),
            why: format!("use at most {MAX_JOB_LEN} letters, digits and ._:@+-"),
        });
    }
    Ok(())
}

/// One server's entry in the rendezvous directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub format: String,
    pub job: String,
    pub rank: u32,
    pub size: u32,
    /// Where clients connect (never port 0, never an unspecified address).
    pub addr: String,
    pub host: String,
    pub pid: u32,
    /// When the server published, milliseconds since the Unix epoch (on its
    /// own clock).
    pub published_ms: u64,
    pub launcher: String,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Entry {
    /// The entry this process publishes for `launch` at `addr`.
    pub fn new(launch: &Launch, addr: &ServerAddr) -> Entry {
        Entry {
            format: FORMAT.into(),
            job: launch.job.clone(),
            rank: launch.rank,
            size: launch.size,
            addr: addr.to_string(),
            host: farmem_sys::process::hostname(),
            pid: std::process::id(),
            published_ms: now_ms(),
            launcher: launch.launcher.into(),
        }
    }

    /// Parse and validate an entry read from file `name`.
    fn parse(name: &str, text: &str) -> Result<(Entry, ServerAddr), String> {
        let e: Entry = serde_json::from_str(text).map_err(|e| format!("not an entry ({e})"))?;
        if e.format != FORMAT {
            return Err(format!("format {:?}, expected {FORMAT:?}", e.format));
        }
        if name != file_name(e.rank) {
            return Err(format!("it holds rank {}", e.rank));
        }
        if e.size == 0 || e.size > MAX_SIZE || e.rank >= e.size {
            return Err(format!("rank {} of a job of {}", e.rank, e.size));
        }
        check_job(&e.job).map_err(|e| e.to_string())?;
        let addr: ServerAddr = e
            .addr
            .parse()
            .map_err(|e: farmem_wire::AddrError| e.to_string())?;
        if !addr.is_connectable() {
            return Err(format!("address {} has port 0", e.addr));
        }
        Ok((e, addr))
    }
}

fn file_name(rank: u32) -> String {
    format!("rank-{rank}.json")
}

/// This node's address for other nodes to reach: the first non-loopback
/// IPv4 address of an interface that is up, else the first IPv6 one.
pub fn node_address() -> Result<IpAddr, RendezvousError> {
    let all = farmem_sys::net::interface_addrs()
        .map_err(|e| RendezvousError::NoAddress(format!("getifaddrs failed: {e}")))?;
    let usable = |v4: bool| {
        all.iter().find(|a| {
            a.up && !a.loopback
                && !a.addr.is_loopback()
                && a.addr.is_ipv4() == v4
                && !matches!(a.addr, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80)
        })
    };
    usable(true)
        .or_else(|| usable(false))
        .map(|a| a.addr)
        .ok_or_else(|| {
            RendezvousError::NoAddress(
                "no interface other than loopback is up (a client elsewhere could not reach this server)".into(),
            )
        })
}

/// The address to publish for a server bound at `bound`: an unspecified
/// host (0.0.0.0, ::) becomes this node's address.
pub fn advertised(bound: &ServerAddr) -> Result<ServerAddr, RendezvousError> {
    match bound {
        ServerAddr::Tcp { host, port } => {
            let unspecified = host.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified());
            if !unspecified {
                return Ok(bound.clone());
            }
            let ip = node_address()?;
            Ok(ServerAddr::from(std::net::SocketAddr::new(ip, *port)))
        }
        other => Ok(other.clone()),
    }
}

/// A published entry. Dropping it removes the file, unless another server
/// has replaced it since (a later job's rank).
#[derive(Debug)]
pub struct Published {
    path: PathBuf,
    entry: Entry,
}

impl Published {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        // Read, compare, remove: a later job's rank renaming its file in
        // between loses it, and its client then times out naming the rank.
        // Servers of two jobs starting in one directory at the same moment
        // is outside what a rendezvous directory is for.
        let ours = fs::read_to_string(&self.path)
            .ok()
            .and_then(|t| serde_json::from_str::<Entry>(&t).ok())
            .is_some_and(|e| e == self.entry);
        if ours {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Write `entry` to `dir` (created if missing) atomically: to a temporary
/// file in the same directory, flushed, then renamed to `rank-R.json`.
pub fn publish(dir: &Path, entry: &Entry) -> Result<Published, RendezvousError> {
    let err = |source| RendezvousError::Publish {
        dir: dir.to_path_buf(),
        source,
    };
    fs::create_dir_all(dir).map_err(err)?;
    let path = dir.join(file_name(entry.rank));
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        file_name(entry.rank),
        entry.host,
        entry.pid
    ));
    let text = serde_json::to_string_pretty(entry).map_err(|e| err(io::Error::other(e)))?;
    let write = || -> io::Result<()> {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.write_all(b"\n")?;
        f.sync_all()?;
        fs::rename(&tmp, &path)
    };
    if let Err(e) = write() {
        let _ = fs::remove_file(&tmp);
        return Err(err(e));
    }
    Ok(Published {
        path,
        entry: entry.clone(),
    })
}

/// The servers of one job, in rank order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub job: String,
    pub servers: Vec<ServerAddr>,
    /// Files passed over, one line each (stale or not entries).
    pub ignored: Vec<String>,
}

/// What one look at the directory saw.
#[derive(Debug, Default)]
struct Scan {
    /// The newest job's entries, by rank.
    current: Vec<(Entry, ServerAddr)>,
    ignored: Vec<String>,
    /// How many entries of any job were read.
    entries: usize,
}

fn scan(dir: &Path) -> Result<Scan, RendezvousError> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        // The servers create it; they may not have started yet.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Scan::default()),
        Err(source) => {
            return Err(RendezvousError::Read {
                dir: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut all = Vec::new();
    let mut ignored = Vec::new();
    for de in rd {
        let de = de.map_err(|source| RendezvousError::Read {
            dir: dir.to_path_buf(),
            source,
        })?;
        let name = de.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("rank-") && name.ends_with(".json")) {
            continue;
        }
        // A file can vanish between listing and reading (its server exited).
        let Ok(text) = fs::read_to_string(de.path()) else {
            continue;
        };
        match Entry::parse(&name, &text) {
            Ok(e) => all.push(e),
            Err(why) => ignored.push(format!("{name}: {why}")),
        }
    }
    let entries = all.len();
    let Some(newest) = all.iter().max_by_key(|(e, _)| e.published_ms) else {
        return Ok(Scan {
            ignored,
            ..Scan::default()
        });
    };
    let (job, size) = (newest.0.job.clone(), newest.0.size);
    let mut current = Vec::new();
    for (e, a) in all {
        if e.job != job {
            ignored.push(format!(
                "{}: job {:?}, not the newest job {job:?} (stale, from an earlier job)",
                file_name(e.rank),
                e.job
            ));
        } else if e.size != size {
            ignored.push(format!(
                "{}: job {job:?} of {} ranks, but its newest entry says {size}",
                file_name(e.rank),
                e.size
            ));
        } else {
            current.push((e, a));
        }
    }
    current.sort_by_key(|(e, _)| e.rank);
    ignored.sort();
    Ok(Scan {
        current,
        ignored,
        entries,
    })
}

/// Whether a server accepts connections at `addr` (within `timeout`).
fn answers(addr: &ServerAddr, timeout: Duration) -> Result<(), io::Error> {
    match addr {
        ServerAddr::Tcp { host, port } => {
            let mut last = io::Error::other("the name resolves to no address");
            for a in (host.as_str(), *port).to_socket_addrs()? {
                match TcpStream::connect_timeout(&a, timeout) {
                    Ok(_) => return Ok(()),
                    Err(e) => last = e,
                }
            }
            Err(last)
        }
        ServerAddr::Unix(path) => std::os::unix::net::UnixStream::connect(path).map(drop),
        ServerAddr::UnixAbstract(name) => {
            use std::os::linux::net::SocketAddrExt;
            let sa = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            std::os::unix::net::UnixStream::connect_addr(&sa).map(drop)
        }
    }
}

/// Wait up to `timeout` for every rank of the newest job in `dir` to publish
/// and accept connections; its servers in rank order.
pub fn wait(dir: &Path, timeout: Duration) -> Result<Found, RendezvousError> {
    let start = Instant::now();
    let mut dead: Option<String> = None;
    loop {
        let s = scan(dir)?;
        let size = s.current.first().map_or(0, |(e, _)| e.size);
        let complete = size > 0 && s.current.len() == size as usize;
        if complete {
            // Ranks are distinct (one file per rank), so `size` entries of
            // ranks below `size` are ranks 0..size in order.
            let silent = s.current.iter().find_map(|(e, a)| {
                answers(a, Duration::from_secs(1)).err().map(|err| {
                    format!(
                        "rank {} at {} ({}, pid {}): {err}",
                        e.rank, a, e.host, e.pid
                    )
                })
            });
            match silent {
                None => {
                    return Ok(Found {
                        job: s.current[0].0.job.clone(),
                        servers: s.current.into_iter().map(|(_, a)| a).collect(),
                        ignored: s.ignored,
                    })
                }
                Some(why) => dead = Some(why),
            }
        }
        if start.elapsed() >= timeout {
            return Err(RendezvousError::Timeout(timeout_message(
                dir,
                timeout,
                &s,
                complete.then_some(()).and(dead.as_deref()),
            )));
        }
        std::thread::sleep(Duration::from_millis(if complete { 500 } else { 100 }));
    }
}

fn timeout_message(dir: &Path, timeout: Duration, s: &Scan, dead: Option<&str>) -> String {
    let d = dir.display();
    let secs = match timeout.as_secs_f64() {
        t if t < 10.0 => format!("{t:.1}"),
        t => format!("{t:.0}"),
    };
    let mut m = match s.current.first() {
        None if s.entries == 0 && s.ignored.is_empty() => {
            format!("no memory server published in {d} within {secs} s")
        }
        None => format!("no usable entry in {d} within {secs} s"),
        Some((e, _)) => {
            let have: Vec<u32> = s.current.iter().map(|(e, _)| e.rank).collect();
            let missing: Vec<String> = (0..e.size)
                .filter(|r| !have.contains(r))
                .take(16)
                .map(|r| r.to_string())
                .collect();
            match dead {
                Some(why) => format!(
                    "job {:?} in {d} has all {} ranks, but a server does not answer: {why}; its entries are stale (the job has ended) — waited {secs} s for a new job",
                    e.job, e.size
                ),
                None => format!(
                    "job {:?} in {d} has {} of {} ranks after {secs} s; missing rank{} {}",
                    e.job,
                    s.current.len(),
                    e.size,
                    if missing.len() == 1 { "" } else { "s" },
                    missing.join(", ")
                ),
            }
        }
    };
    m.push_str(&format!(
        ". Start `farmem serve --rendezvous {d}` on every rank (mpirun or srun), check that {d} is the same shared directory on every node, or wait longer with FARMEM_RENDEZVOUS_TIMEOUT"
    ));
    if !s.ignored.is_empty() {
        m.push_str(&format!(". Ignored: {}", s.ignored.join("; ")));
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn launchers_are_detected_in_order() {
        let l = Launch::detect(env(&[
            ("OMPI_COMM_WORLD_RANK", "2"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("PMIX_NAMESPACE", "1873477633"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "9"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!((l.launcher, l.rank, l.size), ("Open MPI", 2, 4));
        assert_eq!(l.job, "1873477633");
        let l = Launch::detect(env(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "3"),
            ("SLURM_JOB_ID", "77"),
            ("SLURM_STEP_ID", "0"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            (l.launcher, l.rank, l.size, l.job.as_str()),
            ("Slurm", 1, 3, "77.0")
        );
        let l = Launch::detect(env(&[("PMI_RANK", "0"), ("PMI_SIZE", "2")]))
            .unwrap()
            .unwrap();
        assert_eq!((l.launcher, l.job.as_str()), ("MPICH (PMI)", ""));
        assert_eq!(Launch::detect(env(&[])).unwrap(), None);
    }

    #[test]
    fn the_command_line_overrides_the_launcher() {
        let slurm = [("SLURM_PROCID", "1"), ("SLURM_NTASKS", "3")];
        let l = Launch::resolve(None, None, None, env(&slurm)).unwrap();
        assert_eq!((l.launcher, l.rank, l.size), ("Slurm", 1, 3));
        let l = Launch::resolve(None, Some(5), Some("j1".into()), env(&slurm)).unwrap();
        assert_eq!((l.rank, l.size, l.job.as_str()), (1, 5, "j1"));
        let l = Launch::resolve(Some(0), Some(2), None, env(&[])).unwrap();
        assert_eq!((l.launcher, l.rank, l.size), ("command line", 0, 2));
        assert!(Launch::resolve(None, None, None, env(&[]))
            .unwrap_err()
            .to_string()
            .contains("mpirun"));
        assert!(Launch::resolve(Some(3), Some(2), None, env(&[])).is_err());
    }

    #[test]
    fn bad_launcher_values_are_refused() {
        let e = Launch::detect(env(&[("PMIX_RANK", "0"), ("PMIX_NAMESPACE", "x")])).unwrap_err();
        assert!(e.to_string().contains("--size"), "{e}");
        let e = Launch::detect(env(&[("PMI_RANK", "x"), ("PMI_SIZE", "2")])).unwrap_err();
        assert!(e.to_string().contains("PMI_RANK=x"), "{e}");
        let e = Launch::detect(env(&[("PMI_RANK", "2"), ("PMI_SIZE", "2")])).unwrap_err();
        assert!(e.to_string().contains("from 0 to 1"), "{e}");
        let e = Launch::detect(env(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            ("SLURM_JOB_ID", "a/b"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("job identifier"), "{e}");
    }

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("fm-rdv-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    fn launch(job: &str, rank: u32, size: u32) -> Launch {
        Launch {
            launcher: "test",
            job: job.into(),
            rank,
            size,
        }
    }

    #[test]
    fn a_complete_live_job_is_found_in_rank_order() {
        let dir = tmpdir("live");
        let l0 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let l1 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a0 = ServerAddr::from(l0.local_addr().unwrap());
        let a1 = ServerAddr::from(l1.local_addr().unwrap());
        let _p1 = publish(&dir, &Entry::new(&launch("j", 1, 2), &a1)).unwrap();
        let p0 = publish(&dir, &Entry::new(&launch("j", 0, 2), &a0)).unwrap();
        let f = wait(&dir, Duration::from_secs(5)).unwrap();
        assert_eq!(f.servers, vec![a0, a1]);
        assert_eq!(f.job, "j");
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|d| d.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        let path = p0.path().to_path_buf();
        drop(p0);
        assert!(!path.exists(), "the entry is removed when its server stops");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_rank_times_out_naming_it() {
        let dir = tmpdir("missing");
        let l0 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a0 = ServerAddr::from(l0.local_addr().unwrap());
        let _p = publish(&dir, &Entry::new(&launch("j", 0, 3), &a0)).unwrap();
        let e = wait(&dir, Duration::from_millis(300))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("1 of 3 ranks") && e.contains("missing ranks 1, 2"),
            "{e}"
        );
        assert!(e.contains("FARMEM_RENDEZVOUS_TIMEOUT"), "{e}");
        let empty = tmpdir("empty");
        let e = wait(&empty, Duration::from_millis(100))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no memory server published"), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_stale_earlier_job_is_not_used() {
        let dir = tmpdir("stale");
        // An earlier job, complete, whose servers are gone.
        let gone = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            ServerAddr::from(l.local_addr().unwrap())
        };
        let mut old0 = Entry::new(&launch("old", 0, 2), &gone);
        old0.published_ms -= 60_000;
        let mut old1 = Entry::new(&launch("old", 1, 2), &gone);
        old1.published_ms -= 60_000;
        std::mem::forget(publish(&dir, &old0).unwrap());
        std::mem::forget(publish(&dir, &old1).unwrap());
        let e = wait(&dir, Duration::from_millis(300))
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not answer") && e.contains("stale"), "{e}");
        // The new job's rank 0 replaces the old rank 0; rank 1 is still the
        // old job's, so the client waits, naming it.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = ServerAddr::from(l.local_addr().unwrap());
        let _p0 = publish(&dir, &Entry::new(&launch("new", 0, 2), &a)).unwrap();
        let e = wait(&dir, Duration::from_millis(300))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("job \"new\"") && e.contains("missing rank 1"),
            "{e}"
        );
        assert!(
            e.contains("rank-1.json: job \"old\"") && e.contains("stale"),
            "{e}"
        );
        let l1 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a1 = ServerAddr::from(l1.local_addr().unwrap());
        let _p1 = publish(&dir, &Entry::new(&launch("new", 1, 2), &a1)).unwrap();
        let f = wait(&dir, Duration::from_secs(5)).unwrap();
        assert_eq!(f.servers, vec![a, a1]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn junk_files_are_named_and_skipped() {
        let dir = tmpdir("junk");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("rank-0.json"), "{not json").unwrap();
        fs::write(dir.join("notes.txt"), "hello").unwrap();
        let e = wait(&dir, Duration::from_millis(100))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no usable entry") && e.contains("rank-0.json: not an entry"),
            "{e}"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unwritable_directory_is_a_clear_error() {
        let dir = tmpdir("file");
        fs::write(&dir, "a file, not a directory").unwrap();
        let a: ServerAddr = "127.0.0.1:1".parse().unwrap();
        let e = publish(&dir, &Entry::new(&launch("j", 0, 1), &a))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot write the rendezvous directory"), "{e}");
        let e = wait(&dir, Duration::from_millis(100))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot read the rendezvous directory"), "{e}");
        fs::remove_file(&dir).unwrap();
    }

    #[test]
    fn unspecified_hosts_are_advertised_as_this_node() {
        let a: ServerAddr = "127.0.0.1:5".parse().unwrap();
        assert_eq!(advertised(&a).unwrap(), a);
        let any: ServerAddr = "0.0.0.0:5".parse().unwrap();
        match advertised(&any) {
            Ok(ServerAddr::Tcp { host, port }) => {
                assert_eq!(port, 5);
                assert!(!host.parse::<IpAddr>().unwrap().is_unspecified());
            }
            Ok(other) => panic!("{other}"),
            // A machine with loopback only says so.
            Err(e) => assert!(e.to_string().contains("--listen"), "{e}"),
        }
    }

    proptest::proptest! {
        /// Whatever bytes a file holds, reading it never panics, and a
        /// valid entry round-trips.
        #[test]
        fn parse_never_panics(s in ".{0,300}", rank in 0u32..8, size in 1u32..8) {
            let _ = Entry::parse("rank-0.json", &s);
            let l = Launch { launcher: "t", job: "j".into(), rank: rank % size, size };
            let e = Entry::new(&l, &"10.0.0.1:7".parse().unwrap());
            let text = serde_json::to_string(&e).unwrap();
            let (back, _) = Entry::parse(&file_name(e.rank), &text).unwrap();
            proptest::prop_assert_eq!(back, e);
        }
    }
}
