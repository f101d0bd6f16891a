//! farmem's far-memory runtime.
//!
//! One process-wide *arena* of virtual address space is registered with a
//! userfaultfd in SIGBUS mode. `alloc` hands out page ranges of it. A page of
//! the arena is either resident (mapped) or lives on a [`backend::Backend`]
//! (memory servers or a file); the page table (`meta`, one `AtomicU32` per page,
//! see [`page`]) says which.
//!
//! The fault path runs in the faulting thread's SIGBUS handler: it claims the
//! page, reserves room in the local budget (evicting the oldest resident pages,
//! writing back only dirty ones), fetches the page plus a prefetch window in
//! one batch, and installs them with `UFFDIO_COPY`. No other thread is woken:
//! on this class of machine a wake-up costs ~100 µs, a whole fault ~5–20 µs.
//!
//! Clean and dirty are told apart by userfaultfd write protection: pages are
//! installed write-protected unless the fault was a write (the x86 error code
//! in the signal frame says so), and the first write to a clean page faults
//! once more to mark it dirty.

pub mod backend;
pub mod config;
pub mod page;
pub mod stats;
mod sync;

use backend::{Backend, BackendError, FileBackend, RemoteBackend};
use config::MAX_BATCH;
pub use config::{Config, ConfigError};
use farmem_server::{Server, ServerConfig, ServerError};
use farmem_sys::mem::Mapping;
use farmem_sys::uffd::{CopyOutcome, Uffd};
use farmem_sys::{now_ns, PAGE_SIZE};
use page::{next, Event, PageWord, State};
use stats::{Snapshot, Stats};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use sync::{Ring, SpinLock};
use thiserror::Error;

const MAXB: usize = MAX_BATCH as usize;
const NSTREAMS: usize = 32;
const MAX_STRIDE: i64 = 64;
const FETCH_SLOTS: usize = 64;
/// The embedded server's threads spin this long for the next request before
/// blocking: a blocked server thread costs the faulting client a ~100 µs
/// wake-up on an idle CPU. The spin yields the CPU to runnable threads.
const EMBEDDED_SERVER_SPIN_NS: u64 = 2_000_000;

#[derive(Debug, Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("userfaultfd is not available: {0} (farmem needs Linux >= 5.7 with userfaultfd write protection, and root or vm.unprivileged_userfaultfd=1)")]
    Uffd(io::Error),
    #[error(
        "cannot reserve {size} of address space for far memory: {source} (lower FARMEM_ARENA)"
    )]
    Map { size: String, source: io::Error },
    #[error("cannot install the SIGBUS handler: {0}")]
    Signal(io::Error),
    #[error("cannot start the embedded memory server: {0}")]
    Server(#[from] ServerError),
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
    cfg: Config,
    uffd: Uffd,
    arena: Mapping,
    base: usize,
    npages: usize,
    meta: Mapping,
    backend: Box<dyn Backend>,
    budget: usize,
    /// Pages resident or reserved for an install in progress. Never exceeds
    /// `budget`: a fault reserves before it installs (see `reserve`).
    resident: AtomicUsize,
    pinned: AtomicUsize,
    /// Resident pages, oldest first. Holds exactly the pages whose state is
    /// Clean, MakingDirty or Dirty (so its length never exceeds `budget`).
    ring: SpinLock<Ring>,
    regions: Mutex<Regions>,
    slots: Slots,
    /// Access streams for prefetch: see `plan_prefetch`.
    streams: [AtomicU64; NSTREAMS],
    stream_victim: AtomicUsize,
    zero: Mapping,
    stats: Stats,
    /// Address of the embedded server process, when farmem started one.
    server: Option<String>,
}

#[derive(Default)]
struct Regions {
    /// Free page ranges below `top`: start -> length.
    free: BTreeMap<usize, usize>,
    /// Live allocations: start page -> pages.
    live: HashMap<usize, usize>,
    top: usize,
}

/// Page-sized fetch buffers, one per thread fetching at a time.
struct Slots {
    map: Mapping,
    busy: Vec<AtomicBool>,
}

impl Slots {
    fn acquire(&self) -> usize {
        let start = farmem_sys::gettid() as usize;
        loop {
            for i in 0..self.busy.len() {
                let k = (start + i) % self.busy.len();
                if self.busy[k]
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return k;
                }
            }
            farmem_sys::sched_yield();
        }
    }

    /// Start of slot i's buffer of MAXB pages.
    fn buf(&self, i: usize) -> *mut u8 {
        self.map.as_ptr().wrapping_add(i * MAXB * PAGE_SIZE)
    }

    fn release(&self, i: usize) {
        self.busy[i].store(false, Ordering::Release);
    }
}

static RUNTIME: AtomicPtr<Runtime> = AtomicPtr::new(std::ptr::null_mut());
static INIT: Mutex<()> = Mutex::new(());
static PREV_SIGBUS: OnceLock<libc::sigaction> = OnceLock::new();
static FORKED: AtomicBool = AtomicBool::new(false);

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
    let old = farmem_sys::signal::install(libc::SIGBUS, on_sigbus).map_err(RuntimeError::Signal)?;
    let _ = PREV_SIGBUS.set(old);
    // SAFETY: registering plain extern "C" callbacks.
    unsafe { libc::pthread_atfork(None, None, Some(after_fork_child)) };
    if rt.cfg.stats_at_exit {
        // SAFETY: registering a plain extern "C" callback.
        unsafe { libc::atexit(print_stats_at_exit) };
    }
    Ok(rt)
}

extern "C" fn print_stats_at_exit() {
    if let Some(rt) = get() {
        farmem_sys::write_stderr(rt.snapshot().render().as_bytes());
    }
}

