//! Where far pages live: one small trait, two stores: [`RemoteBackend`]
//! (memory servers) and [`FileBackend`] (a file on an SSD).
//!
//! Both are called from the SIGBUS handler, so their fast paths allocate
//! nothing and make only raw syscalls.

mod file;
mod memfd;
pub mod placement;
mod remote;
mod sealed;
pub mod transport;
mod ucx;

pub use file::FileBackend;
pub use remote::RemoteBackend;

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
pub trait Backend: Send + Sync {
    fn read(&self, pages: &[u64], buf: &mut [u8]) -> Result<(), BackendError>;
    fn write(&self, pages: &[u64], data: &[&[u8]]) -> Result<(), BackendError>;
    /// Release pages `[start, start+n)`.
    fn free(&self, start: u64, n: u64) -> Result<(), BackendError>;
    /// One line for messages: what and where.
    fn describe(&self) -> String;
    /// Which server (by name) holds `page`; for error messages.
    fn holder(&self, page: u64) -> String;

    /// Start reading `pages` (consecutive, within one [`Backend::route_run`])
    /// into `buf` without waiting for the reply. Whichever thread next drains
    /// that connection receives it and calls the completion function with
    /// `token`. Returns false when the backend cannot (read synchronously).
    ///
    /// # Safety
    /// `buf` must stay valid and untouched for `pages.len()` pages until the
    /// completion for `token` has run.
    unsafe fn read_async(
        &self,
        _pages: &[u64],
        _buf: *mut u8,
        _token: u64,
    ) -> Result<bool, BackendError> {
        Ok(false)
    }

    /// Receive every reply outstanding on the connection of `page`.
    fn progress(&self, _page: u64) -> Result<(), BackendError> {
        Ok(())
    }

    /// Receive every reply outstanding on every connection.
    fn progress_all(&self) -> Result<(), BackendError> {
        Ok(())
    }

    /// How many pages from `page` on travel on the same connection.
    fn route_run(&self, _page: u64) -> u64 {
        u64::MAX
    }

    /// The function that installs a completed asynchronous read.
    fn set_completion(&self, _f: fn(u64)) {}

    /// `page` came back with the wrong checksum from the server that served
    /// it: stop using that server. Returns whether another copy of the page
    /// is left to read.
    fn distrust(&self, _page: u64) -> bool {
        false
    }

    /// Lines for the statistics table on the backend's health (servers
    /// lost, pages left with fewer copies), where that applies.
    fn health(&self) -> Option<String> {
        None
    }

    /// Far pages `[first, first+n)` were just allocated: prepare whatever
    /// the backend needs to hold them later (UCX: grant their chunks and
    /// unpack their keys), here, outside any fault handler.
    fn reserve(&self, _first: u64, _n: u64) -> Result<(), BackendError> {
        Ok(())
    }

    /// The runtime's fetch slots, where reads land: a backend may register
    /// them once.
    fn register_slots(&self, _ptr: *mut u8, _len: usize) {}

    /// Copies of each page, and the servers that hold them by name (none
    /// for a file), for `farmem stat`.
    fn servers(&self) -> (usize, Vec<String>) {
        (1, Vec::new())
    }

    /// From now on, mirror the servers' health into `h` (which
    /// `farmem stat` reads from another process).
    fn publish(&self, _h: &'static crate::publish::Health) {}

    /// How pages move, for the statistics (`socket`, `ucx (shared memory)`).
    fn transport(&self) -> &'static str {
        "local file"
    }
}
