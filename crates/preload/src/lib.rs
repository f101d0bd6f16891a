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
use farmem_sys::int_arg;
use libc::{c_int, c_void, off_t, size_t};
use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

// Keep the system-call wrappers and the C API in this library's exports.
pub use farmem::{calls, dispatch, io, remote, signals, sync};
pub use farmem::{fm_advise, fm_alloc, fm_free, fm_stats, fm_stats_print};

extern "C" {
    fn __libc_malloc(n: size_t) -> *mut c_void;
    fn __libc_calloc(n: size_t, m: size_t) -> *mut c_void;
    fn __libc_realloc(p: *mut c_void, n: size_t) -> *mut c_void;
    fn __libc_free(p: *mut c_void);
    fn __libc_memalign(align: size_t, n: size_t) -> *mut c_void;
}

/// glibc's allocator entry points, looked up in `libc.so.6` itself. The
/// extern `__libc_*` symbols are not enough: tcmalloc defines its own
/// `__libc_malloc`, and the shim's code must never allocate from the
/// program's allocator, which may hold its lock while it calls `mmap` (and
/// so the shim, and the runtime's start-up) or while it faults on far memory.
#[cfg_attr(test, allow(dead_code))]
struct Glibc {
    malloc: unsafe extern "C" fn(size_t) -> *mut c_void,
    calloc: unsafe extern "C" fn(size_t, size_t) -> *mut c_void,
    realloc: unsafe extern "C" fn(*mut c_void, size_t) -> *mut c_void,
    free: unsafe extern "C" fn(*mut c_void),
    memalign: unsafe extern "C" fn(size_t, size_t) -> *mut c_void,
}

static GLIBC: std::sync::OnceLock<Glibc> = std::sync::OnceLock::new();

fn glibc() -> &'static Glibc {
    GLIBC.get_or_init(|| {
        let sym = |name: &std::ffi::CStr, fallback: usize| {
            farmem_sys::dl::libc_symbol(name).unwrap_or(fallback)
        };
        // glibc's entry point `$c`, or the extern symbol `$name` if the
        // lookup fails.
        macro_rules! glibc_fn {
            ($c:literal, $name:ident, $ty:ty) => {
                // SAFETY: the address is glibc's function of that name, whose
                // C prototype is `$ty`.
                unsafe { std::mem::transmute::<usize, $ty>(sym($c, $name as *const () as usize)) }
            };
        }
        Glibc {
            malloc: glibc_fn!(c"__libc_malloc", __libc_malloc, MallocFn),
            calloc: glibc_fn!(c"__libc_calloc", __libc_calloc, CallocFn),
            realloc: glibc_fn!(c"__libc_realloc", __libc_realloc, ReallocFn),
            free: glibc_fn!(c"__libc_free", __libc_free, FreeFn),
            memalign: glibc_fn!(c"__libc_memalign", __libc_memalign, MemalignFn),
        }
    })
}

type MemalignFn = unsafe extern "C" fn(size_t, size_t) -> *mut c_void;

/// The shim's own allocator: glibc's, bypassing the interposed symbols and
/// any allocator the program brings.
#[cfg_attr(test, allow(dead_code))]
struct LibcAlloc;

// SAFETY: glibc's allocator satisfies GlobalAlloc's contract for these
// layouts: malloc aligns to 16, memalign to any power of two.
unsafe impl GlobalAlloc for LibcAlloc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let g = glibc();
        // SAFETY: plain calls into the C library.
        unsafe {
            if l.align() <= 16 {
                (g.malloc)(l.size()).cast()
            } else {
                (g.memalign)(l.align(), l.size()).cast()
            }
        }
    }
    unsafe fn dealloc(&self, p: *mut u8, _: Layout) {
        // SAFETY: p came from alloc above.
        unsafe { (glibc().free)(p.cast()) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let g = glibc();
        // SAFETY: plain calls into the C library.
        unsafe {
            if l.align() <= 16 {
                (g.calloc)(1, l.size()).cast()
            } else {
                let p: *mut u8 = (g.memalign)(l.align(), l.size()).cast();
                if !p.is_null() {
                    std::ptr::write_bytes(p, 0, l.size());
                }
                p
            }
        }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if l.align() <= 16 {
            // SAFETY: p came from this allocator with the same alignment class.
            unsafe { (glibc().realloc)(p.cast(), n).cast() }
        } else {
            // SAFETY: fresh block, then copy and free the old one.
            unsafe {
                let q = self.alloc(Layout::from_size_align_unchecked(n, l.align()));
                if !q.is_null() {
                    std::ptr::copy_nonoverlapping(p, q, l.size().min(n));
                    self.dealloc(p, l);
                }
                q
            }
        }
    }
}

