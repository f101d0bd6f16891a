//! The one place where farmem talks to the kernel.
//!
//! Every `libc` call, ioctl and raw syscall of the project lives here, each in a
//! small wrapper that returns `io::Result`. Callers above this crate hold no
//! `unsafe` for OS access. Kernel resources (a userfaultfd, a mapping, a socket)
//! are owned by types whose `Drop` releases them.
//!
//! Why raw syscalls for I/O: `libfarmem.so` interposes `read`, `write`, `recv`,
//! … so that user programs can do I/O into far buffers. The runtime's own I/O
//! must not loop through those wrappers (and must be async-signal-safe, since
//! it runs inside the SIGBUS handler), so it goes straight to `syscall(2)`.

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
compile_error!("farmem supports Linux on x86_64 only (it reads the page-fault error code from the signal frame)");

// `usize_from` relies on it.
const _: () = assert!(usize::BITS == 64);

pub mod child;
pub mod dispatch;
pub mod dl;
pub mod fs;
pub mod mapvec;
pub mod mem;
pub mod memfd;
pub mod msg;
pub mod net;
pub mod numa;
pub mod pagemap;
pub mod process;
pub mod signal;
pub mod ucx;
pub mod uffd;
pub mod units;
pub use units::format_size;

use std::io;

/// The page size farmem manages. x86_64 base pages; checked against
/// `sysconf(_SC_PAGESIZE)` at runtime start.
pub const PAGE_SIZE: usize = 4096;

/// `v` as a `usize`, losslessly: farmem builds only for x86_64, where `usize`
/// is 64 bits wide (asserted at compile time above). Usable in the fault
/// handler: it cannot panic.
#[inline]
#[must_use]
// The one u64 -> usize cast of the project: it cannot truncate on x86_64.
#[allow(clippy::cast_possible_truncation)]
pub const fn usize_from(v: u64) -> usize {
    v as usize
}

/// The C `int` argument held in the 64-bit register image `reg` of a system
/// call's argument: its low 32 bits, all the kernel reads of an int (the
/// value `reg as c_int` gives, without a cast that could hide a truncation).
/// Usable in the fault handler: it cannot panic.
#[inline]
#[must_use]
pub const fn int_arg(reg: usize) -> libc::c_int {
    ((reg as u64 & 0xFFFF_FFFF) as u32) as libc::c_int
}

/// Turn a C return value of -1 into the thread's `errno`.
pub(crate) fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Like [`cvt`] for `syscall(2)` and `ssize_t` results.
pub(crate) fn cvt_long(ret: libc::c_long) -> io::Result<usize> {
    // Fails exactly when `ret` is negative.
    usize::try_from(ret).map_err(|_| io::Error::last_os_error())
}

/// `sysconf(_SC_PAGESIZE)`.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(v).unwrap_or(0).max(1)
}

/// Physical memory of the machine in bytes (`sysconf(_SC_PHYS_PAGES)`).
pub fn phys_memory() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
    u64::try_from(pages).unwrap_or(0) * page_size() as u64
}

/// Number of online CPUs.
pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(0).max(1)
}

/// Monotonic clock in nanoseconds (vDSO `clock_gettime`, async-signal-safe).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    // CLOCK_MONOTONIC is never negative, so `unsigned_abs` is the value itself.
    ts.tv_sec.unsigned_abs() * 1_000_000_000 + ts.tv_nsec.unsigned_abs()
}

/// Write a whole message to stderr with raw syscalls; usable inside a signal
/// handler, where `eprintln!` (which locks and may allocate) is not.
pub fn write_stderr(msg: &[u8]) {
    let _ = write_all_fd(2, msg);
}

/// Write all of `buf` to `fd` with raw `write` system calls (async-signal-safe,
/// and never through an interposed libc `write`), retrying on EINTR.
pub fn write_all_fd(fd: i32, buf: &[u8]) -> io::Result<()> {
    let mut off = 0;
    while off < buf.len() {
        // SAFETY: the pointer and length describe the live slice `buf[off..]`.
        let r = unsafe {
            crate::raw_syscall!(
                libc::SYS_write,
                fd,
                buf[off..].as_ptr() as usize,
                buf.len() - off,
            )
        };
        if r <= 0 {
            let e = io::Error::last_os_error();
            if r < 0 && e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(if r == 0 {
                io::Error::from(io::ErrorKind::WriteZero)
            } else {
                e
            });
        }
        off += usize_from(r.unsigned_abs()); // r > 0 here
    }
    Ok(())
}

/// Print `msg` and terminate the process at once (async-signal-safe). Used when
/// a far page cannot be served: stopping is the only way not to hand the program
/// wrong data.
pub fn fatal(msg: &[u8]) -> ! {
    write_stderr(msg);
    // SAFETY: abort is async-signal-safe and never returns.
    unsafe { libc::abort() }
}

/// `sched_yield(2)`.
pub fn sched_yield() {
    // SAFETY: no preconditions.
    unsafe { crate::raw_syscall!(libc::SYS_sched_yield) };
}

/// The CPU relax hint for spin loops.
#[inline]
pub fn cpu_relax() {
    std::hint::spin_loop();
}

/// The C library's `syscall(3)`, found past any interposer.
///
/// farmem's own system calls (socket transfers of far pages, `madvise` on
/// the arena, the uffd ioctls' neighbours) must reach the kernel unchanged:
/// `libfarmem` and the `farmem run` shim interpose `syscall` and the libc
/// entry points to pin far buffers, and running farmem's own fault path
/// through those wrappers would pin the very pages it is moving.
/// `dlsym(RTLD_NEXT)` from the object this crate is linked into skips that
/// object's own definitions.
pub fn raw_syscall_fn() -> RawSyscall {
    static NEXT: dl::Next = dl::Next::new(c"syscall");
    let f = NEXT.get_or(libc::syscall as *const () as usize);
    // SAFETY: `f` is the address of a function with the C prototype of
    // `syscall(3)`.
    unsafe { std::mem::transmute::<usize, RawSyscall>(f) }
}

/// The prototype of `syscall(3)`.
pub type RawSyscall = unsafe extern "C" fn(libc::c_long, ...) -> libc::c_long;

/// `syscall(3)` through [`raw_syscall_fn`]: never through farmem's wrappers.
#[macro_export]
macro_rules! raw_syscall {
    ($nr:expr $(, $arg:expr)* $(,)?) => {
        ($crate::raw_syscall_fn())($nr as libc::c_long $(, $arg)*)
    };
}

thread_local! {
    static INSIDE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// While alive, this thread runs farmem's own page I/O (a UCX call that
/// may allocate, such as its TCP transport growing a buffer pool): the
/// preload shim then serves the thread's allocations from the C library,
/// never from far memory, which would re-enter the runtime and wait for
/// the lane this thread holds. Const-initialised, so usable in a signal
/// handler.
pub struct Inside(bool);

impl Inside {
    pub fn enter() -> Inside {
        Inside(INSIDE.with(|c| c.replace(true)))
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        let was = self.0;
        INSIDE.with(|c| c.set(was));
    }
}

/// Whether this thread is inside farmem's page I/O (see [`Inside`]).
pub fn inside() -> bool {
    INSIDE.with(std::cell::Cell::get)
}
