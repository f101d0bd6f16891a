//! One-sided sessions: pages in memory UCX allocated and registered, which
//! clients read and write without this server's CPU.
//!
//! The [`Engine`] (one UCX context and worker per server) starts at the
//! first UcxOpen, on RDMA verbs and UCX's one-host `posix` test path only
//! ([`Transports`]): transports whose gets and puts the NIC or the kernel
//! checks. It refuses to start, in one line, when UCX gives it any other
//! transport: over one without hardware RMA (tcp, ud), UCX emulates RMA
//! with messages whose handlers read and write any address a peer names,
//! so a remote key would not be a capability. Its progress thread moves
//! nothing over shared memory or RDMA; it answers UCX's connection set-up.
//! It spins for `--spin-us` after any event, then sleeps on the worker's
//! event file descriptor, so an idle server costs no CPU.
//!
//! A session's [`Pool`] grows one chunk at a time, on the client's
//! UcxChunk: allocated and registered once ([`CHUNK_PAGES`] pages, the last
//! one shorter), never per page. Capacity and `--session-quota` are
//! reserved per chunk before any memory is mapped (mapping writes or pins
//! the whole chunk), and given back when the mapping fails, since the
//! server cannot see which pages a client writes. A packed remote key is
//! sent only on the control connection of the session that owns the chunk,
//! after the handshake.
//!
//! Connection threads map, pack and unmap concurrently; the engine
//! serialises those calls under one lock ([`Engine::ucx_calls`]) on top of
//! the context's own (`mt_workers_shared`).

use crate::capacity::{Refused, Reservation};
use farmem_sys::ucx::{Context, Memory, Transports, UcxError, Worker};
use farmem_wire::PAGE_SIZE;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Pages a chunk holds: 64 MiB. Registering costs ~80 µs for 4 KiB and
/// ~600 µs for 1 MiB, so a chunk amortises it over 16,384 pages; and a
/// grant is one control round trip per 64 MiB of far footprint.
pub const CHUNK_PAGES: u64 = 16_384;

/// The server's UCX context, worker and progress thread.
pub(crate) struct Engine {
    // Field order is drop order: the worker before its context.
    worker: Worker,
    ctx: Context,
    address: Vec<u8>,
    stop: AtomicBool,
    /// Held around every `Memory::map`, `pack_rkey` and `Memory` drop.
    calls: Mutex<()>,
}

impl Engine {
    /// Start UCX on `transports` only, and the progress thread (it holds
    /// the engine until [`Engine::stop`]). Fails, saying which, when UCX
    /// gives the context any other transport.
    pub(crate) fn start_on(spin_ns: u64, transports: Transports) -> Result<Arc<Engine>, UcxError> {
        let ctx = Context::with_transports(c"farmem-serve", true, transports, &[])?;
        let worker = Worker::new(&ctx)?;
        let address = worker.address()?;
        let efd = worker.event_fd()?;
        let e = Arc::new(Engine {
            worker,
            ctx,
            address,
            stop: AtomicBool::new(false),
            calls: Mutex::new(()),
        });
        let me = e.clone();
        std::thread::Builder::new()
            .name("farmem-ucx".into())
            .spawn(move || me.progress_loop(efd, spin_ns))
            .map_err(|e| UcxError::Call {
                call: "spawn the progress thread",
                status: e.to_string(),
            })?;
        Ok(e)
    }

    /// This server's worker address, for clients' endpoints.
    pub(crate) fn address(&self) -> &[u8] {
        &self.address
    }

    /// The lock that serialises this engine's map, pack and unmap calls.
    fn ucx_calls(&self) -> MutexGuard<'_, ()> {
        crate::lock(&self.calls)
    }

    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    fn progress_loop(&self, efd: i32, spin_ns: u64) {
        let mut last = farmem_sys::now_ns();
        while !self.stop.load(Ordering::Acquire) {
            if self.worker.progress() > 0 {
                last = farmem_sys::now_ns();
                continue;
            }
            if farmem_sys::now_ns() - last < spin_ns {
                farmem_sys::cpu_relax();
                continue;
            }
            // Idle: sleep until the worker has an event (or 50 ms, to see
            // `stop`). `arm` fails when events are pending: progress them.
            if self.worker.arm() {
                farmem_sys::net::wait_readable(efd, 50);
            }
            last = farmem_sys::now_ns();
        }
    }
}

struct Chunk {
    mem: Memory,
    rkey: Vec<u8>,
    pages: u64,
}

/// A session's one-sided pages.
pub(crate) struct Pool {
    // Drop order: the chunks (unmapped under the engine's lock, in `drop`)
    // before the engine's context.
    /// Granted chunks by index: sparse, a session asks for any chunk of
    /// its range in any order.
    chunks: Mutex<BTreeMap<u64, Chunk>>,
    engine: Arc<Engine>,
    max_pages: u64,
    /// Pages of the chunks granted (what capacity is charged).
    charged: AtomicU64,
}