#[cfg(not(test))]
#[global_allocator]
static ALLOC: LibcAlloc = LibcAlloc;

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
    THRESHOLD.store(farmem_sys::usize_from(cfg.threshold()), Ordering::Release);
    let _ = foreign();
    // Load UCX now, before the program runs: loading sets UCX's environment
    // (`setenv` allocates), which must not happen later inside an
    // allocation of the program's.
    if cfg.transport() != rt::config::Transport::Socket && foreign().is_none() {
        let _ = farmem_sys::ucx::available();
    }
    farmem::calls::MAP_HOOK.store(
        map_hook as farmem::calls::MapHook as usize,
        Ordering::Release,
    );
    if cfg.servers().is_empty() && cfg.file().is_none() {
        start(cfg);
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
            Transport::Socket => {}
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

/// Whose allocator answers `malloc`: not known yet, glibc's (large blocks
/// go far here), or the program's own (everything forwarded to it).
const MODE_UNKNOWN: u8 = 0;
const MODE_OWN: u8 = 1;
const MODE_FOREIGN: u8 = 2;
static MODE: AtomicU8 = AtomicU8::new(MODE_UNKNOWN);

type MallocFn = unsafe extern "C" fn(size_t) -> *mut c_void;
type FreeFn = unsafe extern "C" fn(*mut c_void);
type CallocFn = unsafe extern "C" fn(size_t, size_t) -> *mut c_void;
type ReallocFn = unsafe extern "C" fn(*mut c_void, size_t) -> *mut c_void;
type PosixMemalignFn = unsafe extern "C" fn(*mut *mut c_void, size_t, size_t) -> c_int;
type UsableSizeFn = unsafe extern "C" fn(*mut c_void) -> size_t;

/// The program's own allocator, when it has one.
struct Foreign {
    malloc: MallocFn,
    free: FreeFn,
    calloc: CallocFn,
    realloc: ReallocFn,
    posix_memalign: PosixMemalignFn,
    usable_size: Option<UsableSizeFn>,
}

static FOREIGN: std::sync::OnceLock<Foreign> = std::sync::OnceLock::new();
/// Set while `detect_mode` runs: an allocation it makes itself (if `dlsym`
/// ever allocated) takes the C library's path instead of recursing.
static DETECTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether `f` lies in the C library (compared by the loaded object).
fn in_libc(f: usize) -> bool {
    let base = farmem_sys::dl::object_base_of;
    base(f).is_some() && base(f) == base(libc::getpid as *const () as usize)
}

/// The next definition of `name` (after this library).
fn next_sym(name: &std::ffi::CStr) -> usize {
    farmem_sys::dl::next_symbol(name)
}

/// Decide, once, whose allocator this process uses.
#[cold]
#[inline(never)]
fn detect_mode() -> u8 {
    let m = next_sym(c"malloc");
    let mode = if m == 0 || in_libc(m) {
        MODE_OWN
    } else {
        let get = |name: &std::ffi::CStr| {
            let f = next_sym(name);
            (f != 0 && !in_libc(f)).then_some(f)
        };
        let need = |name: &std::ffi::CStr| {
            get(name).unwrap_or_else(|| {
                die(&format!(
                    "the program's own allocator defines malloc but not {}; farmem cannot keep its \
                     pointers apart from the C library's",
                    name.to_string_lossy()
                ))
            })
        };
        // SAFETY: each address is the allocator's function of that name,
        // with the C prototype of the field.
        let f = unsafe {
            Foreign {
                malloc: std::mem::transmute::<usize, MallocFn>(m),
                free: std::mem::transmute::<usize, FreeFn>(need(c"free")),
                calloc: std::mem::transmute::<usize, CallocFn>(need(c"calloc")),
                realloc: std::mem::transmute::<usize, ReallocFn>(need(c"realloc")),
                posix_memalign: std::mem::transmute::<usize, PosixMemalignFn>(need(
                    c"posix_memalign",
                )),
                usable_size: get(c"malloc_usable_size")
                    .map(|f| std::mem::transmute::<usize, UsableSizeFn>(f)),
            }
        };
        let _ = FOREIGN.set(f);
        MODE_FOREIGN
    };
    MODE.store(mode, Ordering::Release);
    mode
}

/// The program's own allocator, if it has one. On the fast path (glibc's
/// allocator, decided) this is one relaxed load and a compare.
#[inline(always)]
fn foreign() -> Option<&'static Foreign> {
    let m = MODE.load(Ordering::Relaxed);
    if m == MODE_OWN {
        return None;
    }
    foreign_slow(m)
}

