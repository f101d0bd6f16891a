//! Reads and writes on far buffers: `read`/`write` and their positional,
//! vectored, fortified and stdio forms, and the other transfer calls
//! (`preadv2`, `splice`, `sendfile`, `getrandom`, ...).
//!
//! Each wrapper forwards to the next definition of its symbol
//! ([`crate::forward`], normally glibc's) unchanged when the buffer holds no far memory: one
//! atomic load and a range check. Otherwise it works in chunks of at most a
//! quarter of the local budget: pin the chunk's far pages, fault them in from
//! user mode (as writes when the kernel will write into the buffer), make the
//! call, unpin. Chunking keeps a huge `read` from pinning more than the budget.
//!
//! Reads from pipes and sockets stop after the first chunk (a short read, as
//! POSIX allows), so a wrapper never blocks where the plain call would not.

use crate::forward::{c_name, real};
use crate::pin::{chunked, far, is_regular};
use farmem_runtime as rt;
use libc::{c_int, c_uint, c_void, iovec, off_t, size_t, ssize_t, FILE};

type ReadFn = unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t;
type WriteFn = unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t;
type PreadFn = unsafe extern "C" fn(c_int, *mut c_void, size_t, libc::off_t) -> ssize_t;
type PwriteFn = unsafe extern "C" fn(c_int, *const c_void, size_t, libc::off_t) -> ssize_t;
type IovFn = unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t;
type FreadFn = unsafe extern "C" fn(*mut c_void, size_t, size_t, *mut FILE) -> size_t;
type FwriteFn = unsafe extern "C" fn(*const c_void, size_t, size_t, *mut FILE) -> size_t;

/// `read(2)`.
///
/// # Safety
/// As `read(2)`: `buf` is writable for `n` bytes.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    let f = real!(c"read", ReadFn);
    match far(buf, n) {
        // SAFETY: forwarded unchanged.
        None => unsafe { f(fd, buf, n) },
        // SAFETY: each chunk lies inside the caller's buffer.
        Some(r) => chunked(r, buf as usize, n, true, is_regular(fd), |p, l, _| unsafe {
            f(fd, p.cast(), l)
        }),
    }
}

/// `write(2)`.
///
/// # Safety
/// As `write(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    let f = real!(c"write", WriteFn);
    match far(buf, n) {
        // SAFETY: forwarded unchanged.
        None => unsafe { f(fd, buf, n) },
        // SAFETY: each chunk lies inside the caller's buffer.
        Some(r) => chunked(r, buf as usize, n, false, true, |p, l, _| unsafe {
            f(fd, p.cast(), l)
        }),
    }
}

/// `pread(2)`.
///
/// # Safety
/// As `pread(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pread(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: libc::off_t,
) -> ssize_t {
    let f = real!(c"pread", PreadFn);
    match far(buf, n) {
        // SAFETY: forwarded unchanged.
        None => unsafe { f(fd, buf, n, off) },
        // SAFETY: each chunk lies inside the caller's buffer.
        Some(r) => chunked(r, buf as usize, n, true, true, |p, l, d| unsafe {
            f(fd, p.cast(), l, off + d as libc::off_t)
        }),
    }
}

/// `pread64` (the same as `pread` on 64-bit).
///
/// # Safety
/// As `pread(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pread64(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: libc::off_t,
) -> ssize_t {
    // SAFETY: same contract.
    unsafe { pread(fd, buf, n, off) }
}

/// `pwrite(2)`.
///
/// # Safety
/// As `pwrite(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pwrite(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    off: libc::off_t,
) -> ssize_t {
    let f = real!(c"pwrite", PwriteFn);
    match far(buf, n) {
        // SAFETY: forwarded unchanged.
        None => unsafe { f(fd, buf, n, off) },
        // SAFETY: each chunk lies inside the caller's buffer.
        Some(r) => chunked(r, buf as usize, n, false, true, |p, l, d| unsafe {
            f(fd, p.cast(), l, off + d as libc::off_t)
        }),
    }
}

/// `pwrite64`.
///
/// # Safety
/// As `pwrite(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pwrite64(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    off: libc::off_t,
) -> ssize_t {
    // SAFETY: same contract.
    unsafe { pwrite(fd, buf, n, off) }
}

