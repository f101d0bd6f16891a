//! farmem's far-memory runtime.
//!
//! One process-wide *arena* of virtual address space is registered with a
//! userfaultfd in SIGBUS mode. `alloc` hands out page ranges of it. A page of
//! the arena is either resident (mapped) or lives on a [`backend::Backend`]
//! (memory servers or a file); the page table (`meta`, one `AtomicU32` per page,
//! see [`page`]) says which.
//!
//! The modules follow a fault through the runtime:
//! - [`signals`]: the SIGBUS handler; `fork`: the guard in a forked child;
//! - `fault`: claim, take room, fetch — in the faulting thread, which
//!   receives its reply into a fetch slot (`slots`);
//! - `install`: checksums checked (`checksum`), pages mapped and queued;
//! - `prefetch`: the per-stream prefetch windows, pipelined ahead;
//!   [`readahead`] decides them, `dirty` follows write streams;
//! - [`replacement`]: which page leaves next (scan-resistant, loop-aware);
//! - `eviction`: write-back of dirty victims and unmapping;
//! - [`page`]: the page lifecycle state machine, `table`: its atomic words;
//! - `regions`: the allocator; `pins`: advice and pins for system calls;
//! - [`backend`]: the memory servers and the file store;
//! - `embedded`: the default loopback server.
//!
//! Clean and dirty are told apart by userfaultfd write protection: pages are
//! installed write-protected unless the fault was a write (the x86 error code
//! in the signal frame says so), and the first write to a clean page faults
//! once more to mark it dirty.

mod arena;
pub mod backend;
mod budget;
mod checksum;
pub mod config;
pub mod cost;
mod counter;
mod dirty;
mod embedded;
mod eviction;
mod fault;
mod fork;
mod hold;
mod install;
pub mod jvm;
mod observe;
pub mod page;
mod peers;
mod pins;
mod prefetch;
pub mod publish;
pub mod readahead;
mod recycle;
pub mod regions;
pub mod remap;
mod repair;
pub mod replacement;
pub mod signals;
mod slots;
pub mod stats;
mod streams;
mod sync;
mod table;
pub mod trace;

use backend::{Backend, BackendError};
use checksum::Sums;
use config::MAX_BATCH;
pub use config::{Config, ConfigError};
pub use embedded::{spawn_embedded_server, EmbeddedServer};
use farmem_sys::mem::Mapping;
use farmem_sys::msg::MsgBuf;
use farmem_sys::uffd::Uffd;
use farmem_sys::PAGE_SIZE;
use fork::after_fork_child;
pub use fork::is_forked_child;
pub use peers::PeerPins;
pub use pins::IoPin;
use readahead::Planner;
use regions::Regions;
use replacement::Queues;
use signals::{on_sigbus, print_stats_at_exit};
use slots::Slots;
use stats::Snapshot;
use std::fmt::Write as _;
use std::io;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;
use table::PageTable;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("userfaultfd is not available: {}", farmem_sys::uffd::explain(.0))]
    Uffd(io::Error),
    #[error("this machine's base pages are {0} bytes; farmem needs 4 KiB pages")]
    PageSize(usize),
    #[error(
        "cannot reserve {size} of address space for far memory: {source} (lower FARMEM_ARENA)"
    )]
    Map { size: String, source: io::Error },
    #[error("cannot install the SIGBUS handler: {0}")]
    Signal(io::Error),
    #[error("cannot start the embedded memory server: {0}")]
    Server(String),
    #[error("farmem is already initialised")]
    AlreadyInitialized,
    #[error("farmem is not initialised (call fm_init first)")]
    NotInitialized,
    #[error("far memory exhausted: {want} requested, {free} of FARMEM_ARENA={arena} free (raise FARMEM_ARENA)")]
    OutOfSpace {
        want: String,
        free: String,
        arena: String,
    },
    #[error("{0:#x} is not the start of a live far allocation")]
    InvalidPointer(usize),
    #[error("the range {addr:#x}+{len} is not inside one far allocation")]
    InvalidRange { addr: usize, len: usize },
    #[error("size must be greater than zero")]
    ZeroSize,
    #[error("pinning {want} would leave too little of the local budget ({budget}) for unpinned pages; pin less or raise FARMEM_LOCAL")]
    PinBudget { want: String, budget: String },
    #[error("range is not pinned")]
    NotPinned,
    #[error("FARMEM_TRACE: cannot create {0}: {1} (name a writable file)")]
    Trace(std::path::PathBuf, io::Error),
    #[error("cannot {0} far memory the program remapped: {1}")]
    Remap(&'static str, io::Error),
    #[error("far memory is not available in a forked child process")]
    Forked,
}

