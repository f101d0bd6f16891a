//! The dynamic loader: symbol lookups for interposition.
//!
//! `dlsym(RTLD_NEXT, …)` resolves relative to the object that makes the
//! call; this crate is linked statically into each farmem library, so a
//! lookup here is made from that library, as the interposer needs.

use std::ffi::CStr;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The next definition of `name` after the object this code is linked into
/// (0 if there is none).
pub fn next_symbol(name: &CStr) -> usize {
    // SAFETY: RTLD_NEXT lookup of a NUL-terminated name.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) as usize }
}

/// One symbol's next definition, looked up on first use and kept: the one
/// resolver every farmem interposer forwards through (a `static` per call
/// site). Lookups after the first are one relaxed load; two threads that
/// race the first both store the same address.
pub struct Next {
    name: &'static CStr,
    addr: AtomicUsize,
}

/// Looked up, and no later object defines it (no function lives at 1).
const NONE: usize = 1;

impl Next {
    pub const fn new(name: &'static CStr) -> Next {
        Next {
            name,
            addr: AtomicUsize::new(0),
        }
    }

    /// The next definition's address, or 0 if no later object has one.
    #[inline]
    pub fn get(&self) -> usize {
        match self.addr.load(Ordering::Relaxed) {
            0 => {}
            NONE => return 0,
            f => return f,
        }
        let f = next_symbol(self.name);
        self.addr
            .store(if f == 0 { NONE } else { f }, Ordering::Relaxed);
        f
    }

    /// The next definition, or `fallback` (the definition this object was
    /// linked against) when the loader finds none.
    #[inline]
    pub fn get_or(&self, fallback: usize) -> usize {
        match self.get() {
            0 => fallback,
            f => f,
        }
    }

    /// The next definition; the program stops with a message naming the
    /// symbol when there is none (a wrapper with nothing to forward to
    /// cannot do its call). Allocation-free: signal handlers forward too.
    #[inline]
    pub fn or_die(&self) -> usize {
        match self.get() {
            0 => {
                let mut m = crate::msg::MsgBuf::new();
                let _ = writeln!(
                    m,
                    "farmem: cannot find the C library's {} to forward to (dlsym RTLD_NEXT \
                     found none); is the program linked against glibc?",
                    self.name.to_str().unwrap_or("(a non-UTF-8 name)")
                );
                crate::fatal(m.as_bytes())
            }
            f => f,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_finds_the_c_library_and_keeps_it() {
        static GETPID: Next = Next::new(c"getpid");
        let f = GETPID.get();
        assert_ne!(f, 0);
        assert_eq!(GETPID.get(), f);
        // SAFETY: getpid's prototype.
        let g = unsafe { std::mem::transmute::<usize, extern "C" fn() -> libc::pid_t>(f) };
        assert_eq!(g(), std::process::id() as libc::pid_t);
        static NONE: Next = Next::new(c"farmem_no_such_symbol");
        assert_eq!(NONE.get(), 0);
        assert_eq!(NONE.get_or(7), 7);
    }
}
