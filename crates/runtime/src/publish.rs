//! The counters a running program publishes for `farmem stat`.
//!
//! The runtime's counters ([`Stats`]), its resident page count and the
//! servers' health live in one small file mapped shared,
//! `<dir>/<pid>.stats` (see [`dir`]). The fault path updates them exactly as
//! it updated private memory before: the same relaxed atomics, no thread
//! woken, no system call. `farmem stat` maps the file read-only and reads
//! them at its own pace; every rate and every interval quantile is its
//! difference of two readings.
//!
//! The file is per user: the directory is the user's own (mode 0700, owner
//! checked), and the reader checks each file's owner too. A file outlives a
//! program killed outright; the reader tells that by the process's start
//! time and removes the file.

use crate::stats::{Snapshot, Stats, BUCKETS};
use farmem_sys::mem::Mapping;
use std::fs::File;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};
use thiserror::Error;

const MAGIC: [u8; 8] = *b"FARMSTAT";
/// Bumped whenever [`Published`] or [`Stats`] change shape: a reader of
/// another build refuses a file it cannot read rather than misread it.
const LAYOUT: u32 = 11;
/// Servers whose health is published (more are counted, not named).
pub const MAX_SERVERS: usize = 64;
const NAME: usize = 64;
const OTHER_USER: &str = "another user's";

#[derive(Debug, Error)]
pub enum PublishError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{0} is not this user's own private directory (owner or mode); remove it, or set XDG_RUNTIME_DIR to one")]
    NotPrivate(PathBuf),
    #[error("{path} is not a farmem statistics file of this build ({why})")]
    Foreign { path: PathBuf, why: &'static str },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> PublishError + '_ {
    move |source| PublishError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The servers' health, written by the remote backend when it changes.
#[repr(C)]
pub struct Health {
    replicas: AtomicU32,
    servers: AtomicU32,
    /// NUL-padded; atomics, since a server that joins is named while
    /// `farmem stat` may read.
    names: [[AtomicU8; NAME]; MAX_SERVERS],
    down: [AtomicU32; MAX_SERVERS],
    /// Page writes that reached fewer than `replicas` servers.
    short: AtomicU64,
    /// Repair (see `backend/remote/repair.rs`): stored pages with fewer
    /// live copies than asked for, 1 while a pass runs, pages copied and
    /// passes done so far, and the last pass's length.
    pages_short: AtomicU64,
    repairing: AtomicU32,
    repair_passes: AtomicU32,
    pages_repaired: AtomicU64,
    last_repair_ms: AtomicU64,
}

impl Health {
    /// Name the servers, before the file is published.
    fn describe(&mut self, replicas: usize, names: &[String]) {
        *self.replicas.get_mut() = u32::try_from(replicas).unwrap_or(u32::MAX);
        *self.servers.get_mut() = u32::try_from(names.len()).unwrap_or(u32::MAX);
        for (s, name) in names.iter().enumerate() {
            self.name(s, name);
        }
    }

    /// Name server `s` (cut at a character boundary; NUL-padded).
    fn name(&self, s: usize, name: &str) {
        let Some(slot) = self.names.get(s) else {
            return;
        };
        let mut n = name.len().min(NAME - 1);
        while !name.is_char_boundary(n) {
            n -= 1;
        }
        for (i, b) in slot.iter().enumerate() {
            b.store(
                name.as_bytes()
                    .get(i)
                    .copied()
                    .filter(|_| i < n)
                    .unwrap_or(0),
                Relaxed,
            );
        }
    }

    /// Server `s` joined the session: name it, then count it.
    pub(crate) fn add_server(&self, s: usize, name: &str) {
        self.name(s, name);
        let n = u32::try_from(s + 1).unwrap_or(u32::MAX);
        self.servers
            .fetch_max(n, std::sync::atomic::Ordering::Release);
    }

    pub(crate) fn set_down(&self, server: usize) {
        if let Some(d) = self.down.get(server) {
            d.store(1, Relaxed);
        }
    }

    pub(crate) fn add_short(&self, n: u64) {
        self.short.fetch_add(n, Relaxed);
    }

    pub(crate) fn repair_begins(&self, pages_short: u64) {
        self.pages_short.store(pages_short, Relaxed);
        self.repairing.store(1, Relaxed);
    }

    /// A unit holding `held` pages has every copy again, `copied` of them
    /// copied now.
    pub(crate) fn unit_repaired(&self, copied: u64, held: u64) {
        self.pages_repaired.fetch_add(copied, Relaxed);
        let _ = self
            .pages_short
            .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(held)));
    }

    pub(crate) fn repair_ends(&self, pages_short: u64, millis: u64) {
        self.pages_short.store(pages_short, Relaxed);
        self.last_repair_ms.store(millis, Relaxed);
        self.repair_passes.fetch_add(1, Relaxed);
        self.repairing.store(0, Relaxed);
    }
}

