//! The client's wait for every rank of the newest job.

use crate::entry::file_name;
use crate::{Entry, RendezvousError};
use farmem_wire::ServerAddr;
use std::fs;
use std::io::{self};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::time::{Duration, Instant};

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