/// Advice for a range (`fm_advise`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    Normal,
    Sequential,
    Random,
    WillNeed,
    DontNeed,
    Pin,
    Unpin,
    ReadMostly,
}

/// The process-wide runtime, created once by [`init`] and never freed (the
/// signal handler may use it until the process ends).
pub struct Runtime {
    pub(crate) cfg: Config,
    pub(crate) arena: arena::Arena,
    /// Evicted pages kept for writable installs, where the kernel moves
    /// pages (see [`recycle`]).
    pub(crate) bin: Option<recycle::Bin>,
    pub(crate) budget: budget::Budget,
    pub(crate) streams: streams::Streams,
    pub(crate) observe: observe::Observe,
    pub(crate) backend: Box<dyn Backend>,
    pub(crate) regions: Mutex<Regions>,
    /// Ranges the program protected or mapped itself: see [`remap`].
    pub(crate) altered: remap::AlteredSet,
    /// Address of the embedded server process, when farmem started one.
    pub(crate) server: Option<farmem_wire::ServerAddr>,
}

static RUNTIME: AtomicPtr<Runtime> = AtomicPtr::new(std::ptr::null_mut());
static INIT: Mutex<()> = Mutex::new(());

/// The runtime, if initialised.
#[inline]
pub fn get() -> Option<&'static Runtime> {
    let p = RUNTIME.load(Ordering::Acquire);
    // SAFETY: RUNTIME is only ever set to a leaked Box that is never freed.
    unsafe { p.as_ref() }
}

/// Initialise the runtime once per process.
pub fn init(cfg: Config) -> Result<&'static Runtime, RuntimeError> {
    let _g = INIT.lock().unwrap_or_else(|p| p.into_inner());
    if get().is_some() {
        return Err(RuntimeError::AlreadyInitialized);
    }
    let rt = Box::leak(Box::new(Runtime::new(cfg)?));
    RUNTIME.store(rt, Ordering::Release);
    farmem_sys::process::at_exit(end_board_at_exit);
    rt.backend.set_completion(prefetch::complete_async);
    let old = farmem_sys::signal::install_fault_handler(libc::SIGBUS, on_sigbus)
        .map_err(RuntimeError::Signal)?;
    signals::set_program_sigbus(old);
    farmem_sys::process::at_fork_child(after_fork_child);
    if let Err(e) = peers::start(rt) {
        farmem_sys::write_stderr(
            format!(
                "farmem: warning: cannot start the peer pin service ({e}); another process's \
                 process_vm_readv of this process's far memory may fail\n"
            )
            .as_bytes(),
        );
    }
    if let Err(e) = repair::start(rt) {
        farmem_sys::write_stderr(
            format!(
                "farmem: warning: cannot start the repair thread ({e}); a lost server's copies \
                 will not be made again\n"
            )
            .as_bytes(),
        );
    }
    if rt.cfg.stats_at_exit {
        farmem_sys::process::at_exit(print_stats_at_exit);
    }
    if rt.observe.tracer().is_some() {
        farmem_sys::process::at_exit(flush_trace_at_exit);
    }
    Ok(rt)
}

