//! The dynamic loader: symbol lookups for interposition.
//!
//! `dlsym(RTLD_NEXT, …)` resolves relative to the object that makes the
//! call; this crate is linked statically into each farmem library, so a
//! lookup here is made from that library, as the interposer needs.

use std::ffi::CStr;

/// The next definition of `name` after the object this code is linked into
/// (0 if there is none).
pub fn next_symbol(name: &CStr) -> usize {
    // SAFETY: RTLD_NEXT lookup of a NUL-terminated name.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) as usize }
}

/// `name` as the already-loaded C library (`libc.so.6`) defines it, whoever
/// else interposes it; None if the C library is not loaded or lacks it.
pub fn libc_symbol(name: &CStr) -> Option<usize> {
    // SAFETY: dlopen of the already-loaded C library (NOLOAD: it is never
    // loaded by this call, and the handle needs no close).
    let h = unsafe { libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    if h.is_null() {
        return None;
    }
    // SAFETY: lookup of a NUL-terminated name in a live handle.
    let f = unsafe { libc::dlsym(h, name.as_ptr()) } as usize;
    (f != 0).then_some(f)
}

/// The load address of the object whose code contains `addr`; it does not
/// allocate.
pub fn object_base_of(addr: usize) -> Option<usize> {
    // SAFETY: dladdr fills a zeroed Dl_info.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let ok = unsafe { libc::dladdr(addr as *const libc::c_void, &mut info) };
    (ok != 0).then_some(info.dli_fbase as usize)
}
