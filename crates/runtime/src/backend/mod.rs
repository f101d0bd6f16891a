//! Where far pages live: one small trait, two stores: [`RemoteBackend`]
//! (memory servers) and [`FileBackend`] (a file on an SSD).
//!
//! Both are called from the SIGBUS handler, so their fast paths allocate
//! nothing and make only raw syscalls.

pub mod codec;
mod file;
pub mod placement;
mod remote;
mod sealed;
pub mod transport;

pub use file::FileBackend;
pub use remote::{RemoteBackend, RepairPass};

use crate::{spawn_embedded_server, Config, RuntimeError};
use farmem_wire::{ErrorCode, ServerAddr};
use std::io;
use std::path::PathBuf;
use thiserror::Error;

/// Most pages in one backend call: the fault path's batch.
pub use crate::config::MAX_BATCH;

/// Why a one-sided batch did not complete: which server, and what happened.
pub(crate) struct Failure {
    pub(crate) server: usize,
    pub(crate) why: String,
}

/// A one-sided page path (memory files, UCX): pages live in chunks of
/// `farmem_wire::CHUNK_PAGES` that the servers grant one at a time (see
/// `remote/one_sided.rs`), and move without a request per page.
pub(crate) trait OneSided {
    /// Whether `page`'s chunk is granted on server `s`.
    fn granted(&self, s: usize, page: u64) -> bool;
    /// Read `pages` into `buf` (page i at `i * PAGE_SIZE`), page i from
    /// server `from[i]`.
    fn read(&self, pages: &[u64], from: &[usize], buf: &mut [u8]) -> Result<(), Failure>;
    /// Write `data[i]` as `pages[i]` to every server in `to[i]` (its live
    /// copies; `None` past the last): complete at the servers when this
    /// returns Ok.
    fn write(
        &self,
        pages: &[u64],
        data: &[&[u8]],
        to: &[[Option<usize>; crate::config::MAX_REPLICAS]],
    ) -> Result<(), Failure>;
}

/// A configuration's backend, opened (see [`open`]).
pub(crate) struct Opened {
    pub backend: Box<dyn Backend>,
    /// The configuration, with the servers a rendezvous found filled in.
    pub cfg: Config,
    /// The embedded server's address, when one was started for it.
    pub server: Option<ServerAddr>,
}

/// Open the backend `cfg` asks for, over an arena of `npages` pages: the
/// file store (`FARMEM_FILE`); else the servers it names, or those a
/// rendezvous finds (waiting for them); else an embedded memory server on
/// loopback, started here in a child process of its own.
pub(crate) fn open(cfg: Config, npages: u64) -> Result<Opened, RuntimeError> {
    if let Some(path) = &cfg.file {
        return Ok(Opened {
            backend: Box::new(FileBackend::open(path, cfg.file_direct)?),
            cfg,
            server: None,
        });
    }
    let (cfg, found) = cfg.resolved()?;
    if let Some(found) = found {
        for why in &found.ignored {
            farmem_sys::write_stderr(format!("farmem: rendezvous: passed over {why}\n").as_bytes());
        }
    }
    let (servers, server) = if cfg.servers().is_empty() {
        let addr = spawn_embedded_server(cfg.embedded_capacity)?.addr;
        (vec![addr.clone()], Some(addr))
    } else {
        (cfg.servers().to_vec(), None)
    };
    let backend = Box::new(RemoteBackend::connect(&cfg, &servers, npages)?);
    Ok(Opened {
        backend,
        cfg,
        server,
    })
}