/// In a forked child the userfaultfd is gone: missing pages would silently
/// read as zero. Make the whole arena inaccessible instead, so the child stops
/// with a clear message if it touches far memory.
extern "C" fn after_fork_child() {
    FORKED.store(true, Ordering::Release);
    if let Some(rt) = get() {
        // SAFETY: the arena is ours; nothing in the child may use it any more.
        let _ = unsafe {
            farmem_sys::mem::mprotect(rt.arena.as_ptr(), rt.arena.len(), libc::PROT_NONE)
        };
        let _ = farmem_sys::signal::install(libc::SIGSEGV, on_sigsegv_child);
    }
}

/// True in a child created by fork() after init.
pub fn is_forked_child() -> bool {
    FORKED.load(Ordering::Acquire)
}

extern "C" fn on_sigsegv_child(
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    _ctx: *mut libc::c_void,
) {
    // SAFETY: called by the kernel as an SA_SIGINFO fault handler.
    let addr = unsafe { farmem_sys::signal::fault_addr(info) };
    if let Some(rt) = get() {
        if rt.arena.contains(addr) {
            let mut m = MsgBuf::new();
            let _ = writeln!(
                m,
                "farmem: process {} (a fork() child) touched far memory at {addr:#x}; far memory stays with the parent. \
                 Use threads, or exec a new program in the child.",
                std::process::id()
            );
            farmem_sys::fatal(m.as_bytes());
        }
    }
    farmem_sys::signal::set_default(sig);
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: errno is thread-local; the handler must leave it as it found it.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: called by the kernel as an SA_SIGINFO fault handler.
    let addr = unsafe { farmem_sys::signal::fault_addr(info) };
    match get() {
        Some(rt) if rt.arena.contains(addr) => {
            // SAFETY: ctx is the handler's ucontext.
            let write = unsafe { farmem_sys::signal::fault_is_write(ctx) };
            rt.handle_fault(addr, write);
        }
        _ => chain_sigbus(sig, info, ctx),
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// A SIGBUS that is not ours: hand it to the previous handler, or let the
/// default action (core dump) happen when the access is retried.
fn chain_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Some(prev) = PREV_SIGBUS.get() else {
        farmem_sys::signal::set_default(sig);
        return;
    };
    let h = prev.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        farmem_sys::signal::set_default(sig);
    } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed as an SA_SIGINFO handler.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(h) };
        f(sig, info, ctx);
    } else {
        // SAFETY: the previous handler was installed as a plain handler.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}

/// A message buffer for the signal handler: formatting without allocating.
struct MsgBuf {
    buf: [u8; 768],
    len: usize,
}

impl MsgBuf {
    fn new() -> MsgBuf {
        MsgBuf {
            buf: [0; 768],
            len: 0,
        }
    }
    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl std::fmt::Write for MsgBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// Pinned pages for a system call on a far buffer; unpinned on drop.
pub struct IoPin {
    rt: &'static Runtime,
    first: usize,
    last: usize,
}

impl Drop for IoPin {
    fn drop(&mut self) {
        for p in self.first..=self.last {
            self.rt.unpin(p);
        }
    }
}

impl Runtime {
    fn new(cfg: Config) -> Result<Runtime, RuntimeError> {
        if farmem_sys::page_size() != PAGE_SIZE {
            return Err(RuntimeError::Uffd(io::Error::other(
                "farmem needs 4 KiB base pages",
            )));
        }
        let arena_bytes = cfg.arena_bytes as usize;
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
        let meta_bytes = (npages * 4).next_multiple_of(PAGE_SIZE);
        let meta = Mapping::anonymous(meta_bytes, true).map_err(map_err(meta_bytes))?;
        let uffd = Uffd::new(
            farmem_sys::uffd::UFFD_FEATURE_SIGBUS
                | farmem_sys::uffd::UFFD_FEATURE_PAGEFAULT_FLAG_WP,
        )
        .map_err(RuntimeError::Uffd)?;
        uffd.register(
            arena.as_ptr() as usize,
            arena_bytes,
            farmem_sys::uffd::UFFDIO_REGISTER_MODE_MISSING
                | farmem_sys::uffd::UFFDIO_REGISTER_MODE_WP,
        )
        .map_err(RuntimeError::Uffd)?;
        let mut server = None;
        let backend: Box<dyn Backend> = if let Some(path) = &cfg.file {
            Box::new(FileBackend::open(path, cfg.file_direct)?)
        } else {
            let servers = if cfg.servers.is_empty() {
                // The embedded default: a real memory server on loopback, in a
                // child process of its own (see `spawn_embedded_server`).
                let addr = spawn_embedded_server(cfg.embedded_capacity)?;
                server = Some(addr.clone());
                vec![addr]
            } else {
                cfg.servers.clone()
            };
            Box::new(RemoteBackend::connect(&cfg, &servers, npages as u64)?)
        };
        let budget = (cfg.local_bytes as usize / PAGE_SIZE).max(MAXB * 4);
        let slots_bytes = FETCH_SLOTS * MAXB * PAGE_SIZE;
        let slots = Slots {
            map: Mapping::anonymous(slots_bytes, true).map_err(map_err(slots_bytes))?,
            busy: (0..FETCH_SLOTS).map(|_| AtomicBool::new(false)).collect(),
        };
        let zero =
            Mapping::anonymous(MAXB * PAGE_SIZE, false).map_err(map_err(MAXB * PAGE_SIZE))?;
        Ok(Runtime {
            base: arena.as_ptr() as usize,
            npages,
            arena,
            meta,
            uffd,
            backend,
            budget,
            resident: AtomicUsize::new(0),
            pinned: AtomicUsize::new(0),
            ring: SpinLock::new(Ring::with_capacity(budget)),
            regions: Mutex::new(Regions::default()),
            slots,
            streams: [const { AtomicU64::new(0) }; NSTREAMS],
            stream_victim: AtomicUsize::new(0),
            zero,
            stats: Stats::default(),
            server,
            cfg,
        })
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Where pages go: for messages.
    pub fn backend_description(&self) -> String {
        match &self.server {
            Some(a) => format!("embedded memory server on {a}"),
            None => self.backend.describe(),
        }
    }

    pub fn budget_bytes(&self) -> u64 {
        (self.budget * PAGE_SIZE) as u64
    }

    pub fn snapshot(&self) -> Snapshot {
        self.stats.snapshot(
            (self.resident.load(Ordering::Relaxed) * PAGE_SIZE) as u64,
            self.budget_bytes(),
        )
    }

    pub fn reset_latency(&self) {
        self.stats.fault_ns.reset();
    }

    /// Whether `addr` lies in far memory.
    pub fn contains(&self, addr: usize) -> bool {
        self.arena.contains(addr)
    }

    /// The arena's address range `[start, end)`: all far memory lies in it.
    pub fn arena_range(&self) -> (usize, usize) {
        (self.base, self.base + self.arena.len())
    }

    /// Whether `[addr, addr+len)` overlaps far memory.
    pub fn overlaps(&self, addr: usize, len: usize) -> bool {
        let end = addr.saturating_add(len);
        len > 0 && addr < self.base + self.arena.len() && end > self.base
    }

    fn word(&self, p: usize) -> &AtomicU32 {
        debug_assert!(p < self.npages);
        // SAFETY: p < npages and meta holds npages aligned u32 words for the
        // runtime's whole (static) life; AtomicU32 has u32's layout.
        unsafe { &*self.meta.as_ptr().cast::<AtomicU32>().add(p) }
    }

    fn load(&self, p: usize) -> PageWord {
        PageWord(self.word(p).load(Ordering::Acquire))
    }

    fn cas(&self, p: usize, old: PageWord, new: PageWord) -> bool {
        self.word(p)
            .compare_exchange(old.0, new.0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Apply `ev` atomically (retrying over concurrent pin changes); returns
    /// the word before the change.
    fn transition(&self, p: usize, ev: Event) -> Result<PageWord, page::BadTransition> {
        let mut w = self.load(p);
        loop {
            let n = next(w, ev)?;
            match self
                .word(p)
                .compare_exchange_weak(w.0, n.0, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(w),
                Err(cur) => w = PageWord(cur),
            }
        }
    }

    /// A transition the caller owns and that cannot fail unless an invariant
    /// is broken; stop rather than continue with a corrupt page table.
    fn must(&self, p: usize, ev: Event) {
        if let Err(e) = self.transition(p, ev) {
            let mut m = MsgBuf::new();
            let _ = writeln!(m, "farmem: internal error on far page {p}: {e}");
            farmem_sys::fatal(m.as_bytes());
        }
    }

    fn addr_of(&self, p: usize) -> usize {
        self.base + p * PAGE_SIZE
    }

    fn fatal_backend(&self, what: &str, page: usize, e: &BackendError) -> ! {
        let mut m = MsgBuf::new();
        let _ = write!(
            m,
            "farmem: cannot {what} far page at {:#x} ({}): {e}\nfarmem: stopping the program: continuing would give it wrong data.\n",
            self.addr_of(page),
            self.backend.holder(page as u64),
        );
        farmem_sys::fatal(m.as_bytes())
    }

    // ---------------------------------------------------------------- faults

    /// Resolve a fault at `addr` in the calling thread.
    ///
    /// Hazard: a page is only ever changed by the thread that moved it into an
    /// owned state (Fetching, MakingDirty, Evicting). Example interleaving
    /// without that rule: thread A takes a write fault on a Clean page and is
    /// about to clear write protection; thread B evicts the page (it is clean,
    /// so it is simply zapped) and thread C faults it back in, write-protected.
    /// A's late "clear write protection" would now make C's fresh page writable
    /// while it is marked Clean: its next write would never be written back.
    /// With MakingDirty, B cannot start evicting until A has finished.
    fn handle_fault(&self, addr: usize, write: bool) {
        let p = (addr - self.base) / PAGE_SIZE;
        let t0 = now_ns();
        let mut waits = 0u32;
        loop {
            let w = self.load(p);
            if !w.has(page::ALLOCATED) {
                let mut m = MsgBuf::new();
                let _ = writeln!(
                    m,
                    "farmem: access to far memory at {addr:#x}, which is not allocated (use after fm_free, or out of bounds)"
                );
                farmem_sys::fatal(m.as_bytes());
            }
            match w.state() {
                State::Absent => {
                    if let Ok(n) = next(w, Event::Claim { prefetch: false }) {
                        if self.cas(p, w, n) {
                            self.fetch(p, write);
                            self.stats.faults.fetch_add(1, Ordering::Relaxed);
                            self.stats.fault_ns.record(now_ns() - t0);
                            return;
                        }
                    }
                }
                State::Clean if write => {
                    if let Ok(n) = next(w, Event::WriteFault) {
                        if self.cas(p, w, n) {
                            if w.has(page::PREFETCHED) {
                                self.stats.prefetch_used.fetch_add(1, Ordering::Relaxed);
                            }
                            if let Err(e) =
                                self.uffd.write_protect(self.addr_of(p), PAGE_SIZE, false)
                            {
                                let mut m = MsgBuf::new();
                                let _ = writeln!(
                                    m,
                                    "farmem: cannot make far page {addr:#x} writable: {e}"
                                );
                                farmem_sys::fatal(m.as_bytes());
                            }
                            self.must(p, Event::MadeDirty);
                            self.stats.wp_faults.fetch_add(1, Ordering::Relaxed);
                            return;
                        }
                    }
                }
                // Resolved by another thread meanwhile: retry the access.
                State::Clean | State::Dirty => {
                    self.stats.spurious.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                // Another thread owns the page: wait for it.
                State::Fetching | State::MakingDirty | State::Evicting => wait(&mut waits),
            }
        }
    }

    /// Plan the prefetch window for a demand fault at `p`: returns the stride
    /// and how many pages (the demand page included) to fetch, and remembers the
    /// stream. A stream is confirmed when a fault lands at most MAX_STRIDE pages
    /// from a recent one; each fault at the page just past the previous window
    /// doubles the window up to FARMEM_PREFETCH.
    fn plan_prefetch(&self, p: usize, w: PageWord) -> (i64, usize, Option<(usize, u64)>) {
        let maxw = self.cfg.prefetch_pages as usize;
        if maxw <= 1 || w.has(page::ADV_RANDOM) {
            return (1, 1, None);
        }
        if w.has(page::ADV_SEQUENTIAL) {
            return (1, maxw, None);
        }
        let p64 = p as i64;
        for (i, s) in self.streams.iter().enumerate() {
            let e = s.load(Ordering::Relaxed);
            if e == 0 {
                continue;
            }
            let (pos, win, stride) = decode_stream(e);
            if win == 0 {
                let d = p64 - pos;
                if d != 0 && d.abs() <= MAX_STRIDE {
                    return (d, 4.min(maxw), Some((i, e)));
                }
            } else if p64 == pos {
                // The stream ran past its window: the prefetched pages were used.
                for k in 1..win as i64 {
                    let q = pos - stride * k;
                    if q >= 0
                        && (q as usize) < self.npages
                        && self.transition(q as usize, Event::PrefetchUsed).is_ok()
                    {
                        self.stats.prefetch_used.fetch_add(1, Ordering::Relaxed);
                    }
                }
                return (stride, (win as usize * 2).clamp(2, maxw), Some((i, e)));
            }
        }
        let v = self.stream_victim.fetch_add(1, Ordering::Relaxed) % NSTREAMS;
        self.streams[v].store(encode_stream(p64, 0, 0), Ordering::Relaxed);
        (1, 1, None)
    }

    /// Fetch and install demand page `p` (already Fetching, owned by us) and
    /// whatever of its prefetch window can be claimed.
    fn fetch(&self, p: usize, write: bool) {
        let mut batch = [0usize; MAXB];
        batch[0] = p;
        let mut n = 1;
        let (stride, want, stream) = self.plan_prefetch(p, self.load(p));
        for k in 1..want as i64 {
            let q = p as i64 + stride * k;
            if q < 0 || q as usize >= self.npages {
                break;
            }
            let q = q as usize;
            let w = self.load(q);
            let claimed = w.state() == State::Absent
                && !w.has(page::ADV_RANDOM)
                && next(w, Event::Claim { prefetch: true }).is_ok_and(|nw| self.cas(q, w, nw));
            if !claimed {
                break;
            }
            batch[n] = q;
            n += 1;
        }
        if let Some((i, e)) = stream {
            let _ = self.streams[i].compare_exchange(
                e,
                encode_stream(p as i64 + stride * n as i64, n as u64, stride),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        if stride < 0 {
            // Ascending order lets the pages be fetched and installed in runs.
            batch[1..n].reverse();
        }
        self.reserve(n);

        // Fetch the pages the backend holds, in one batch, into a slot buffer.
        let slot = self.slots.acquire();
        // SAFETY: slot `slot` owns its MAXB pages of the slot mapping
        // exclusively while this thread holds its busy flag (until release).
        let buf = unsafe { std::slice::from_raw_parts_mut(self.slots.buf(slot), MAXB * PAGE_SIZE) };
        let mut remote = [0u64; MAXB];
        let mut src_index = [usize::MAX; MAXB];
        let mut r = 0;
        for i in 0..n {
            if self.load(batch[i]).has(page::ON_SERVER) {
                remote[r] = batch[i] as u64;
                src_index[i] = r;
                r += 1;
            }
        }
        if r > 0 {
            if let Err(e) = self.backend.read(&remote[..r], &mut buf[..r * PAGE_SIZE]) {
                self.fatal_backend("fetch", p, &e);
            }
        }

        // Install: the demand page writable if the fault was a write, every
        // other page write-protected (clean). Consecutive pages with the same
        // source kind go in one UFFDIO_COPY.
        let src_of = |i: usize| -> *const u8 {
            match src_index[i] {
                usize::MAX => self.zero.as_ptr(),
                j => buf[j * PAGE_SIZE..].as_ptr(),
            }
        };
        // A write fault starts (or continues) a write stream: its prefetched
        // pages are installed writable and dirty too, sparing each one a
        // write-protect fault (a sequential writer would take one per page).
        // The cost, when they are not written after all, is a write-back.
        let wp_of = |_: usize| !write;
        let mut i = 0;
        while i < n {
            let mut j = i + 1;
            while j < n
                && j - i < MAXB
                && batch[j] == batch[j - 1] + 1
                && wp_of(j) == wp_of(i)
                && (src_index[j] == usize::MAX) == (src_index[i] == usize::MAX)
                && (src_index[i] == usize::MAX || src_index[j] == src_index[j - 1] + 1)
            {
                j += 1;
            }
            let src = if src_index[i] == usize::MAX {
                self.zero.as_ptr()
            } else {
                src_of(i)
            };
            // SAFETY: src is a slot buffer or the zero mapping, readable for
            // (j-i) pages; the destination pages are in the registered arena and
            // owned by this thread (Fetching).
            let res = unsafe {
                self.uffd
                    .copy(self.addr_of(batch[i]), src, (j - i) * PAGE_SIZE, wp_of(i))
            };
            match res {
                Ok(CopyOutcome::Done) => {}
                Ok(CopyOutcome::Exists { .. }) | Err(_) => {
                    let mut m = MsgBuf::new();
                    let _ = writeln!(
                        m,
                        "farmem: cannot install far page {:#x}: {:?}",
                        self.addr_of(batch[i]),
                        res
                    );
                    farmem_sys::fatal(m.as_bytes());
                }
            }
            i = j;
        }
        self.slots.release(slot);

        let zero_filled = n - r;
        for &q in &batch[..n] {
            self.must(q, Event::Installed { dirty: write });
        }
        {
            let mut ring = self.ring.lock();
            for &q in &batch[..n] {
                if !ring.push(q as u32) {
                    drop(ring);
                    farmem_sys::fatal(b"farmem: internal error: resident-page ring overflow\n");
                }
            }
        }
        self.stats
            .pages_fetched
            .fetch_add(r as u64, Ordering::Relaxed);
        self.stats
            .pages_zero_filled
            .fetch_add(zero_filled as u64, Ordering::Relaxed);
        self.stats
            .prefetched
            .fetch_add(n as u64 - 1, Ordering::Relaxed);
    }

    /// Reserve room for `n` pages in the local budget, evicting as needed.
    fn reserve(&self, n: usize) {
        let start = now_ns();
        let mut waits = 0u32;
        loop {
            let r = self.resident.load(Ordering::Acquire);
            if r + n <= self.budget {
                if self
                    .resident
                    .compare_exchange_weak(r, r + n, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return;
                }
                continue;
            }
            let want = n.max(self.cfg.evict_batch as usize).min(MAXB);
            if self.evict_oldest(want) == 0 {
                wait(&mut waits);
                if now_ns() - start > self.cfg.timeout_ms * 1_000_000 {
                    let mut m = MsgBuf::new();
                    let _ = writeln!(
                        m,
                        "farmem: no room in the local budget ({} pages): all resident far pages are pinned or in use. \
                         Raise FARMEM_LOCAL or pin less.",
                        self.budget
                    );
                    farmem_sys::fatal(m.as_bytes());
                }
            }
        }
    }

    /// Evict up to `k` of the oldest resident, unpinned pages. Returns how many.
    fn evict_oldest(&self, k: usize) -> usize {
        let mut victims = [0usize; MAXB];
        let mut was = [PageWord(0); MAXB];
        let mut n = 0;
        {
            let mut ring = self.ring.lock();
            let len = ring.len();
            let mut examined = 0;
            while n < k && examined < len {
                let Some(q) = ring.pop() else { break };
                examined += 1;
                let q = q as usize;
                let w = self.load(q);
                if !w.state().is_resident() {
                    // Not resident: the ring's invariant says this cannot be.
                    continue;
                }
                if w.state() == State::Clean && self.transition(q, Event::SecondChance).is_ok() {
                    ring.push(q as u32);
                    continue;
                }
                match next(w, Event::EvictStart) {
                    Ok(nw) if self.cas(q, w, nw) => {
                        victims[n] = q;
                        was[n] = w;
                        n += 1;
                    }
                    // Pinned, being made dirty, or changed just now: keep it.
                    _ => {
                        ring.push(q as u32);
                    }
                }
            }
        }
        if n > 0 {
            self.finish_eviction(&victims[..n], &was[..n]);
        }
        n
    }

    /// Write back the dirty victims, unmap all of them, and mark them Absent.
    /// The victims are Evicting (owned by this thread) and out of the ring.
    fn finish_eviction(&self, victims: &[usize], was: &[PageWord]) {
        let mut wb_pages = [0u64; MAXB];
        let mut wb_data: [&[u8]; MAXB] = [&[]; MAXB];
        let mut m = 0;
        for (i, &q) in victims.iter().enumerate() {
            if page::needs_writeback(was[i].state()) {
                wb_pages[m] = q as u64;
                m += 1;
            }
        }
        // Write-protect the dirty victims first (one ioctl per run of
        // consecutive pages: each ioctl flushes TLBs on every CPU), so that no
        // write can slip in between the copy we send and the unmap; writers
        // now fault and wait for the eviction to finish.
        let mut i = 0;
        while i < m {
            let mut j = i + 1;
            while j < m && wb_pages[j] == wb_pages[j - 1] + 1 {
                j += 1;
            }
            if let Err(e) = self.uffd.write_protect(
                self.addr_of(wb_pages[i] as usize),
                (j - i) * PAGE_SIZE,
                true,
            ) {
                let mut mb = MsgBuf::new();
                let _ = writeln!(
                    mb,
                    "farmem: cannot write-protect far pages for eviction: {e}"
                );
                farmem_sys::fatal(mb.as_bytes());
            }
            i = j;
        }
        for (k, &q) in wb_pages[..m].iter().enumerate() {
            // SAFETY: the page is mapped (Evicting pages stay mapped until the
            // zap below) and write-protected, so nothing changes it while the
            // slice lives.
            wb_data[k] = unsafe {
                std::slice::from_raw_parts(self.addr_of(q as usize) as *const u8, PAGE_SIZE)
            };
        }
        if m > 0 {
            if let Err(e) = self.backend.write(&wb_pages[..m], &wb_data[..m]) {
                self.fatal_backend("write back", wb_pages[0] as usize, &e);
            }
        }
        // Zap consecutive runs with one madvise each.
        let mut sorted = [0usize; MAXB];
        sorted[..victims.len()].copy_from_slice(victims);
        sorted[..victims.len()].sort_unstable();
        let mut i = 0;
        while i < victims.len() {
            let mut j = i + 1;
            while j < victims.len() && sorted[j] == sorted[j - 1] + 1 {
                j += 1;
            }
            // SAFETY: these pages are owned by this eviction; readers that touch
            // them now fault and wait for the Absent state.
            let r = unsafe {
                farmem_sys::mem::madvise(
                    self.addr_of(sorted[i]) as *mut u8,
                    (j - i) * PAGE_SIZE,
                    libc::MADV_DONTNEED,
                )
            };
            if let Err(e) = r {
                let mut mb = MsgBuf::new();
                let _ = writeln!(mb, "farmem: cannot unmap evicted far pages: {e}");
                farmem_sys::fatal(mb.as_bytes());
            }
            i = j;
        }
        for (i, &q) in victims.iter().enumerate() {
            if was[i].has(page::PREFETCHED) {
                self.stats.prefetch_wasted.fetch_add(1, Ordering::Relaxed);
            }
            self.must(
                q,
                Event::Evicted {
                    written_back: page::needs_writeback(was[i].state()),
                },
            );
        }
        self.resident.fetch_sub(victims.len(), Ordering::AcqRel);
        self.stats
            .evictions
            .fetch_add(victims.len() as u64, Ordering::Relaxed);
        self.stats
            .pages_written_back
            .fetch_add(m as u64, Ordering::Relaxed);
    }

    fn unpin(&self, p: usize) {
        let _ = self.transition(p, Event::Unpin);
    }

    // ------------------------------------------------------- allocation API

    fn check_not_forked(&self) -> Result<(), RuntimeError> {
        if is_forked_child() {
            Err(RuntimeError::Forked)
        } else {
            Ok(())
        }
    }

    /// Allocate `size` bytes of far memory: page-aligned, reading as zero.
    pub fn alloc(&self, size: usize) -> Result<*mut u8, RuntimeError> {
        self.check_not_forked()?;
        if size == 0 {
            return Err(RuntimeError::ZeroSize);
        }
        let pages = size.div_ceil(PAGE_SIZE);
        let start = {
            let mut r = self.regions.lock().unwrap_or_else(|p| p.into_inner());
            let fit = r
                .free
                .iter()
                .find(|(_, &len)| len >= pages)
                .map(|(&s, &l)| (s, l));
            let start = match fit {
                Some((s, l)) => {
                    r.free.remove(&s);
                    if l > pages {
                        r.free.insert(s + pages, l - pages);
                    }
                    s
                }
                None => {
                    if r.top + pages > self.npages {
                        let free: usize = r.free.values().sum::<usize>() + (self.npages - r.top);
                        return Err(RuntimeError::OutOfSpace {
                            want: config::format_size(size as u64),
                            free: config::format_size((free * PAGE_SIZE) as u64),
                            arena: config::format_size(self.cfg.arena_bytes),
                        });
                    }
                    r.top += pages;
                    r.top - pages
                }
            };
            r.live.insert(start, pages);
            start
        };
        for p in start..start + pages {
            self.word(p).fetch_or(page::ALLOCATED, Ordering::AcqRel);
        }
        Ok(self.addr_of(start) as *mut u8)
    }

    /// Size in bytes (whole pages) of the live allocation starting at `ptr`.
    pub fn alloc_size(&self, ptr: *const u8) -> Option<usize> {
        let addr = ptr as usize;
        if !self.contains(addr) {
            return None;
        }
        let start = (addr - self.base) / PAGE_SIZE;
        let r = self.regions.lock().unwrap_or_else(|p| p.into_inner());
        r.live.get(&start).map(|&pages| pages * PAGE_SIZE)
    }

    /// Discard the whole pages of `[addr, addr+len)`, which must lie in one
    /// allocation (a partial `munmap` in the `farmem run` shim): their content
    /// is dropped and any later access stops the program, as for unmapped
    /// memory. The allocation's address range is reclaimed when it is freed.
    pub fn discard(&self, addr: usize, len: usize) -> Result<(), RuntimeError> {
        let (first, last) = self.range_of(addr, len)?;
        let lo = (addr - self.base).div_ceil(PAGE_SIZE).max(first);
        let hi = ((addr + len - self.base) / PAGE_SIZE).min(last + 1);
        if lo < hi && !is_forked_child() {
            self.release_pages(lo, hi - lo);
        }
        Ok(())
    }

    /// Free an allocation made by `alloc`.
    pub fn free(&self, ptr: *mut u8) -> Result<(), RuntimeError> {
        let addr = ptr as usize;
        if !self.contains(addr) || !(addr - self.base).is_multiple_of(PAGE_SIZE) {
            return Err(RuntimeError::InvalidPointer(addr));
        }
        let start = (addr - self.base) / PAGE_SIZE;
        let pages = {
            let r = self.regions.lock().unwrap_or_else(|p| p.into_inner());
            *r.live
                .get(&start)
                .ok_or(RuntimeError::InvalidPointer(addr))?
        };
        if !is_forked_child() {
            self.release_pages(start, pages);
        }
        let mut r = self.regions.lock().unwrap_or_else(|p| p.into_inner());
        r.live.remove(&start);
        // Coalesce with free neighbours; give the top back.
        let mut s = start;
        let mut len = pages;
        if let Some((&ps, &pl)) = r.free.range(..s).next_back() {
            if ps + pl == s {
                r.free.remove(&ps);
                s = ps;
                len += pl;
            }
        }
        if let Some(nl) = r.free.remove(&(s + len)) {
            len += nl;
        }
        if s + len == r.top {
            r.top = s;
        } else {
            r.free.insert(s, len);
        }
        Ok(())
    }

    /// Return pages `[start, start+n)` to the never-allocated state: unmapped,
    /// page-table words zero, backend copies freed.
    fn release_pages(&self, start: usize, n: usize) {
        let _block = farmem_sys::signal::SignalBlock::new();
        let mut resident_freed = 0;
        let mut on_server = false;
        let mut waits = 0u32;
        for p in start..start + n {
            loop {
                let w = self.load(p);
                // Owned by another thread (a prefetch or an eviction): let it finish.
                if w.state().is_owned() {
                    wait(&mut waits);
                    continue;
                }
                if self.cas(p, w, PageWord(0)) {
                    if w.state().is_resident() {
                        resident_freed += 1;
                    }
                    on_server |= w.has(page::ON_SERVER);
                    break;
                }
            }
        }
        // Drop the freed pages from the eviction order before their budget is
        // released, so the ring never holds more entries than the budget.
        self.ring
            .lock()
            .retain(|q| !(start..start + n).contains(&(q as usize)));
        // SAFETY: the range belongs to the allocation being freed; its pages
        // are no longer reachable through the page table.
        let _ = unsafe {
            farmem_sys::mem::madvise(
                self.addr_of(start) as *mut u8,
                n * PAGE_SIZE,
                libc::MADV_DONTNEED,
            )
        };
        self.resident.fetch_sub(resident_freed, Ordering::AcqRel);
        if on_server {
            if let Err(e) = self.backend.free(start as u64, n as u64) {
                // Only capacity on the server is lost; the program's data is fine.
                eprintln!("farmem: warning: could not release far pages on the backend: {e}");
            }
        }
    }

    /// The page range of one live allocation containing `[addr, addr+len)`.
    fn range_of(&self, addr: usize, len: usize) -> Result<(usize, usize), RuntimeError> {
        let bad = RuntimeError::InvalidRange { addr, len };
        if len == 0 || !self.contains(addr) || !self.contains(addr + len - 1) {
            return Err(bad);
        }
        let first = (addr - self.base) / PAGE_SIZE;
        let last = (addr + len - 1 - self.base) / PAGE_SIZE;
        for p in [first, last] {
            if !self.load(p).has(page::ALLOCATED) {
                return Err(bad);
            }
        }
        Ok((first, last))
    }

    /// `fm_advise`.
    pub fn advise(&self, addr: usize, len: usize, advice: Advice) -> Result<(), RuntimeError> {
        self.check_not_forked()?;
        let (first, last) = self.range_of(addr, len)?;
        let set_bits = |set: u32, clear: u32| {
            for p in first..=last {
                let _ = self
                    .word(p)
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                        Some((w & !clear) | set)
                    });
            }
        };
        match advice {
            Advice::Normal => set_bits(0, page::ADVICE_MASK),
            Advice::Sequential => set_bits(page::ADV_SEQUENTIAL, page::ADV_RANDOM),
            Advice::Random => set_bits(page::ADV_RANDOM, page::ADV_SEQUENTIAL),
            Advice::ReadMostly => set_bits(page::ADV_READ_MOSTLY, 0),
            Advice::WillNeed => {
                // Bring in at most half the budget; the rest would only evict it.
                let n = (last - first + 1).min(self.budget / 2);
                for p in first..first + n {
                    if self.load(p).state() == State::Absent {
                        // SAFETY: p is an allocated far page; a read fault
                        // brings it in (with a prefetch window).
                        unsafe { std::ptr::read_volatile(self.addr_of(p) as *const u8) };
                    }
                }
            }
            Advice::DontNeed => self.evict_range(first, last),
            Advice::Pin => {
                let n = last - first + 1;
                let pinned = self.pinned.fetch_add(n, Ordering::AcqRel) + n;
                if pinned > self.budget * 3 / 4 {
                    self.pinned.fetch_sub(n, Ordering::AcqRel);
                    return Err(RuntimeError::PinBudget {
                        want: config::format_size((n * PAGE_SIZE) as u64),
                        budget: config::format_size(self.budget_bytes()),
                    });
                }
                for p in first..=last {
                    while self.transition(p, Event::Pin).is_err() {
                        farmem_sys::sched_yield();
                    }
                    // SAFETY: p is an allocated far page; touching it faults it in.
                    unsafe { std::ptr::read_volatile(self.addr_of(p) as *const u8) };
                }
            }
            Advice::Unpin => {
                if (first..=last).any(|p| self.load(p).pins() == 0) {
                    return Err(RuntimeError::NotPinned);
                }
                for p in first..=last {
                    self.unpin(p);
                }
                self.pinned.fetch_sub(last - first + 1, Ordering::AcqRel);
            }
        }
        Ok(())
    }

    /// Evict every resident, unpinned page of `[first, last]` now.
    fn evict_range(&self, first: usize, last: usize) {
        let _block = farmem_sys::signal::SignalBlock::new();
        // Take every resident page first (they are Evicting, owned by us)...
        let mut victims = Vec::new();
        for p in first..=last {
            let w = self.load(p);
            if w.state().is_resident() {
                if let Ok(nw) = next(w, Event::EvictStart) {
                    if self.cas(p, w, nw) {
                        victims.push((p, w));
                    }
                }
            }
        }
        if victims.is_empty() {
            return;
        }
        // ...drop them from the eviction order in one pass, before any of
        // them can become Absent and be faulted back in (which would push it
        // again and leave two entries for one page)...
        self.ring.lock().retain(|q| {
            let q = q as usize;
            !((first..=last).contains(&q) && self.load(q).state() == State::Evicting)
        });
        // ...then write back and unmap them in batches.
        for chunk in victims.chunks(MAXB) {
            let mut vs = [0usize; MAXB];
            let mut was = [PageWord(0); MAXB];
            for (i, &(p, w)) in chunk.iter().enumerate() {
                vs[i] = p;
                was[i] = w;
            }
            self.finish_eviction(&vs[..chunk.len()], &was[..chunk.len()]);
        }
    }

    /// Make `[addr, addr+len)` safe for a system call: pin its far pages and
    /// fault them in from user mode (for `for_write`, as writes, so they are
    /// writable and marked dirty). In SIGBUS mode the kernel cannot fault far
    /// pages in for a system call; it would fail with EFAULT.
    ///
    /// Returns `None` when the range holds no far memory. The caller keeps
    /// the range under a quarter of the budget (`io_chunk`).
    pub fn pin_for_io(&'static self, addr: usize, len: usize, for_write: bool) -> Option<IoPin> {
        if len == 0 {
            return None;
        }
        let end = addr.checked_add(len)?;
        let lo = addr.max(self.base);
        let hi = end.min(self.base + self.arena.len());
        if lo >= hi {
            return None;
        }
        if is_forked_child() {
            farmem_sys::fatal(b"farmem: a fork() child passed far memory to a system call; far memory stays with the parent\n");
        }
        let first = (lo - self.base) / PAGE_SIZE;
        let last = (hi - 1 - self.base) / PAGE_SIZE;
        let mut pinned_to = first;
        for p in first..=last {
            if self.transition(p, Event::Pin).is_err() {
                break; // unallocated: the kernel will report EFAULT itself
            }
            pinned_to = p + 1;
        }
        for p in first..pinned_to {
            let a = self.addr_of(p).max(lo);
            if for_write {
                // SAFETY: `a` is inside an allocated far page. `lock or 0`
                // is an atomic write that leaves the byte's value unchanged
                // (also against concurrent writers), forcing a write fault.
                unsafe {
                    core::arch::asm!("lock or byte ptr [{0}], 0", in(reg) a, options(nostack))
                };
            } else {
                // SAFETY: `a` is inside an allocated far page.
                unsafe { std::ptr::read_volatile(a as *const u8) };
            }
        }
        self.stats.io_pins.fetch_add(1, Ordering::Relaxed);
        if pinned_to == first {
            return None;
        }
        Some(IoPin {
            rt: self,
            first,
            last: pinned_to - 1,
        })
    }

    /// Largest buffer one system call may pin at once.
    pub fn io_chunk(&self) -> usize {
        (self.budget * PAGE_SIZE / 4).clamp(PAGE_SIZE, 64 << 20)
    }
}

/// Start the embedded memory server as a child process and return its address.
///
/// Why a process and not a thread: threads of the faulting process that spin
/// (as a server thread must, to answer within microseconds) turn every
/// TLB flush of the fault path (`madvise`, write-protect) into an IPI to their
/// CPU. A separate process shares no page tables. The child watches its parent
/// and exits when the parent is gone.
pub fn spawn_embedded_server(capacity: u64) -> Result<String, RuntimeError> {
    use farmem_sys::process::{self, Forked};
    use std::io::{Read, Write};
    let server_err = |e: io::Error| RuntimeError::Server(ServerError::Spawn(e));
    let (rd, wr) = process::pipe().map_err(server_err)?;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the child only binds a socket, starts server threads and
    // allocates (glibc's malloc is fork-safe); it never returns to the caller.
    match unsafe { process::fork() }.map_err(server_err)? {
        Forked::Child => {
            drop(rd);
            process::set_thread_name(c"farmem-server");
            let mut out = std::fs::File::from(wr);
            // An abstract Unix socket: same-machine only, no TCP stack, no file
            // to clean up.
            let name = format!("@farmem-{}-{:x}", parent, farmem_sys::now_ns());
            let mut sc = ServerConfig::new(farmem_server::ListenAddr::Unix(name), capacity);
            sc.spin_ns = EMBEDDED_SERVER_SPIN_NS;
            match Server::bind(sc) {
                Ok(server) => {
                    let _ = writeln!(out, "OK {}", server.local_addr());
                    drop(out);
                    let stop = server.shutdown_flag();
                    std::thread::spawn(move || loop {
                        if process::getppid() != parent {
                            stop.stop();
                            process::exit_now(0);
                        }
                        std::thread::sleep(std::time::Duration::from_millis(100));
                    });
                    let _ = server.run();
                    process::exit_now(0)
                }
                Err(e) => {
                    let _ = writeln!(out, "ERR {e}");
                    process::exit_now(1)
                }
            }
        }
        Forked::Parent(pid) => {
            drop(wr);
            let mut msg = String::new();
            let _ = std::fs::File::from(rd).read_to_string(&mut msg);
            match msg.trim().strip_prefix("OK ") {
                Some(addr) => Ok(addr.to_string()),
                None => {
                    process::try_reap(pid);
                    Err(server_err(io::Error::other(format!(
                        "the embedded server did not start: {}",
                        msg.trim().strip_prefix("ERR ").unwrap_or("no reply")
                    ))))
                }
            }
        }
    }
}

fn wait(waits: &mut u32) {
    *waits += 1;
    if (*waits).is_multiple_of(16) {
        farmem_sys::sched_yield();
    } else {
        for _ in 0..32 {
            farmem_sys::cpu_relax();
        }
    }
}

/// Stream entries: position (39 bits) | valid (1 bit) | window (8 bits) |
/// stride (16 bits). Window 0 means "one fault seen at `position`, no stride
/// yet". The arena has at most 2^38 pages, so positions fit.
fn encode_stream(pos: i64, win: u64, stride: i64) -> u64 {
    ((pos as u64) & POS_MASK)
        | (1 << 39)
        | ((win & 0xFF) << 40)
        | (((stride as i16) as u16 as u64) << 48)
}

const POS_MASK: u64 = (1 << 39) - 1;

fn decode_stream(e: u64) -> (i64, u64, i64) {
    (
        (e & POS_MASK) as i64,
        (e >> 40) & 0xFF,
        ((e >> 48) as u16 as i16) as i64,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_encoding_roundtrips() {
        for (pos, win, stride) in [
            (0i64, 0u64, 0i64),
            (12345, 4, 1),
            (1 << 30, 64, -3),
            (7, 255, 64),
        ] {
            assert_eq!(
                decode_stream(encode_stream(pos, win, stride)),
                (pos, win, stride)
            );
        }
    }
}
