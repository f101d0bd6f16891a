//! Programs that bring their own allocator (jemalloc, tcmalloc, mimalloc):
//! detected at the first call, then every allocator entry point forwards
//! to it.

use super::*;

/// Whose allocator answers `malloc`: not known yet, glibc's (large blocks
/// go far here), or the program's own (everything forwarded to it).
pub(crate) const MODE_UNKNOWN: u8 = 0;
pub(crate) const MODE_OWN: u8 = 1;
pub(crate) const MODE_FOREIGN: u8 = 2;
pub(crate) static MODE: AtomicU8 = AtomicU8::new(MODE_UNKNOWN);

pub(crate) type MallocFn = unsafe extern "C" fn(size_t) -> *mut c_void;
pub(crate) type FreeFn = unsafe extern "C" fn(*mut c_void);
pub(crate) type CallocFn = unsafe extern "C" fn(size_t, size_t) -> *mut c_void;
pub(crate) type ReallocFn = unsafe extern "C" fn(*mut c_void, size_t) -> *mut c_void;
pub(crate) type PosixMemalignFn = unsafe extern "C" fn(*mut *mut c_void, size_t, size_t) -> c_int;
pub(crate) type UsableSizeFn = unsafe extern "C" fn(*mut c_void) -> size_t;

/// The program's own allocator, when it has one.
pub(crate) struct Foreign {
    pub(crate) malloc: MallocFn,
    pub(crate) free: FreeFn,
    pub(crate) calloc: CallocFn,
    pub(crate) realloc: ReallocFn,
    pub(crate) posix_memalign: PosixMemalignFn,
    pub(crate) usable_size: Option<UsableSizeFn>,
}

pub(crate) static FOREIGN: std::sync::OnceLock<Foreign> = std::sync::OnceLock::new();
/// Set while `detect_mode` runs: an allocation it makes itself (if `dlsym`
/// ever allocated) takes the C library's path instead of recursing.
pub(crate) static DETECTING: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Whether `f` lies in the C library (compared by the loaded object).
pub(crate) fn in_libc(f: usize) -> bool {
    let base = farmem_sys::dl::object_base_of;
    base(f).is_some() && base(f) == base(libc::getpid as *const () as usize)
}

/// The next definition of `name` (after this library).
pub(crate) fn next_sym(name: &std::ffi::CStr) -> usize {
    farmem_sys::dl::next_symbol(name)
}

/// Decide, once, whose allocator this process uses.
#[cold]
#[inline(never)]
pub(crate) fn detect_mode() -> u8 {
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
pub(crate) fn foreign() -> Option<&'static Foreign> {
    let m = MODE.load(Ordering::Relaxed);
    if m == MODE_OWN {
        return None;
    }
    foreign_slow(m)
}

#[cold]
#[inline(never)]
pub(crate) fn foreign_slow(m: u8) -> Option<&'static Foreign> {
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
pub(crate) fn foreign_aligned(f: &Foreign, align: usize, n: usize) -> *mut c_void {
    let mut p = std::ptr::null_mut();
    // SAFETY: plain call into the program's allocator.
    let r = unsafe { (f.posix_memalign)(&mut p, align.max(8), n) };
    if r != 0 {
        set_errno(r);
        return std::ptr::null_mut();
    }
    p
}