#[derive(Debug, Error)]
pub enum BackendError {
    #[error("memory server {server}: {source}")]
    Io { server: String, source: io::Error },
    #[error("memory server {server} refused: {message} ({})", .code.map_or_else(|| "an unknown error code".to_string(), |c| format!("{c:?}")))]
    Refused {
        server: String,
        code: Option<ErrorCode>,
        message: String,
    },
    #[error("memory server {server} sent a bad reply: {why}")]
    Protocol { server: String, why: String },
    #[error(
        "cannot connect to memory server {server}: {source} (is `farmem serve` running there?)"
    )]
    Connect { server: String, source: io::Error },
    #[error("memory server {server}: {why}")]
    Auth { server: String, why: String },
    /// The transport asked for is not there (UCX missing on this side or
    /// the server's, or not set up).
    #[error("memory server {server}: {why}")]
    Transport { server: String, why: String },
    #[error("{0}")]
    Secret(#[from] farmem_wire::auth::SecretError),
    /// Settings that cannot work with the servers given (said before any
    /// server is reached, and never blamed on one).
    #[error("{0}")]
    Config(String),
    #[error("far-memory file {path}: {source}")]
    File { path: PathBuf, source: io::Error },
}

/// A page store. `pages` are far page numbers; `read` fills `buf` with
/// `pages.len()` pages in order; `write` sends one page-sized slice per page.
/// What only some stores have is a trait of its own, reached through
/// [`Backend::pipelined`] and [`Backend::memory_servers`]; the runtime calls
/// it through `dyn Backend`'s methods below, which do nothing where a store
/// has no such part.
pub trait Backend: Send + Sync {
    fn read(&self, pages: &[u64], buf: &mut [u8]) -> Result<(), BackendError>;
    fn write(&self, pages: &[u64], data: &[&[u8]]) -> Result<(), BackendError>;
    /// Release pages `[start, start+n)`.
    fn free(&self, start: u64, n: u64) -> Result<(), BackendError>;
    /// One line for messages: what and where.
    fn describe(&self) -> String;
    /// Which server (by name) holds `page`; for error messages.
    fn holder(&self, page: u64) -> String;
    /// How pages move, for the statistics (`local file`, `socket`, `ucx
    /// (shared memory)`).
    fn transport(&self) -> &'static str;
    /// Its reads that are sent now and received later, where it has them.
    fn pipelined(&self) -> Option<&dyn Pipelined> {
        None
    }
    /// Its memory servers, where it has them.
    fn memory_servers(&self) -> Option<&dyn MemoryServers> {
        None
    }
}

/// Reads sent now and received later: whichever thread next drains the
/// connection receives the reply and calls the completion function.
pub trait Pipelined: Send + Sync {
    /// Start reading `pages` (consecutive, within one [`Pipelined::route_run`])
    /// into `buf` without waiting for the reply; the completion function gets
    /// `token`. Returns false when it cannot (read synchronously).
    ///
    /// # Safety
    /// `buf` must stay valid and untouched for `pages.len()` pages until the
    /// completion for `token` has run.
    unsafe fn read_async(
        &self,
        pages: &[u64],
        buf: *mut u8,
        token: u64,
    ) -> Result<bool, BackendError>;
    /// Receive every reply outstanding on the connection of `page`.
    fn progress(&self, page: u64) -> Result<(), BackendError>;
    /// Receive every reply outstanding on every connection.
    fn progress_all(&self) -> Result<(), BackendError>;
    /// How many pages from `page` on travel on the same connection.
    fn route_run(&self, page: u64) -> u64;
    /// The function that installs a completed asynchronous read.
    fn set_completion(&self, f: fn(u64));
}