#[cold]
#[inline(never)]
fn foreign_slow(m: u8) -> Option<&'static Foreign> {
    if m == MODE_FOREIGN {
        return FOREIGN.get();
    }
    if DETECTING.swap(true, Ordering::AcqRel) {
        return None;
    }
    if detect_mode() == MODE_FOREIGN {
        FOREIGN.get()
    } else {
        None
    }
}

/// Aligned allocation from the program's allocator.
fn foreign_aligned(f: &Foreign, align: usize, n: usize) -> *mut c_void {
    let mut p = std::ptr::null_mut();
    // SAFETY: plain call into the program's allocator.
    let r = unsafe { (f.posix_memalign)(&mut p, align.max(8), n) };
    if r != 0 {
        set_errno(r);
        return std::ptr::null_mut();
    }
    p
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

/// `malloc(3)`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn malloc(n: size_t) -> *mut c_void {
    if let Some(f) = foreign() {
        // SAFETY: plain call into the program's allocator.
        return unsafe { (f.malloc)(n) };
    }
    if big(n) {
        if let Some(p) = far_alloc(n) {
            return p;
        }
    }
    // SAFETY: plain call into the C library.
    unsafe { __libc_malloc(n) }
}

/// `free(3)`.
///
/// # Safety
/// As `free(3)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn free(p: *mut c_void) {
    if let Some(f) = foreign() {
        // SAFETY: p came from the program's allocator (everything does).
        return unsafe { (f.free)(p) };
    }
    if is_far(p) {
        return free_far(p);
    }
    // SAFETY: p is not far, so it came from the C library (or is NULL).
    unsafe { __libc_free(p) }
}

#[cold]
#[inline(never)]
fn free_far(p: *mut c_void) {
    if let Some(r) = rt::get() {
        let _g = Guard::enter();
        if let Err(e) = r.free(p.cast()) {
            die(&format!("free({p:p}): {e}"));
        }
    }
}

/// `calloc(3)`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn calloc(n: size_t, m: size_t) -> *mut c_void {
    let Some(total) = n.checked_mul(m) else {
        set_errno(libc::ENOMEM);
        return std::ptr::null_mut();
    };
    if let Some(f) = foreign() {
        // SAFETY: plain call into the program's allocator.
        return unsafe { (f.calloc)(n, m) };
    }
    if big(total) {
        // Far memory reads as zero: nothing to clear.
        if let Some(p) = far_alloc(total) {
            return p;
        }
    }
    // SAFETY: plain call into the C library.
    unsafe { __libc_calloc(n, m) }
}

fn real_usable_size(p: *mut c_void) -> usize {
    type F = unsafe extern "C" fn(*mut c_void) -> size_t;
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    let f = farmem::io::next_fn(&SLOT, c"malloc_usable_size");
    // SAFETY: f is the C library's malloc_usable_size.
    unsafe { std::mem::transmute::<usize, F>(f)(p) }
}