/// Shared body of readv/writev: pin every far iovec when the total fits one
/// chunk; otherwise do the vector element by element through read/write.
///
/// # Safety
/// `iov` points to `cnt` valid iovecs.
unsafe fn vectored(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    kernel_writes: bool,
    f: IovFn,
) -> ssize_t {
    if iov.is_null() || cnt <= 0 {
        // SAFETY: forwarded unchanged; the kernel reports the error.
        return unsafe { f(fd, iov, cnt) };
    }
    // SAFETY: the caller passes cnt valid iovecs.
    let v = unsafe { std::slice::from_raw_parts(iov, cnt.unsigned_abs() as usize) };
    // The kernel reads the array itself too, which may be far.
    let _array_pin =
        rt::get().and_then(|r| r.pin_for_io(iov as usize, std::mem::size_of_val(v), false));
    let Some(r) = v.iter().find_map(|e| far(e.iov_base, e.iov_len)) else {
        // SAFETY: forwarded unchanged.
        return unsafe { f(fd, iov, cnt) };
    };
    let total: usize = v
        .iter()
        .map(|e| e.iov_len)
        .fold(0usize, usize::saturating_add);
    if total <= r.io_chunk() {
        let mut pins = crate::pin::Pins::with_capacity(v.len());
        for e in v {
            if let Some(p) = r.pin_for_io(e.iov_base as usize, e.iov_len, kernel_writes) {
                pins.push(p);
            }
        }
        // SAFETY: forwarded unchanged, with the far pages pinned.
        let res = unsafe { f(fd, iov, cnt) };
        drop(pins);
        return res;
    }
    let regular = is_regular(fd);
    let mut done: ssize_t = 0;
    for e in v {
        // SAFETY: each element is a valid buffer per the caller.
        let got = unsafe {
            if kernel_writes {
                read(fd, e.iov_base, e.iov_len)
            } else {
                write(fd, e.iov_base, e.iov_len)
            }
        };
        if got < 0 {
            return if done > 0 { done } else { got };
        }
        done += got;
        if got.unsigned_abs() < e.iov_len || (kernel_writes && !regular) {
            break;
        }
    }
    done
}

/// `readv(2)`.
///
/// # Safety
/// As `readv(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    let f = real!(c"readv", IovFn);
    // SAFETY: same contract.
    unsafe { vectored(fd, iov, cnt, true, f) }
}

/// `writev(2)`.
///
/// # Safety
/// As `writev(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    let f = real!(c"writev", IovFn);
    // SAFETY: same contract.
    unsafe { vectored(fd, iov, cnt, false, f) }
}

/// Shared body of fread/fwrite: whole items of `size` bytes, in pinned
/// chunks when the buffer is far. `op(ptr, size, nmemb)` is the C library's
/// function.
fn stdio(
    ptr: *mut u8,
    size: size_t,
    nmemb: size_t,
    kernel_writes: bool,
    op: impl Fn(*mut u8, size_t, size_t) -> size_t,
) -> size_t {
    let Some(total) = size.checked_mul(nmemb) else {
        // The C library reports the overflow.
        return op(ptr, size, nmemb);
    };
    match far(ptr.cast(), total) {
        None => op(ptr, size, nmemb),
        Some(r) => {
            let bytes = chunked(r, ptr as usize, total, kernel_writes, true, |p, l, _| {
                op(p, 1, l) as ssize_t
            });
            usize::try_from(bytes).unwrap_or(0) / size.max(1)
        }
    }
}

/// The caller's stdio buffer as the byte pointer [`stdio`] takes.
trait StdioBuf {
    fn bytes(self) -> *mut u8;
}

impl StdioBuf for *mut c_void {
    fn bytes(self) -> *mut u8 {
        self.cast()
    }
}

/// `fwrite`'s buffer: `stdio` only reads through it when the kernel does not
/// write (`kernel_writes` false).
impl StdioBuf for *const c_void {
    fn bytes(self) -> *mut u8 {
        self.cast_mut().cast()
    }
}

