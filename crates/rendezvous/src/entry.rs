//! One server's entry: written under a temporary name and renamed into
//! place, removed when the server stops.

use crate::launch::check_job;
use crate::{Launch, RendezvousError, FORMAT, MAX_SIZE};
use farmem_wire::ServerAddr;
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::{self, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

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

pub(crate) fn now_ms() -> u64 {
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
    pub(crate) fn parse(name: &str, text: &str) -> Result<(Entry, ServerAddr), String> {
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

pub(crate) fn file_name(rank: u32) -> String {
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