/// What a store of memory servers adds: copies on several servers, their
/// health, and preparing the one-sided page paths.
pub trait MemoryServers: Send + Sync {
    /// `page` came back with the wrong checksum from the server that served
    /// it: stop using that server. Returns whether another copy of the page
    /// is left to read.
    fn distrust(&self, page: u64) -> bool;
    /// Lines for the statistics table on the servers' health (servers lost,
    /// pages left with fewer copies).
    fn health(&self) -> Option<String>;
    /// Far pages `[first, first+n)` were just allocated: prepare what the
    /// page path needs to hold them later (UCX: grant their chunks and
    /// unpack their keys), here, outside any fault handler.
    fn prepare(&self, first: u64, n: u64) -> Result<(), BackendError>;
    /// The runtime's fetch slots, where reads land: a page path may register
    /// them once.
    fn register_slots(&self, ptr: *mut u8, len: usize);
    /// Copies of each page, and the servers that hold them by name, for
    /// `farmem stat`.
    fn servers(&self) -> (usize, Vec<String>);
    /// From now on, mirror the servers' health into `h` (which `farmem
    /// stat` reads from another process).
    fn publish(&self, h: &'static crate::publish::Health);
    /// Whether lost copies can be repaired (more than one copy); if so,
    /// `waker` is unparked whenever a server is lost.
    fn repairs(&self, waker: std::thread::Thread) -> bool;
    /// Ask the servers whether one is leaving (`farmem serve --drain`), and
    /// look for lost ones back at their address; true when one began
    /// leaving or joined (a repair pass then moves pages).
    fn watch(&self) -> Result<bool, BackendError>;
    /// Add the server at `addr` to the session (`farmem join`); the next
    /// repair pass gives it its share of the copies.
    fn join(&self, addr: &ServerAddr) -> Result<(), BackendError>;
    /// Servers lost (or leaving) so far, and page writes that reached fewer copies than
    /// asked for: a repair pass is due when either grows.
    fn losses(&self) -> (u64, u64);
    /// One repair pass (see `remote/repair.rs`) over pages below `bound`:
    /// every stripe unit with a copy on a lost server gets it back on a
    /// live one. `stored(page)` says whether a page holds content on the
    /// servers.
    fn repair(&self, stored: &dyn Fn(u64) -> bool, bound: u64) -> Result<RepairPass, BackendError>;
}

/// The optional parts, called as the runtime needs them: each does nothing
/// (or says "cannot") where the store has no such part.
impl dyn Backend + '_ {
    /// See [`Pipelined::read_async`]; false where reads are not pipelined.
    ///
    /// # Safety
    /// As [`Pipelined::read_async`].
    pub unsafe fn read_async(
        &self,
        pages: &[u64],
        buf: *mut u8,
        token: u64,
    ) -> Result<bool, BackendError> {
        match self.pipelined() {
            // SAFETY: the caller's contract is the trait method's.
            Some(p) => unsafe { p.read_async(pages, buf, token) },
            None => Ok(false),
        }
    }

    pub fn progress(&self, page: u64) -> Result<(), BackendError> {
        self.pipelined().map_or(Ok(()), |p| p.progress(page))
    }

    pub fn progress_all(&self) -> Result<(), BackendError> {
        self.pipelined().map_or(Ok(()), |p| p.progress_all())
    }

    pub fn route_run(&self, page: u64) -> u64 {
        self.pipelined().map_or(u64::MAX, |p| p.route_run(page))
    }

    pub fn set_completion(&self, f: fn(u64)) {
        if let Some(p) = self.pipelined() {
            p.set_completion(f);
        }
    }

    pub fn distrust(&self, page: u64) -> bool {
        self.memory_servers().is_some_and(|m| m.distrust(page))
    }

    pub fn health(&self) -> Option<String> {
        self.memory_servers().and_then(|m| m.health())
    }

    pub fn prepare(&self, first: u64, n: u64) -> Result<(), BackendError> {
        self.memory_servers()
            .map_or(Ok(()), |m| m.prepare(first, n))
    }

    pub fn register_slots(&self, ptr: *mut u8, len: usize) {
        if let Some(m) = self.memory_servers() {
            m.register_slots(ptr, len);
        }
    }

    /// Copies of each page and the servers by name: one copy and none for
    /// a file.
    pub fn servers(&self) -> (usize, Vec<String>) {
        self.memory_servers()
            .map_or((1, Vec::new()), |m| m.servers())
    }

    pub fn publish(&self, h: &'static crate::publish::Health) {
        if let Some(m) = self.memory_servers() {
            m.publish(h);
        }
    }
}