impl Runtime {
    fn new(cfg: Config) -> Result<Runtime, RuntimeError> {
        if farmem_sys::page_size() != PAGE_SIZE {
            return Err(RuntimeError::PageSize(farmem_sys::page_size()));
        }
        let arena_bytes = farmem_sys::usize_from(cfg.arena_bytes);
        let npages = arena_bytes / PAGE_SIZE;
        let map_err = |bytes: usize| {
            move |source| RuntimeError::Map {
                size: config::format_size(bytes as u64),
                source,
            }
        };
        let arena = Mapping::anonymous(arena_bytes, true).map_err(map_err(arena_bytes))?;
        // SAFETY: the arena is ours; THP would make the kernel fill 2 MiB at once
        // outside userfaultfd's page-sized protocol.
        let _ =
            unsafe { farmem_sys::mem::madvise(arena.as_ptr(), arena_bytes, libc::MADV_NOHUGEPAGE) };
        let table_bytes = (npages * 4).next_multiple_of(PAGE_SIZE);
        let table = PageTable::new(npages).map_err(map_err(2 * table_bytes))?;
        let sums = Sums::new(npages, cfg.checksum, cfg.integrity).map_err(map_err(table_bytes))?;
        let features = farmem_sys::uffd::UFFD_FEATURE_SIGBUS
            | farmem_sys::uffd::UFFD_FEATURE_PAGEFAULT_FLAG_WP;
        // Pages are recycled where the kernel can move them (Linux 6.8).
        let uffd = match cfg.recycle {
            true => Uffd::new(features | farmem_sys::uffd::UFFD_FEATURE_MOVE)
                .or_else(|_| Uffd::new(features)),
            false => Uffd::new(features),
        }
        .map_err(RuntimeError::Uffd)?;
        let mode = farmem_sys::uffd::UFFDIO_REGISTER_MODE_MISSING
            | farmem_sys::uffd::UFFDIO_REGISTER_MODE_WP;
        uffd.register(arena.as_ptr() as usize, arena_bytes, mode)
            .map_err(RuntimeError::Uffd)?;
        let opened = backend::open(cfg, npages as u64)?;
        let (backend, cfg, server) = (opened.backend, opened.cfg, opened.server);
        let total = (farmem_sys::usize_from(cfg.local_bytes) / PAGE_SIZE).max(MAX_BATCH * 4);
        // The bin of recycled pages is taken from the budget (at most 1/64
        // of it), first: the trace's budget is what the queues and the hold
        // share.
        let bin = if uffd.features() & farmem_sys::uffd::UFFD_FEATURE_MOVE != 0 {
            let chunks = recycle::chunks_for(total);
            // Pages are installed and evicted the old way without it.
            recycle::Bin::new(&uffd, chunks, mode).unwrap_or_else(|e| {
                farmem_sys::write_stderr(
                    format!(
                        "farmem: warning: cannot set up the bin of recycled pages ({e}); \
                         pages are copied in and unmapped instead (FARMEM_RECYCLE=0 silences this)\n"
                    )
                    .as_bytes(),
                );
                None
            })
        } else {
            None
        };
        let total_paged = total - bin.as_ref().map_or(0, recycle::Bin::pages);
        // So is the hold, leaving the queues at least four batches.
        let hold_slots =
            (total_paged * cfg.hold_percent as usize / 100).min(total_paged - MAX_BATCH * 4);
        let budget = total_paged - hold_slots;
        let spare = (cfg.reserve_pages as usize).min(budget / 16);
        let round = config::eviction_round(cfg.evict_batch, budget);
        let hold = hold::Hold::new(hold_slots).map_err(map_err(hold_slots * PAGE_SIZE))?;
        let slots = Slots::new().map_err(map_err(Slots::bytes()))?;
        backend.register_slots(slots.base(), Slots::bytes());
        let zero = Mapping::anonymous(MAX_BATCH * PAGE_SIZE, false)
            .map_err(map_err(MAX_BATCH * PAGE_SIZE))?;
        let tracer = match &cfg.trace {
            Some(path) => Some(
                trace::Tracer::create(
                    &trace::path_for(path, std::process::id()),
                    trace::Header {
                        budget_pages: total_paged as u64,
                        prefetch_pages: cfg.prefetch_pages,
                        hold_percent: cfg.hold_percent,
                        arena_pages: npages as u64,
                        evict_batch: u32::try_from(round).unwrap_or(u32::MAX),
                        reserve_pages: u32::try_from(spare).unwrap_or(u32::MAX),
                        releases: true,
                    },
                )
                .map_err(|e| RuntimeError::Trace(path.clone(), e))?,
            ),
            None => None,
        };
        // Last: nothing after it fails, so no file is left behind by a
        // runtime that did not start.
        let (replicas, servers) = backend.servers();
        let board = publish::Board::create(&publish::Info {
            budget_bytes: (total * PAGE_SIZE) as u64,
            transport: backend.transport(),
            backend: &describe_backend(server.as_ref(), backend.as_ref()),
            replicas,
            servers,
        });
        backend.publish(&board.page().health);
        Ok(Runtime {
            arena: arena::Arena::new(uffd, arena, table, sums, zero),
            bin,
            budget: budget::Budget::new(
                budget,
                spare,
                round,
                &board.page().resident,
                Queues::new(budget, 4 * MAX_BATCH, npages),
                hold,
            ),
            streams: streams::Streams::new(slots, Planner::new(cfg.prefetch_pages as usize)),
            observe: observe::Observe::new(&board.page().stats, board, tracer),
            backend,
            regions: Mutex::new(Regions::default()),
            altered: remap::AlteredSet::default(),
            server,
            cfg,
        })
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Where pages go: for messages.
    pub fn backend_description(&self) -> String {
        describe_backend(self.server.as_ref(), self.backend.as_ref())
    }

    /// Whether evicted pages are being recycled (see the `recycle` module): the
    /// kernel moves pages, `FARMEM_RECYCLE` is on, the budget leaves room for
    /// the bin, and no move was refused for good.
    pub fn recycles(&self) -> bool {
        self.bin.as_ref().is_some_and(recycle::Bin::is_on)
    }

    /// The local budget: resident pages and the hold together.
    pub fn budget_bytes(&self) -> u64 {
        let bin = self.bin.as_ref().map_or(0, recycle::Bin::pages);
        ((self.budget.pages() + self.budget.hold().slots() + bin) * PAGE_SIZE) as u64
    }

    /// The statistics table, and the backend's health where it has any
    /// (servers lost under replication).
    pub fn stats_text(&self) -> String {
        let mut t = self.snapshot().render();
        t.push_str(&format!(
            "  backend                        {}\n",
            self.backend.describe()
        ));
        t.push_str(&format!(
            "  transport                      {}\n",
            self.backend.transport()
        ));
        if let Some(h) = self.backend.health() {
            t.push_str(&h);
        }
        t
    }

    pub fn snapshot(&self) -> Snapshot {
        let policy = {
            let _block = farmem_sys::signal::SignalBlock::new();
            let q = self.budget.queues();
            (q.promoted, q.displaced, q.gathered, q.kept_dirty)
        };
        let held = self.budget.hold().slots() - self.budget.hold().free_slots();
        self.observe.stats().snapshot(
            ((self.budget.resident() + held) * PAGE_SIZE) as u64,
            self.budget_bytes(),
            policy,
        )
    }

    /// Check the replacement queues against the page table: every resident
    /// page has exactly one entry, every other entry belongs to a page
    /// marked STALE, each STALE page has one, and the STALE count is right.
    /// For tests, with no fault in flight; `Err` says what is wrong.
    #[doc(hidden)]
    pub fn check_queues(&self) -> Result<(), String> {
        let _block = farmem_sys::signal::SignalBlock::new();
        let q = self.budget.queues();
        let mut seen = std::collections::HashMap::new();
        q.for_each(|p| *seen.entry(p as usize).or_insert(0usize) += 1);
        let mut stale = 0;
        for p in 0..self.arena.npages() {
            let w = self.arena.table().load(p);
            let n = seen.get(&p).copied().unwrap_or(0);
            stale += usize::from(w.has(page::STALE));
            let want = usize::from(w.state().is_resident() || w.has(page::STALE));
            if n != want {
                return Err(format!(
                    "page {p} ({w:?}, {:?}) has {n} queue entries",
                    w.state()
                ));
            }
        }
        if stale != self.budget.stale() {
            return Err(format!(
                "{stale} pages marked STALE, counted {}",
                self.budget.stale()
            ));
        }
        Ok(())
    }

    pub fn reset_latency(&self) {
        self.observe.stats().fault_ns.reset();
    }

    /// Whether `addr` lies in far memory.
    pub fn contains(&self, addr: usize) -> bool {
        self.arena.contains(addr)
    }

    /// The arena's address range `[start, end)`: all far memory lies in it.
    pub fn arena_range(&self) -> (usize, usize) {
        (self.arena.base(), self.arena.base() + self.arena.len())
    }

    /// Whether `[addr, addr+len)` overlaps far memory.
    pub fn overlaps(&self, addr: usize, len: usize) -> bool {
        let end = addr.saturating_add(len);
        len > 0 && addr < self.arena.base() + self.arena.len() && end > self.arena.base()
    }
}

fn describe_backend(server: Option<&farmem_wire::ServerAddr>, backend: &dyn Backend) -> String {
    match server {
        Some(a) => format!("embedded memory server on {a}"),
        None => backend.describe(),
    }
}

/// `farmem stat` sees the program end: its board is marked and removed.
extern "C" fn end_board_at_exit() {
    if let Some(rt) = get() {
        rt.observe.board().end();
    }
}

extern "C" fn flush_trace_at_exit() {
    if let Some(t) = get().and_then(|rt| rt.observe.tracer()) {
        t.flush();
    }
}

impl Runtime {
    pub(crate) fn addr_of(&self, p: usize) -> usize {
        self.arena.base() + p * PAGE_SIZE
    }