/// Why a chunk was not granted.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GrantError {
    #[error("{0}")]
    OutOfRange(String),
    #[error("{0}")]
    Capacity(Refused),
    #[error("{0}")]
    Ucx(String),
}

impl Pool {
    pub(crate) fn new(engine: Arc<Engine>, max_pages: u64) -> Pool {
        Pool {
            chunks: Mutex::new(BTreeMap::new()),
            engine,
            max_pages,
            charged: AtomicU64::new(0),
        }
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Pages charged to this session's chunks.
    pub(crate) fn charged(&self) -> u64 {
        self.charged.load(Ordering::Acquire)
    }

    /// Grant chunk `c` (allocated and registered now, or already): its
    /// base address and packed remote key. `reserve(pages)` reserves the
    /// server's capacity and the session's quota, or says why not; it runs
    /// before any memory is mapped, and the reservation goes back when the
    /// chunk cannot be made.
    pub(crate) fn grant<'r>(
        &self,
        c: u64,
        reserve: impl FnOnce(u64) -> Result<Reservation<'r>, Refused>,
    ) -> Result<(u64, Vec<u8>), GrantError> {
        let nchunks = self.max_pages.div_ceil(CHUNK_PAGES);
        if c >= nchunks {
            return Err(GrantError::OutOfRange(format!(
                "chunk {c} is beyond the session's {} pages ({nchunks} chunks)",
                self.max_pages
            )));
        }
        // Held to the end: a second grant of `c` waits, and finds it.
        let mut chunks = crate::lock(&self.chunks);
        if let Some(ch) = chunks.get(&c) {
            return Ok((ch.mem.addr() as u64, ch.rkey.clone()));
        }
        let pages = CHUNK_PAGES.min(self.max_pages - c * CHUNK_PAGES);
        // Reserved first: mapping writes (posix) or pins (verbs) the
        // whole chunk, which a session at its quota must not make happen.
        let reservation = reserve(pages).map_err(GrantError::Capacity)?;
        self.charged.fetch_add(pages, Ordering::AcqRel);
        match self.make(pages) {
            Ok(ch) => {
                reservation.keep_all();
                let granted = (ch.mem.addr() as u64, ch.rkey.clone());
                chunks.insert(c, ch);
                Ok(granted)
            }
            Err(why) => {
                self.charged.fetch_sub(pages, Ordering::AcqRel);
                drop(reservation);
                Err(GrantError::Ucx(why))
            }
        }
    }

    /// Map and register a chunk of `pages`, and pack its key, under the
    /// engine's lock (a failed chunk is unmapped under it too).
    fn make(&self, pages: u64) -> Result<Chunk, String> {
        let _calls = self.engine.ucx_calls();
        let mem = Memory::map(
            &self.engine.ctx,
            farmem_sys::usize_from(pages) * PAGE_SIZE,
            None,
        )
        .map_err(|e| e.to_string())?;
        let rkey = mem.pack_rkey().map_err(|e| e.to_string())?;
        if rkey.len() > farmem_wire::MAX_UCX_BLOB {
            return Err(format!(
                "the packed remote key has {} bytes, more than the protocol carries ({})",
                rkey.len(),
                farmem_wire::MAX_UCX_BLOB
            ));
        }
        Ok(Chunk { mem, rkey, pages })
    }

    /// Give the memory of pages `[start, start+n)` back to the system (a
    /// client's Free); the chunks stay granted and charged.
    pub(crate) fn discard(&self, start: u64, n: u64) {
        let chunks = crate::lock(&self.chunks);
        let end = start.saturating_add(n).min(self.max_pages);
        let mut p = start;
        while p < end {
            let c = p / CHUNK_PAGES;
            let stop = ((c + 1) * CHUNK_PAGES).min(end);
            if let Some(ch) = chunks.get(&c) {
                let off = farmem_sys::usize_from(p - c * CHUNK_PAGES) * PAGE_SIZE;
                let len =
                    farmem_sys::usize_from(stop.min(c * CHUNK_PAGES + ch.pages) - p) * PAGE_SIZE;
                // SAFETY: the range lies inside the chunk's mapping; only
                // the client writes it, and it freed these pages.
                unsafe { discard_shared(ch.mem.addr().add(off), len) };
            }
            p = stop;
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let chunks = std::mem::take(
            self.chunks
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let _calls = self.engine.ucx_calls();
        drop(chunks);
    }
}

/// Return pages to the system: `MADV_REMOVE` for shared memory (a UCX
/// segment), else `MADV_DONTNEED`.
///
/// # Safety
/// `[addr, addr+len)` must be mapped and unused.
unsafe fn discard_shared(addr: *mut u8, len: usize) {
    // SAFETY: the caller's contract.
    if unsafe { farmem_sys::mem::madvise(addr, len, libc::MADV_REMOVE) }.is_err() {
        // SAFETY: as above.
        let _ = unsafe { farmem_sys::mem::madvise(addr, len, libc::MADV_DONTNEED) };
    }
}