/// The whole published file.
#[repr(C)]
pub struct Published {
    magic: [u8; 8],
    layout: u32,
    size: u32,
    pid: u32,
    _pad: u32,
    /// `/proc/PID/stat`'s start time (clock ticks since boot): tells this
    /// process from a later one given the same pid.
    start_ticks: u64,
    started_unix_ms: u64,
    budget_bytes: u64,
    /// 0 while running; the Unix time in ms at which it exited.
    ended_unix_ms: AtomicU64,
    /// The runtime's resident page count (the runtime's own counter lives here).
    pub(crate) resident: AtomicUsize,
    command: [u8; 256],
    transport: [u8; 32],
    backend: [u8; 192],
    pub(crate) health: Health,
    pub(crate) stats: Stats,
}

/// Copy `s` into `dst`, cut at a character boundary, NUL-padded.
fn put(dst: &mut [u8], s: &str) {
    let mut n = s.len().min(dst.len() - 1);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    dst[..n].copy_from_slice(&s.as_bytes()[..n]);
    dst[n..].fill(0);
}

fn get(src: &[u8]) -> String {
    let n = src.iter().position(|&b| b == 0).unwrap_or(src.len());
    String::from_utf8_lossy(&src[..n]).into_owned()
}

/// Milliseconds since the Unix epoch (0 on a clock before it).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Where this user's programs publish: `$XDG_RUNTIME_DIR/farmem`, else
/// `/dev/shm/farmem-UID` (both memory, never written to a disk). With
/// `create`, made (mode 0700) if missing. Refused unless it is a directory
/// this user owns that nobody else may enter.
pub fn dir(create: bool) -> Result<PathBuf, PublishError> {
    let uid = farmem_sys::process::getuid();
    let d = match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        Some(x) => PathBuf::from(x).join("farmem"),
        None => PathBuf::from(format!("/dev/shm/farmem-{uid}")),
    };
    if create {
        match std::fs::DirBuilder::new().mode(0o700).create(&d) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err(&d)(e)),
        }
    }
    let m = std::fs::symlink_metadata(&d).map_err(io_err(&d))?;
    if !m.is_dir() || m.uid() != uid || m.mode() & 0o077 != 0 {
        return Err(PublishError::NotPrivate(d));
    }
    Ok(d)
}

/// The file of process `pid` in `dir`.
pub fn path_of(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("{pid}.stats"))
}

/// Where `farmem join` asks process `pid` to add servers (one address a
/// line), and where the program answers (a line each: `ok ADDR` or
/// `error ADDR: why`). Both in this user's private directory, so only
/// this user can ask.
pub fn join_paths(dir: &Path, pid: u32) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{pid}.join")),
        dir.join(format!("{pid}.joined")),
    )
}