    /// Stop the program: page `page` could not be moved (`what`: fetch,
    /// write back...), and going on would give it wrong data.
    pub(crate) fn fatal_backend(&self, what: &str, page: usize, e: &BackendError) -> ! {
        let mut m = MsgBuf::new();
        let _ = write!(
            m,
            "farmem: cannot {what} far page at {:#x} ({}): {e}\nfarmem: stopping the program: continuing would give it wrong data.\n",
            self.addr_of(page),
            self.backend.holder(page as u64),
        );
        farmem_sys::fatal(m.as_bytes())
    }

    /// Append a record to the policy trace, if one is kept.
    #[inline]
    pub(crate) fn trace(&self, kind: trace::Kind, page: usize, detail: u8) {
        if let Some(t) = &self.observe.tracer() {
            t.record(kind, page, detail);
        }
    }

    /// [`Runtime::trace`] for a fault at cell `cell` of its page.
    #[inline]
    pub(crate) fn trace_at(&self, kind: trace::Kind, page: usize, detail: u8, cell: u8) {
        if let Some(t) = &self.observe.tracer() {
            t.record_at(kind, page, detail, cell);
        }
    }
}

/// The cell ([`readahead::CELL`] bytes) of its page that address `addr` lies in.
pub(crate) fn cell_of(addr: usize) -> u8 {
    // A page holds 256 cells: the quotient fits, and the fallback is never taken.
    u8::try_from((addr % farmem_sys::PAGE_SIZE) / readahead::CELL).unwrap_or(u8::MAX)
}

/// The runs of a sequence of `n` items: index ranges over which
/// `continues(j)` holds for every `j` after the first (item `j` extends the
/// run of item `j - 1`). One system call per run instead of one per page.
pub(crate) fn runs(
    n: usize,
    continues: impl Fn(usize) -> bool,
) -> impl Iterator<Item = std::ops::Range<usize>> {
    let mut i = 0;
    std::iter::from_fn(move || {
        if i >= n {
            return None;
        }
        let mut j = i + 1;
        while j < n && continues(j) {
            j += 1;
        }
        let r = i..j;
        i = j;
        Some(r)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn runs_split_where_the_sequence_breaks() {
        let v = [3usize, 4, 5, 9, 10, 12];
        let r: Vec<_> = super::runs(v.len(), |j| v[j] == v[j - 1] + 1).collect();
        assert_eq!(r, vec![0..3, 3..5, 5..6]);
        assert_eq!(super::runs(0, |_| true).count(), 0);
        assert_eq!(super::runs(4, |_| true).collect::<Vec<_>>(), vec![0..4]);
    }
}