/// `realloc(3)`: content is kept across local↔far crossings.
///
/// # Safety
/// As `realloc(3)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn realloc(p: *mut c_void, n: size_t) -> *mut c_void {
    if let Some(f) = foreign() {
        // SAFETY: p came from the program's allocator.
        return unsafe { (f.realloc)(p, n) };
    }
    if p.is_null() {
        return malloc(n);
    }
    if let Some(r) = far(p) {
        if n == 0 {
            // SAFETY: p is a live far allocation.
            unsafe { free(p) };
            return std::ptr::null_mut();
        }
        let old = r.alloc_size(p.cast()).unwrap_or(0);
        // Still large and at most the region's size (growing inside its last
        // page, or shrinking by less than half): keep it in place.
        if big(n) && n <= old && n > old / 2 {
            return p;
        }
        let q = if big(n) { far_alloc(n) } else { None };
        // SAFETY: plain call into the C library.
        let q = q.unwrap_or_else(|| unsafe { __libc_malloc(n) });
        if q.is_null() {
            return q;
        }
        // SAFETY: both blocks are live and at least min(old, n) long.
        unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), q.cast::<u8>(), old.min(n)) };
        // SAFETY: p is a live far allocation.
        unsafe { free(p) };
        return q;
    }
    if big(n) {
        if let Some(q) = far_alloc(n) {
            let old = real_usable_size(p);
            // SAFETY: p is a live C-library block of `old` usable bytes; q is n bytes.
            unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), q.cast::<u8>(), old.min(n)) };
            // SAFETY: p came from the C library.
            unsafe { __libc_free(p) };
            return q;
        }
    }
    // SAFETY: p came from the C library.
    unsafe { __libc_realloc(p, n) }
}

fn aligned(align: usize, n: usize) -> *mut c_void {
    if let Some(f) = foreign() {
        return foreign_aligned(f, align, n);
    }
    if big(n) && align <= farmem_sys::PAGE_SIZE {
        if let Some(p) = far_alloc(n) {
            return p;
        }
    }
    // SAFETY: plain call into the C library.
    unsafe { __libc_memalign(align, n) }
}

/// `posix_memalign(3)`.
///
/// # Safety
/// `out` is writable.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: size_t, n: size_t) -> c_int {
    if !align.is_power_of_two() || !align.is_multiple_of(std::mem::size_of::<*mut c_void>()) {
        return libc::EINVAL;
    }
    let p = aligned(align, n);
    if p.is_null() && n != 0 {
        return libc::ENOMEM;
    }
    // SAFETY: the caller passes a writable pointer.
    unsafe { *out = p };
    0
}

/// `aligned_alloc(3)`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn aligned_alloc(align: size_t, n: size_t) -> *mut c_void {
    if !align.is_power_of_two() {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    aligned(align, n)
}

/// `memalign(3)`: the same as `aligned_alloc` here.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn memalign(align: size_t, n: size_t) -> *mut c_void {
    aligned_alloc(align, n)
}

/// `valloc(3)`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn valloc(n: size_t) -> *mut c_void {
    aligned(farmem_sys::PAGE_SIZE, n)
}

/// `pvalloc(3)`: page-aligned, size rounded up to whole pages.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn pvalloc(n: size_t) -> *mut c_void {
    let Some(r) = n.checked_next_multiple_of(farmem_sys::PAGE_SIZE) else {
        set_errno(libc::ENOMEM);
        return std::ptr::null_mut();
    };
    aligned(farmem_sys::PAGE_SIZE, r.max(farmem_sys::PAGE_SIZE))
}

/// `malloc_usable_size(3)`.
///
/// # Safety
/// `p` is NULL or a live allocation.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> size_t {
    if p.is_null() {
        return 0;
    }
    if let Some(f) = foreign() {
        return match f.usable_size {
            // SAFETY: p came from the program's allocator.
            Some(u) => unsafe { u(p) },
            None => die("the program's allocator has no malloc_usable_size"),
        };
    }
    match far(p) {
        Some(r) => r.alloc_size(p.cast()).unwrap_or(0),
        None => real_usable_size(p),
    }
}

type MmapFn = unsafe extern "C" fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void;
type MunmapFn = unsafe extern "C" fn(*mut c_void, size_t) -> c_int;
type MremapFn =
    unsafe extern "C" fn(*mut c_void, size_t, size_t, c_int, *mut c_void) -> *mut c_void;