/// A process's start time in clock ticks since boot (`/proc/PID/stat`
/// field 22), or None when there is no such process.
pub fn start_ticks(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count
    // from the last ')'.
    let rest = &s[s.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn command_line() -> String {
    std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(String::from_utf8_lossy)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// What is published besides the counters.
pub(crate) struct Info<'a> {
    pub budget_bytes: u64,
    pub transport: &'a str,
    pub backend: &'a str,
    /// Copies of each page, and the servers by name.
    pub replicas: usize,
    pub servers: Vec<String>,
}

/// This process's published counters: the file (when it could be made)
/// and its mapping, which is never unmapped (the fault handler may count
/// until the process ends).
pub(crate) struct Board {
    page: &'static Published,
    path: Option<PathBuf>,
    pid: u32,
}

impl Board {
    /// Map a new board: in this user's directory when it can be, else in
    /// private memory (the program runs the same; `farmem stat` cannot see
    /// it).
    pub(crate) fn create(info: &Info) -> Board {
        let pid = std::process::id();
        let size = std::mem::size_of::<Published>();
        let (map, path) = match Self::make_file(pid, size) {
            Ok((map, tmp, path)) => (map, Some((tmp, path))),
            Err(_) => match Mapping::anonymous(size.next_multiple_of(farmem_sys::PAGE_SIZE), false)
            {
                Ok(m) => (m, None),
                // No memory for a few pages at start: nothing else would run either.
                Err(e) => farmem_sys::fatal(
                    format!("farmem: cannot map the statistics page: {e}\n").as_bytes(),
                ),
            },
        };
        // SAFETY: the mapping is at least `size` bytes, page-aligned, zeroed
        // (a fresh anonymous mapping or a file just allocated), and zero is
        // a valid `Published` (integers, byte arrays and atomics). Nothing
        // else reads it until the rename below, and it is never unmapped
        // (forgotten below), so the reference may live as long as the process.
        let page = unsafe { &mut *map.as_ptr().cast::<Published>() };
        page.magic = MAGIC;
        page.layout = LAYOUT;
        page.size = u32::try_from(size).unwrap_or(u32::MAX);
        page.pid = pid;
        page.start_ticks = start_ticks(pid).unwrap_or(0);
        page.started_unix_ms = unix_ms();
        page.budget_bytes = info.budget_bytes;
        put(&mut page.command, &command_line());
        put(&mut page.transport, info.transport);
        put(&mut page.backend, info.backend);
        page.health.describe(info.replicas, &info.servers);
        let path = path.and_then(|(tmp, path)| std::fs::rename(&tmp, &path).ok().map(|()| path));
        std::mem::forget(map);
        Board { page, path, pid }
    }

    /// A zeroed file of `size` bytes under a temporary name, its blocks
    /// allocated (a store to a tmpfs hole when memory is short would raise
    /// SIGBUS inside the fault handler), and mapped.
    fn make_file(pid: u32, size: usize) -> Result<(Mapping, PathBuf, PathBuf), PublishError> {
        let d = dir(true)?;
        let path = path_of(&d, pid);
        let tmp = d.join(format!(".{pid}.stats.new"));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io_err(&tmp))?;
        let made = farmem_sys::fs::allocate(&f, size as u64)
            .and_then(|()| Mapping::shared_file(&f, size, true));
        match made {
            Ok(map) => Ok((map, tmp, path)),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(io_err(&tmp)(e))
            }
        }
    }

    pub(crate) fn page(&self) -> &'static Published {
        self.page
    }

    /// The program is exiting: mark the board ended and remove the file
    /// (readers that have it mapped still read the last counters). A
    /// forked child inherits the mapping, not the file: it leaves both.
    pub(crate) fn end(&self) {
        if std::process::id() != self.pid {
            return;
        }
        self.page().ended_unix_ms.store(unix_ms(), Relaxed);
        if let Some(p) = &self.path {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// One reading of a published board.
#[derive(Debug, Clone)]
pub struct Sample {
    pub pid: u32,
    pub command: String,
    pub transport: String,
    pub backend: String,
    pub started_unix_ms: u64,
    /// When the program exited (its at-exit step ran), if it did.
    pub ended_unix_ms: Option<u64>,
    /// The counters, as `--stats` prints them (latency quantiles over the
    /// whole run).
    pub snapshot: Snapshot,
    /// The fault-latency histogram's counts, for quantiles over an interval.
    pub latency: Vec<u64>,
    pub replicas: u32,
    /// Each server's name and whether it is lost.
    pub servers: Vec<(String, bool)>,
    pub short_writes: u64,
    pub repair: RepairSample,
}

/// Where repair stands, as published.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RepairSample {
    /// Stored pages with fewer live copies than asked for (as of the
    /// running pass, or the last one).
    pub pages_short: u64,
    pub running: bool,
    pub passes: u32,
    pub pages_repaired: u64,
    pub last_ms: u64,
}

/// A program's board, mapped read-only by `farmem stat`.
pub struct Reader {
    map: Mapping,
    pub pid: u32,
    start_ticks: u64,
}

impl Reader {
    /// Open the board at `path`. Refused unless this user owns it and it
    /// has this build's layout.
    pub fn open(path: &Path) -> Result<Reader, PublishError> {
        let f = File::open(path).map_err(io_err(path))?;
        let m = f.metadata().map_err(io_err(path))?;
        let foreign = |why| PublishError::Foreign {
            path: path.to_path_buf(),
            why,
        };
        if m.uid() != farmem_sys::process::getuid() {
            return Err(foreign(OTHER_USER));
        }
        let size = std::mem::size_of::<Published>();
        if m.len() < size as u64 {
            return Err(foreign("too short"));
        }
        let map = Mapping::shared_file(&f, size, false).map_err(io_err(path))?;
        // SAFETY: at least `size` bytes, page-aligned; any bytes are a valid
        // `Published`, and every field that changes is an atomic (read-only
        // atomic loads are allowed on lock-free atomics).
        let p = unsafe { &*map.as_ptr().cast::<Published>() };
        if p.magic != MAGIC {
            return Err(foreign("no farmem header"));
        }
        if p.layout != LAYOUT || p.size as usize != size {
            return Err(foreign("another farmem version wrote it"));
        }
        let (pid, start_ticks) = (p.pid, p.start_ticks);
        Ok(Reader {
            map,
            pid,
            start_ticks,
        })
    }

    fn page(&self) -> &Published {
        // SAFETY: checked in `open`; the mapping lives as long as self.
        unsafe { &*self.map.as_ptr().cast::<Published>() }
    }

    /// Whether the process that wrote the board is still running (the same
    /// process, not a later one with its pid).
    pub fn alive(&self) -> bool {
        start_ticks(self.pid).is_some_and(|t| t == self.start_ticks)
            && self.page().ended_unix_ms.load(Relaxed) == 0
    }

    pub fn sample(&self) -> Sample {
        let p = self.page();
        let page = farmem_sys::PAGE_SIZE as u64;
        let resident = p.resident.load(Relaxed) as u64 * page;
        let snapshot = p.stats.snapshot(resident, p.budget_bytes, (0, 0, 0, 0));
        let h = &p.health;
        let n = (h.servers.load(Relaxed) as usize).min(MAX_SERVERS);
        let ended = p.ended_unix_ms.load(Relaxed);
        Sample {
            pid: p.pid,
            command: get(&p.command),
            transport: get(&p.transport),
            backend: get(&p.backend),
            started_unix_ms: p.started_unix_ms,
            ended_unix_ms: (ended != 0).then_some(ended),
            snapshot,
            latency: p.stats.fault_ns.counts().to_vec(),
            replicas: h.replicas.load(Relaxed),
            servers: (0..n)
                .map(|s| {
                    let name: Vec<u8> = h.names[s].iter().map(|b| b.load(Relaxed)).collect();
                    (get(&name), h.down[s].load(Relaxed) != 0)
                })
                .collect(),
            short_writes: h.short.load(Relaxed),
            repair: RepairSample {
                pages_short: h.pages_short.load(Relaxed),
                running: h.repairing.load(Relaxed) != 0,
                passes: h.repair_passes.load(Relaxed),
                pages_repaired: h.pages_repaired.load(Relaxed),
                last_ms: h.last_repair_ms.load(Relaxed),
            },
        }
    }
}

/// Every board in `dir`, by pid, and the boards that could not be read
/// (another farmem version's) with why. Other users' files and files of
/// processes gone are left out (the latter removed).
pub fn list(dir: &Path) -> (Vec<Reader>, Vec<(u32, PublishError)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (Vec::new(), Vec::new());
    };
    let (mut out, mut unreadable) = (Vec::new(), Vec::new());
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".stats"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let path = e.path();
        match Reader::open(&path) {
            Ok(r) if r.pid == pid && r.alive() => out.push(r),
            // Killed before its at-exit step: the file is stale.
            Ok(_) => {
                let _ = std::fs::remove_file(&path);
            }
            Err(PublishError::Foreign { why, .. }) if why == OTHER_USER => {}
            Err(err) => {
                if start_ticks(pid).is_some() {
                    unreadable.push((pid, err));
                }
            }
        }
    }
    out.sort_by_key(|r| r.pid);
    unreadable.sort_by_key(|u| u.0);
    (out, unreadable)
}

