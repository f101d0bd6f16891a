//! The interposed allocator: `malloc`, `free`, `calloc`, `realloc`, the
//! aligned allocators and `malloc_usable_size`. Large blocks go far.

use super::*;

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
pub(crate) fn free_far(p: *mut c_void) {
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

pub(crate) fn real_usable_size(p: *mut c_void) -> usize {
    type F = unsafe extern "C" fn(*mut c_void) -> size_t;
    static NEXT: Next = Next::new(c"malloc_usable_size");
    let f = NEXT.or_die();
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

pub(crate) fn aligned(align: usize, n: usize) -> *mut c_void {
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
