//! How a session's pages move (sockets, sealed memory files, UCX), and how
//! the path is chosen when the session opens.

use super::handshake::{open_memfd, open_ucx, side_door};
use super::memfd::MemfdPages;
use super::one_sided::Grant;
use super::ucx::UcxPages;
use super::{set, RemoteBackend, Server};
use crate::backend::BackendError;
use crate::config::Config;
use crate::config::Transport as Choice;
use farmem_sys::net::Wait;
use farmem_wire::TOKEN_LEN;

/// How a session's pages move; one way for every server of a session.
pub(super) enum PagePath {
    /// A Read or Write request per batch on the connections.
    Sockets,
    /// Sealed memory files whose descriptors the servers passed (one host).
    Memfd(MemfdPages),
    /// UCX gets and puts (RDMA verbs; shared memory on one host only when
    /// asked for by name, as a test path).
    Ucx(UcxPages),
}

impl PagePath {
    pub(super) fn one_sided(&self) -> Option<&dyn OneSidedDyn> {
        match self {
            PagePath::Sockets => None,
            PagePath::Memfd(m) => Some(m),
            PagePath::Ucx(u) => Some(u),
        }
    }
}

/// [`Grant`] behind a reference, for the calls that do not care which.
pub(super) trait OneSidedDyn {
    fn read(&self, b: &RemoteBackend, pages: &[u64], buf: &mut [u8]) -> Result<(), BackendError>;
    fn write(&self, b: &RemoteBackend, pages: &[u64], data: &[&[u8]]) -> Result<(), BackendError>;
    fn prepare(&self, b: &RemoteBackend, first: u64, n: u64) -> Result<(), BackendError>;
    /// Read `pages` from server `s` alone (repair's source copy).
    fn read_on(
        &self,
        b: &RemoteBackend,
        s: usize,
        pages: &[u64],
        buf: &mut [u8],
    ) -> Result<(), BackendError>;
    /// Write `pages` to server `s` alone (repair's new copy).
    fn write_on(
        &self,
        b: &RemoteBackend,
        s: usize,
        pages: &[u64],
        data: &[&[u8]],
    ) -> Result<(), BackendError>;
}

impl<P: Grant> OneSidedDyn for P {
    fn read(&self, b: &RemoteBackend, pages: &[u64], buf: &mut [u8]) -> Result<(), BackendError> {
        b.one_sided_read(self, pages, buf)
    }
    fn write(&self, b: &RemoteBackend, pages: &[u64], data: &[&[u8]]) -> Result<(), BackendError> {
        b.one_sided_write(self, pages, data)
    }
    fn prepare(&self, b: &RemoteBackend, first: u64, n: u64) -> Result<(), BackendError> {
        b.grant_range(self, first, n)
    }
    fn read_on(
        &self,
        b: &RemoteBackend,
        s: usize,
        pages: &[u64],
        buf: &mut [u8],
    ) -> Result<(), BackendError> {
        b.one_sided_read_on(self, s, pages, buf)
    }
    fn write_on(
        &self,
        b: &RemoteBackend,
        s: usize,
        pages: &[u64],
        data: &[&[u8]],
    ) -> Result<(), BackendError> {
        b.one_sided_write_on(self, s, pages, data)
    }
}

/// Whether this host has an RDMA device (`/sys/class/infiniband`).
pub(super) fn has_rdma_device() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

/// The page path of a session over `servers` (greeted), as
/// `FARMEM_TRANSPORT` says: `memfd` and `ucx` insist (a server that cannot
/// stops the program with one line), `socket` never asks, and `auto` takes
/// memory files when every server is on this host (a Unix socket, or TCP
/// with a side door) and offers them, UCX when this host has an RDMA device
/// and every server offers it, sockets otherwise. Pages of one session move
/// one way.
pub(super) fn choose_path(
    cfg: &Config,
    servers: &mut [Server],
    max_pages: u64,
    token: &[u8; TOKEN_LEN],
    wait: Wait,
) -> Result<PagePath, BackendError> {
    let all_names = servers
        .iter()
        .map(|s| s.name.clone())
        .collect::<Vec<_>>()
        .join(",");
    let names = || all_names.clone();
    let all_unix = servers.iter().all(|s| s.conns[0].link.is_local());
    // A Unix socket's server is on this host whatever else it says.
    let all_here = servers
        .iter()
        .all(|s| s.conns[0].link.is_local() || s.conns[0].link.same_host());
    let want_memfd = match cfg.transport {
        Choice::Memfd if !all_here => {
            return Err(BackendError::Config(format!(
                "FARMEM_TRANSPORT=memfd needs every memory server on this host, and not all of {} are: memory files pass only to a Unix socket (unix:PATH or unix:@NAME) or over TCP to an address of this host",
                names()
            )))
        }
        Choice::Memfd => true,
        Choice::Auto => all_here,
        Choice::Socket | Choice::Ucx => false,
    };
    if want_memfd {
        let required = cfg.transport == Choice::Memfd;
        let mut all = true;
        for server in servers.iter_mut() {
            if !server.conns[0].link.is_local() {
                match side_door(server, token, max_pages, cfg.timeout_ms, wait, required)? {
                    Some(side) => server.side = Some(side),
                    None => {
                        all = false;
                        break;
                    }
                }
            }
            if !open_memfd(server, &*server.memfd_conn().link, wait, required)? {
                all = false;
                break;
            }
        }
        if all {
            return Ok(PagePath::Memfd(MemfdPages::new(
                servers.len() + set::MAX_JOINS,
                max_pages,
            )));
        }
        // Sockets after all: a side door already opened goes unused.
        for server in servers.iter_mut() {
            server.side = None;
        }
    }
    let want_ucx = match cfg.transport {
        Choice::Ucx => {
            farmem_sys::ucx::available()
                .map_err(|e| BackendError::Config(format!("FARMEM_TRANSPORT=ucx: {e}")))?;
            true
        }
        // UCX's keys are capabilities only where the NIC enforces them.
        Choice::Auto => !all_unix && has_rdma_device() && farmem_sys::ucx::available().is_ok(),
        Choice::Socket | Choice::Memfd => false,
    };
    if !want_ucx {
        return Ok(PagePath::Sockets);
    }
    let required = cfg.transport == Choice::Ucx;
    let mut addrs = Vec::with_capacity(servers.len());
    for server in servers.iter() {
        match open_ucx(server, &*server.conns[0].link, wait, required)? {
            Some(a) => addrs.push(a),
            None => return Ok(PagePath::Sockets),
        }
    }
    // Shared memory only when asked for by name (the one-host test path);
    // `auto` got here on an RDMA host and takes verbs only.
    let transports = if required {
        farmem_sys::ucx::Transports::PosixTestPath
    } else {
        farmem_sys::ucx::Transports::Verbs
    };
    let ucx = UcxPages::new(&addrs, max_pages, wait.timeout_ns, transports).map_err(|e| {
        BackendError::Transport {
            server: names(),
            why: format!("cannot set up UCX: {e}"),
        }
    })?;
    Ok(PagePath::Ucx(ucx))
}