/// One stdio wrapper: `$name` forwards whole items through [`stdio`] to the
/// C library's own `$name`; `$kernel_writes` says whether the data goes into
/// the caller's buffer.
macro_rules! stdio_wrapper {
    ($(#[$doc:meta])* $name:ident, $ptr:ty, $real:ty, $kernel_writes:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        #[doc = concat!("As `", stringify!($name), "(3)`.")]
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name(
            ptr: $ptr,
            size: size_t,
            nmemb: size_t,
            stream: *mut FILE,
        ) -> size_t {
            let f = real!(c_name!($name), $real);
            // SAFETY: forwarded to the C library with (chunks of) the
            // caller's buffer.
            stdio(ptr.bytes(), size, nmemb, $kernel_writes, |p, s, n| unsafe {
                f(p.cast(), s, n, stream)
            })
        }
    };
}

stdio_wrapper!(
    /// `fread(3)`.
    fread, *mut c_void, FreadFn, true
);
stdio_wrapper!(
    /// `fwrite(3)`.
    fwrite, *const c_void, FwriteFn, false
);
stdio_wrapper!(
    /// `fread_unlocked(3)`: what programs built with gnulib's unlocked-io (GNU
    /// coreutils' sort, for one) call for `fread`. Like `fread`, a large read
    /// goes from the kernel straight into the caller's buffer, inside the C
    /// library where no wrapper sees it, so it needs the same pinned chunks.
    fread_unlocked, *mut c_void, FreadFn, true
);
stdio_wrapper!(
    /// `fwrite_unlocked(3)`, for the same programs as [`fread_unlocked`].
    fwrite_unlocked, *const c_void, FwriteFn, false
);

type FputsFn = unsafe extern "C" fn(*const libc::c_char, *mut FILE) -> c_int;

extern "C" {
    static stdout: *mut FILE;
}

/// Shared body of fputs/puts: a far string longer than the stream's buffer
/// would be written by the C library straight from the string, with an
/// internal `write` no wrapper sees; so a far string goes out through
/// [`fwrite`] (pinned chunks) instead.
///
/// # Safety
/// `s` is a NUL-terminated string and `f` an open stream.
unsafe fn put_string(s: *const libc::c_char, f: *mut FILE, real: FputsFn) -> c_int {
    // SAFETY: per the contract; reading the string faults far pages in.
    let n = unsafe { libc::strlen(s) };
    if far(s.cast(), n + 1).is_none() {
        // SAFETY: forwarded unchanged.
        return unsafe { real(s, f) };
    }
    // SAFETY: the string's n bytes, to the caller's stream.
    if unsafe { fwrite(s.cast(), 1, n, f) } == n {
        1
    } else {
        libc::EOF
    }
}

/// `fputs(3)`.
///
/// # Safety
/// As `fputs(3)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn fputs(s: *const libc::c_char, f: *mut FILE) -> c_int {
    let real = real!(c"fputs", FputsFn);
    // SAFETY: same contract.
    unsafe { put_string(s, f, real) }
}

/// `puts(3)`: the string, then a newline, on stdout.
///
/// # Safety
/// As `puts(3)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn puts(s: *const libc::c_char) -> c_int {
    let real = real!(c"fputs", FputsFn);
    // SAFETY: glibc's stdout is initialised before main.
    let out = unsafe { stdout };
    // SAFETY: same contract; then one newline, as puts writes.
    unsafe {
        if put_string(s, out, real) == libc::EOF {
            return libc::EOF;
        }
        if libc::fputc(b'\n' as c_int, out) == libc::EOF {
            return libc::EOF;
        }
    }
    1
}

// _FORTIFY_SOURCE builds call these instead; glibc's versions call its
// internal read, bypassing the wrappers above.

type ReadChkFn = unsafe extern "C" fn(c_int, *mut c_void, size_t, size_t) -> ssize_t;

/// `__read_chk`.
///
/// # Safety
/// As `read(2)`; `buflen` is the buffer's real size.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
) -> ssize_t {
    if n > buflen {
        let f = real!(c"__read_chk", ReadChkFn);
        // SAFETY: glibc's check reports the overflow and aborts.
        return unsafe { f(fd, buf, n, buflen) };
    }
    // SAFETY: same contract as read.
    unsafe { read(fd, buf, n) }
}

type PreadChkFn = unsafe extern "C" fn(c_int, *mut c_void, size_t, libc::off_t, size_t) -> ssize_t;