/// Private anonymous read-write mappings at no fixed address are plain
/// memory: large ones go far.
fn far_mappable(addr: *mut c_void, len: usize, prot: c_int, flags: c_int) -> bool {
    let want = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    let refuse = libc::MAP_FIXED
        | libc::MAP_FIXED_NOREPLACE
        | libc::MAP_SHARED
        | libc::MAP_HUGETLB
        | libc::MAP_GROWSDOWN
        | libc::MAP_STACK;
    addr.is_null()
        && big(len)
        && flags & want == want
        && flags & refuse == 0
        && prot == libc::PROT_READ | libc::PROT_WRITE
}

/// `mmap(2)`.
///
/// # Safety
/// As `mmap(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    if far_mappable(addr, len, prot, flags) {
        if let Some(p) = far_alloc(len) {
            return p;
        }
    }
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    let f = farmem::io::next_fn(&SLOT, c"mmap");
    // SAFETY: f is the C library's mmap; arguments forwarded unchanged.
    unsafe { std::mem::transmute::<usize, MmapFn>(f)(addr, len, prot, flags, fd, off) }
}

/// `mmap64` (the same as `mmap` on 64-bit).
///
/// # Safety
/// As `mmap(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: same contract.
    unsafe { mmap(addr, len, prot, flags, fd, off) }
}

/// `munmap(2)`: a whole far mapping is freed; part of one is discarded.
///
/// # Safety
/// As `munmap(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    if let Some(r) = far(addr) {
        let _g = Guard::enter();
        if !(addr as usize).is_multiple_of(farmem_sys::PAGE_SIZE) || len == 0 {
            set_errno(libc::EINVAL);
            return -1;
        }
        let whole = r.alloc_size(addr.cast()).is_some_and(|size| len >= size);
        let res = if whole {
            r.free(addr.cast())
        } else {
            r.discard(addr as usize, len)
        };
        return match res {
            Ok(()) => 0,
            Err(_) => {
                set_errno(libc::EINVAL);
                -1
            }
        };
    }
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    let f = farmem::io::next_fn(&SLOT, c"munmap");
    // SAFETY: f is the C library's munmap.
    unsafe { std::mem::transmute::<usize, MunmapFn>(f)(addr, len) }
}

/// `mremap(2)`. Declared with the optional fifth argument: on x86-64 a
/// variadic call passes it in the same register.
///
/// # Safety
/// As `mremap(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    if let Some(r) = far(old) {
        let size = r.alloc_size(old.cast()).unwrap_or(0);
        if flags & libc::MREMAP_FIXED != 0 || size == 0 {
            // Moving far memory to a chosen address is not supported.
            set_errno(libc::EINVAL);
            return libc::MAP_FAILED;
        }
        if new_len <= size {
            return old;
        }
        if flags & libc::MREMAP_MAYMOVE == 0 {
            set_errno(libc::ENOMEM);
            return libc::MAP_FAILED;
        }
        let Some(q) = far_alloc(new_len) else {
            set_errno(libc::ENOMEM);
            return libc::MAP_FAILED;
        };
        // SAFETY: both regions are live; old holds at least old_len.min(size) bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(old.cast::<u8>(), q.cast::<u8>(), old_len.min(size))
        };
        let _g = Guard::enter();
        let _ = r.free(old.cast());
        return q;
    }
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    let f = farmem::io::next_fn(&SLOT, c"mremap");
    // SAFETY: f is the C library's mremap; arguments forwarded unchanged.
    unsafe { std::mem::transmute::<usize, MremapFn>(f)(old, old_len, new_len, flags, new_addr) }
}

type MadviseFn = unsafe extern "C" fn(*mut c_void, size_t, c_int) -> c_int;
type MprotectFn = unsafe extern "C" fn(*mut c_void, size_t, c_int) -> c_int;