/// Bucket counts of `now` less `before` (a histogram over an interval).
pub fn interval(now: &[u64], before: &[u64]) -> [u64; BUCKETS] {
    let mut d = [0u64; BUCKETS];
    for (i, x) in d.iter_mut().enumerate() {
        *x = now
            .get(i)
            .copied()
            .unwrap_or(0)
            .saturating_sub(before.get(i).copied().unwrap_or(0));
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_board_is_read_back_by_its_reader() {
        let tmp = std::env::temp_dir().join(format!("farmem-publish-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(tmp.join("1.stats"))
            .unwrap();
        let size = std::mem::size_of::<Published>();
        farmem_sys::fs::allocate(&f, size as u64).unwrap();
        let map = Mapping::shared_file(&f, size, true).unwrap();
        // SAFETY: zeroed, page-aligned, large enough (as in `Board::create`).
        let page = unsafe { &mut *map.as_ptr().cast::<Published>() };
        page.magic = MAGIC;
        page.layout = LAYOUT;
        page.size = u32::try_from(size).unwrap();
        page.pid = std::process::id();
        page.start_ticks = start_ticks(page.pid).unwrap();
        page.budget_bytes = 1 << 20;
        put(&mut page.command, "prog ärg");
        page.health.describe(2, &["a:1".into(), "b:2".into()]);
        let page = &*page;
        page.stats.faults.add(3);
        page.stats.fault_ns.record(10_000);
        page.resident.store(5, Relaxed);
        page.health.set_down(1);
        page.health.add_short(7);
        let r = Reader::open(&tmp.join("1.stats")).unwrap();
        assert!(r.alive());
        let s = r.sample();
        assert_eq!(s.command, "prog ärg");
        assert_eq!(s.snapshot.faults, 3);
        assert_eq!(s.snapshot.resident_bytes, 5 * 4096);
        assert_eq!(s.snapshot.budget_bytes, 1 << 20);
        assert_eq!(s.latency.iter().sum::<u64>(), 1);
        assert_eq!(
            s.servers,
            vec![("a:1".to_string(), false), ("b:2".to_string(), true)]
        );
        assert_eq!((s.replicas, s.short_writes), (2, 7));
        page.ended_unix_ms.store(1, Relaxed);
        assert!(!r.alive());
        // A file that is not a board is refused, by name.
        std::fs::write(tmp.join("2.stats"), vec![0u8; size]).unwrap();
        let e = Reader::open(&tmp.join("2.stats"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("not a farmem statistics file"), "{e}");
        // Another user's board is never read (root can make one to check).
        if farmem_sys::process::getuid() == 0 {
            let other = tmp.join("3.stats");
            std::fs::copy(tmp.join("1.stats"), &other).unwrap();
            std::os::unix::fs::chown(&other, Some(12345), None).unwrap();
            let e = Reader::open(&other).err().unwrap().to_string();
            assert!(e.contains("another user's"), "{e}");
        }
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn put_cuts_at_a_character_boundary() {
        let mut b = [0xffu8; 4];
        put(&mut b, "aéé");
        assert_eq!(get(&b), "aé");
    }
}
