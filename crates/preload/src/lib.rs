//! `libfarmem_preload.so`: the shim `farmem run` preloads into a program.
//!
//! Allocations of at least `FARMEM_THRESHOLD` bytes (malloc, calloc, realloc,
//! posix_memalign, aligned_alloc, memalign, valloc, pvalloc, and private
//! anonymous `mmap`) go to far memory; smaller ones stay with the C library.
//! The system-call wrappers of `libfarmem` come along, so `read`, `write`,
//! `fread`, … work on far buffers.
//!
//! Rules (after bytehound): exports only outside test builds; the C
//! library's allocator reached through its `__libc_*` entry points; the shim's
//! own Rust code allocates through a private global allocator that calls
//! those directly, so it never re-enters the interposed `malloc`; a
//! per-thread re-entry guard; `panic = "abort"` (workspace profile);
//! overflow-checked size arithmetic.
//!
//! Programs that bring their own allocator (jemalloc linked into redis,
//! tcmalloc, mimalloc) keep it: when the next `malloc` after this library is
//! not the C library's, every allocator entry point here forwards to that
//! allocator, so no pointer ever reaches another allocator's function. Its
//! large memory still goes far, through its own `mmap` of big chunks (also
//! when made with `syscall(SYS_mmap, ...)`), and its `madvise` purges drop
//! far pages as they drop anonymous ones.
//!
//! The runtime starts lazily, at the first large allocation, so that programs
//! that never allocate anything large pay one comparison per allocation. With
//! no server and no file configured it starts eagerly in the constructor
//! instead, because starting the embedded server forks, and forking inside
//! `malloc` of a multi-threaded program is not safe.

use farmem_runtime::{self as rt, Config};
use farmem_sys::dl::Next;
use farmem_sys::int_arg;
use libc::{c_int, c_void, off_t, size_t};
use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

mod allocator;
mod foreign;
mod libc_alloc;
mod mmap;

// The interposed entry points stay this library's public API (and, in
// test builds, where they are not exported, are not dead code).
pub use allocator::*;
use foreign::*;
use libc_alloc::*;
pub use mmap::*;

// Keep the system-call wrappers and the C API in this library's exports.
pub use farmem::{dispatch, files, io, net, process, remote, router, signals, sync};
pub use farmem::{fm_advise, fm_alloc, fm_free, fm_stats, fm_stats_print};

/// Allocations at least this large go far; usize::MAX until configured.
static THRESHOLD: AtomicUsize = AtomicUsize::new(usize::MAX);
const UNSTARTED: u8 = 0;
const READY: u8 = 1;
const FAILED: u8 = 2;
static STATE: AtomicU8 = AtomicU8::new(UNSTARTED);
/// The arena's range, once the runtime runs (0..0 before): lets `free`,
/// `realloc` and `malloc_usable_size` tell local pointers in two compares.
static FAR_LO: AtomicUsize = AtomicUsize::new(0);
static FAR_HI: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// Re-entry guard: the shim's own calls (and anything they trigger) take the
/// C library path.
struct Guard;

impl Guard {
    fn enter() -> Option<Guard> {
        BUSY.with(|b| {
            if b.get() {
                None
            } else {
                b.set(true);
                Some(Guard)
            }
        })
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        BUSY.with(|b| b.set(false));
    }
}

fn die(msg: &str) -> ! {
    farmem_sys::write_stderr(format!("farmem: {msg}\n").as_bytes());
    farmem_sys::process::exit_now(70)
}

#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = constructor;

/// The settings, read from the environment once, in the constructor
/// (`farmem run` has checked them already); a deferred start uses them.
static CONFIG: std::sync::OnceLock<Config> = std::sync::OnceLock::new();

extern "C" fn constructor() {
    let Some(_g) = Guard::enter() else { return };
    let _ = glibc();
    let cfg = match Config::from_env() {
        Ok(c) => CONFIG.get_or_init(|| c).clone(),
        Err(e) => die(&format!("{e} (in the farmem run shim)")),
    };
    refuse_zgc();
    THRESHOLD.store(farmem_sys::usize_from(cfg.threshold()), Ordering::Release);
    let _ = foreign();
    // Load UCX now, before the program runs: loading sets UCX's environment
    // (`setenv` allocates), which must not happen later inside an
    // allocation of the program's.
    if cfg.transport() != rt::config::Transport::Socket && foreign().is_none() {
        let _ = farmem_sys::ucx::available();
    }
    farmem::router::MAP_HOOK.store(
        map_hook as farmem::router::MapHook as usize,
        Ordering::Release,
    );
    if cfg.servers().is_empty() && cfg.file().is_none() {
        start(cfg);
    }
}