/// `__pread_chk`.
///
/// # Safety
/// As `pread(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __pread_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: libc::off_t,
    buflen: size_t,
) -> ssize_t {
    if n > buflen {
        let f = real!(c"__pread_chk", PreadChkFn);
        // SAFETY: glibc's check reports the overflow and aborts.
        return unsafe { f(fd, buf, n, off, buflen) };
    }
    // SAFETY: same contract as pread.
    unsafe { pread(fd, buf, n, off) }
}

/// `__pread64_chk`.
///
/// # Safety
/// As `pread(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __pread64_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: libc::off_t,
    buflen: size_t,
) -> ssize_t {
    // SAFETY: same contract.
    unsafe { __pread_chk(fd, buf, n, off, buflen) }
}

type FreadChkFn = unsafe extern "C" fn(*mut c_void, size_t, size_t, size_t, *mut FILE) -> size_t;

/// `__fread_chk`.
///
/// # Safety
/// As `fread(3)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __fread_chk(
    ptr: *mut c_void,
    buflen: size_t,
    size: size_t,
    nmemb: size_t,
    stream: *mut FILE,
) -> size_t {
    if size.checked_mul(nmemb).is_none_or(|t| t > buflen) {
        let f = real!(c"__fread_chk", FreadChkFn);
        // SAFETY: glibc's check reports the overflow and aborts.
        return unsafe { f(ptr, buflen, size, nmemb, stream) };
    }
    // SAFETY: same contract as fread.
    unsafe { fread(ptr, size, nmemb, stream) }
}

crate::pin::wrap! {
    preadv(fd: c_int, v: *const iovec, n: c_int, off: off_t) -> ssize_t = SYS_preadv(fd, v, n, off);
    preadv64(fd: c_int, v: *const iovec, n: c_int, off: off_t) -> ssize_t = SYS_preadv(fd, v, n, off);
    pwritev(fd: c_int, v: *const iovec, n: c_int, off: off_t) -> ssize_t = SYS_pwritev(fd, v, n, off);
    pwritev64(fd: c_int, v: *const iovec, n: c_int, off: off_t) -> ssize_t
        = SYS_pwritev(fd, v, n, off);
    preadv2(fd: c_int, v: *const iovec, n: c_int, off: off_t, fl: c_int) -> ssize_t
        = SYS_preadv2(fd, v, n, off);
    preadv64v2(fd: c_int, v: *const iovec, n: c_int, off: off_t, fl: c_int) -> ssize_t
        = SYS_preadv2(fd, v, n, off);
    pwritev2(fd: c_int, v: *const iovec, n: c_int, off: off_t, fl: c_int) -> ssize_t
        = SYS_pwritev2(fd, v, n, off);
    pwritev64v2(fd: c_int, v: *const iovec, n: c_int, off: off_t, fl: c_int) -> ssize_t
        = SYS_pwritev2(fd, v, n, off);
    vmsplice(fd: c_int, v: *const iovec, n: size_t, fl: c_uint) -> ssize_t
        = SYS_vmsplice(fd, v, n, fl);
    splice(fi: c_int, oi: *mut off_t, fo: c_int, oo: *mut off_t, n: size_t, fl: c_uint) -> ssize_t
        = SYS_splice(fi, oi, fo, oo, n, fl);
    getrandom(buf: *mut c_void, n: size_t, fl: c_uint) -> ssize_t = SYS_getrandom(buf, n, fl);
    getentropy(buf: *mut c_void, n: size_t) -> c_int = SYS_getrandom(buf, n);
    getdents64(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t = SYS_getdents64(fd, buf, n);
    sendfile(o: c_int, i: c_int, off: *mut off_t, n: size_t) -> ssize_t = SYS_sendfile(o, i, off, n);
    sendfile64(o: c_int, i: c_int, off: *mut off_t, n: size_t) -> ssize_t
        = SYS_sendfile(o, i, off, n);
    copy_file_range(fi: c_int, oi: *mut off_t, fo: c_int, oo: *mut off_t, n: size_t, fl: c_uint)
        -> ssize_t = SYS_copy_file_range(fi, oi, fo, oo, n, fl);
}
