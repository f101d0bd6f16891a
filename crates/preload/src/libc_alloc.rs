//! The C library's allocator, reached directly: what the shim's own Rust
//! code allocates from (its global allocator), never the interposed symbols
//! or the program's allocator.

use super::*;

extern "C" {
    pub(crate) fn __libc_malloc(n: size_t) -> *mut c_void;
    pub(crate) fn __libc_calloc(n: size_t, m: size_t) -> *mut c_void;
    pub(crate) fn __libc_realloc(p: *mut c_void, n: size_t) -> *mut c_void;
    pub(crate) fn __libc_free(p: *mut c_void);
    pub(crate) fn __libc_memalign(align: size_t, n: size_t) -> *mut c_void;
}

/// glibc's allocator entry points, looked up in `libc.so.6` itself. The
/// extern `__libc_*` symbols are not enough: tcmalloc defines its own
/// `__libc_malloc`, and the shim's code must never allocate from the
/// program's allocator, which may hold its lock while it calls `mmap` (and
/// so the shim, and the runtime's start-up) or while it faults on far memory.
#[cfg_attr(test, allow(dead_code))]
pub(crate) struct Glibc {
    malloc: unsafe extern "C" fn(size_t) -> *mut c_void,
    calloc: unsafe extern "C" fn(size_t, size_t) -> *mut c_void,
    realloc: unsafe extern "C" fn(*mut c_void, size_t) -> *mut c_void,
    free: unsafe extern "C" fn(*mut c_void),
    memalign: unsafe extern "C" fn(size_t, size_t) -> *mut c_void,
}

pub(crate) static GLIBC: std::sync::OnceLock<Glibc> = std::sync::OnceLock::new();

pub(crate) fn glibc() -> &'static Glibc {
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

pub(crate) type MemalignFn = unsafe extern "C" fn(size_t, size_t) -> *mut c_void;

/// The shim's own allocator: glibc's, bypassing the interposed symbols and
/// any allocator the program brings.
#[cfg_attr(test, allow(dead_code))]
pub(crate) struct LibcAlloc;

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
pub(crate) static ALLOC: LibcAlloc = LibcAlloc;