/// A JVM set to use ZGC stops here, before it reserves anything: its
/// heap cannot be paged, and its search for reservations at fixed
/// addresses would take far memory's arena address by address. (A JVM
/// started by `farmem run` itself was refused before it started; this
/// catches one started by a script.)
fn refuse_zgc() {
    let is_java = std::fs::read_link("/proc/self/exe")
        .ok()
        .is_some_and(|p| p.file_name().is_some_and(|n| n == "java"));
    if !is_java {
        return;
    }
    let Ok(cmdline) = std::fs::read("/proc/self/cmdline") else {
        return;
    };
    let args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .skip(1)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let env = rt::jvm::jvm_env_options();
    if rt::jvm::jvm_uses_zgc(args.iter().map(String::as_str), &env) {
        die(rt::jvm::ZGC_REFUSED);
    }
}

fn start(mut cfg: Config) {
    use rt::config::Transport;
    // A program with its own allocator (tcmalloc, jemalloc) starts far
    // memory from inside that allocator, holding its lock (the chunk it maps
    // goes far). UCX's set-up allocates through the program's allocator and
    // would wait for that lock for ever; sockets allocate nothing there.
    if foreign().is_some() {
        match cfg.transport() {
            Transport::Auto => cfg = cfg.with_transport(Transport::Socket),
            Transport::Ucx => die(
                "FARMEM_TRANSPORT=ucx: this program has its own allocator (tcmalloc, jemalloc, ...), \
                 and UCX's set-up would run inside that allocator's lock and wait for ever; \
                 use FARMEM_TRANSPORT=auto or socket for it",
            ),
            // Memory files are granted over the socket like its own
            // requests: nothing of UCX is set up.
            Transport::Socket | Transport::Memfd => {}
        }
    }
    match rt::init(cfg) {
        Ok(_) | Err(rt::RuntimeError::AlreadyInitialized) => {
            if let Some(r) = rt::get() {
                let (lo, hi) = r.arena_range();
                FAR_LO.store(lo, Ordering::Release);
                FAR_HI.store(hi, Ordering::Release);
            }
            farmem::dispatch::start();
            STATE.store(READY, Ordering::Release)
        }
        Err(e) => die(&format!("cannot start far memory: {e}")),
    }
}

/// The runtime, started on first use.
fn runtime() -> Option<&'static rt::Runtime> {
    match STATE.load(Ordering::Acquire) {
        READY => rt::get(),
        FAILED => None,
        _ => {
            // The constructor has read it (it sets the threshold that lets
            // allocations get here); read it now if not.
            let cfg = match CONFIG.get() {
                Some(c) => Ok(c.clone()),
                None => Config::from_env().map(|c| CONFIG.get_or_init(|| c).clone()),
            };
            match cfg {
                Ok(cfg) => start(cfg),
                Err(_) => STATE.store(FAILED, Ordering::Release),
            }
            rt::get()
        }
    }
}

/// A far allocation of `n` bytes, or None (then the caller uses the C library).
fn far_alloc(n: usize) -> Option<*mut c_void> {
    let _g = Guard::enter()?;
    if rt::is_forked_child() || farmem_sys::inside() {
        return None;
    }
    runtime()?.alloc(n).ok().map(|p| p.cast())
}

/// Whether `p` lies in far memory: two compares, no call.
#[inline(always)]
fn is_far(p: *const c_void) -> bool {
    let a = p as usize;
    a >= FAR_LO.load(Ordering::Relaxed) && a < FAR_HI.load(Ordering::Relaxed)
}

/// The runtime, if `p` is far memory.
#[inline]
fn far(p: *const c_void) -> Option<&'static rt::Runtime> {
    if is_far(p) {
        rt::get()
    } else {
        None
    }
}

fn big(n: usize) -> bool {
    n >= THRESHOLD.load(Ordering::Relaxed)
}

fn set_errno(e: c_int) {
    farmem_sys::signal::set_errno(e);
}