/// `madvise(2)`. On far memory: the purges allocators use (`MADV_DONTNEED`,
/// `MADV_FREE`, `MADV_REMOVE`) drop the pages, which then read as zero;
/// access-pattern advice goes to the runtime; the rest (huge pages, dump and
/// fork flags, KSM, populate, cold/pageout hints) has no meaning for pages
/// farmem manages and succeeds without effect.
///
/// # Safety
/// As `madvise(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int {
    if let Some(r) = far(addr) {
        if !(addr as usize).is_multiple_of(farmem_sys::PAGE_SIZE) {
            set_errno(libc::EINVAL);
            return -1;
        }
        if len == 0 {
            return 0;
        }
        let _g = Guard::enter();
        let res = match advice {
            libc::MADV_DONTNEED | libc::MADV_FREE | libc::MADV_REMOVE => r.zero(addr as usize, len),
            libc::MADV_WILLNEED => r.advise(addr as usize, len, rt::Advice::WillNeed),
            libc::MADV_SEQUENTIAL => r.advise(addr as usize, len, rt::Advice::Sequential),
            libc::MADV_RANDOM => r.advise(addr as usize, len, rt::Advice::Random),
            libc::MADV_NORMAL => r.advise(addr as usize, len, rt::Advice::Normal),
            _ => Ok(()),
        };
        return match res {
            Ok(()) => 0,
            Err(_) => {
                set_errno(libc::ENOMEM);
                -1
            }
        };
    }
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    let f = farmem::io::next_fn(&SLOT, c"madvise");
    // SAFETY: f is the C library's madvise.
    unsafe { std::mem::transmute::<usize, MadviseFn>(f)(addr, len, advice) }
}

/// `mprotect(2)`. Far memory is always readable and writable: asking for
/// that succeeds; anything else would break the fault path, so the program
/// is stopped with a message instead of running on wrong assumptions.
///
/// # Safety
/// As `mprotect(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mprotect(addr: *mut c_void, len: size_t, prot: c_int) -> c_int {
    if far(addr).is_some() {
        if prot == libc::PROT_READ | libc::PROT_WRITE {
            return 0;
        }
        die(&format!(
            "mprotect({addr:p}, {len}, {prot:#x}) on far memory is not supported; run with a \
             FARMEM_THRESHOLD above this mapping's size to keep it local"
        ));
    }
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    let f = farmem::io::next_fn(&SLOT, c"mprotect");
    // SAFETY: f is the C library's mprotect.
    unsafe { std::mem::transmute::<usize, MprotectFn>(f)(addr, len, prot) }
}

/// Memory-map system calls made through `syscall(2)` (tcmalloc's own
/// `mmap` does this) take the same path as the C library's entry points.
fn map_hook(nr: libc::c_long, a: &[usize; 6]) -> Option<libc::c_long> {
    let ptr = |x: usize| x as *mut c_void;
    let ret_ptr = |p: *mut c_void| -> libc::c_long {
        if p == libc::MAP_FAILED {
            -1
        } else {
            p as libc::c_long
        }
    };
    // SAFETY: the program's own arguments, forwarded as the entry points
    // of the same names take them.
    unsafe {
        match nr {
            // Only the far case: the rest goes to the kernel as it is (an
            // allocator's own `mmap` may itself call `syscall(SYS_mmap)`).
            libc::SYS_mmap if far_mappable(ptr(a[0]), a[1], int_arg(a[2]), int_arg(a[3])) => {
                far_alloc(a[1]).map(|p| p as libc::c_long)
            }
            libc::SYS_munmap if is_far(ptr(a[0])) => Some(munmap(ptr(a[0]), a[1]) as libc::c_long),
            libc::SYS_mremap if is_far(ptr(a[0])) => Some(ret_ptr(mremap(
                ptr(a[0]),
                a[1],
                a[2],
                int_arg(a[3]),
                ptr(a[4]),
            ))),
            libc::SYS_madvise if is_far(ptr(a[0])) => {
                Some(madvise(ptr(a[0]), a[1], int_arg(a[2])) as libc::c_long)
            }
            libc::SYS_mprotect if is_far(ptr(a[0])) => {
                Some(mprotect(ptr(a[0]), a[1], int_arg(a[2])) as libc::c_long)
            }
            _ => None,
        }
    }
}
