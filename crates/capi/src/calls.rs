//! Every other libc entry point that hands the kernel a user buffer, and
//! `syscall(2)`, generated from one list and driven by one table
//! ([`crate::buffers`]).
//!
//! Each wrapper forwards to the next definition of its symbol. When the
//! runtime runs and one of the call's buffers (as the table lists them) lies
//! in far memory, it first pins those pages and faults them in from user mode
//! ([`pinned`]). If the call still fails with EFAULT on far memory, the
//! program is stopped with a message naming the call and the address: a
//! silent EFAULT would corrupt it.
//!
//! `read`, `write`, their positional, vectored and socket forms and
//! `fread`/`fwrite` live in [`crate::io`], which also splits huge transfers
//! into chunks the budget can hold.

use crate::buffers;
use farmem_runtime::{self as rt, IoPin};
use farmem_sys::msg::MsgBuf;
use farmem_sys::units::Size;
use libc::{
    c_char, c_int, c_long, c_uchar, c_uint, c_ulong, c_void, epoll_event, fd_set, iovec, mmsghdr,
    mode_t, msghdr, nfds_t, off_t, pid_t, pollfd, rusage, siginfo_t, sigset_t, size_t, sockaddr,
    socklen_t, ssize_t, timespec, timeval,
};
use std::fmt::Write as _;
use std::sync::atomic::AtomicUsize;

/// A C return value that can say "failed, see errno".
pub trait Ret: Copy {
    fn failed(self) -> bool;
}
impl Ret for c_int {
    fn failed(self) -> bool {
        self == -1
    }
}
impl Ret for isize {
    fn failed(self) -> bool {
        self == -1
    }
}
impl Ret for i64 {
    fn failed(self) -> bool {
        self == -1
    }
}
impl Ret for *mut c_char {
    fn failed(self) -> bool {
        self.is_null()
    }
}

/// The pins one call holds (released on drop). Most calls need a few, kept
/// inline; the rest go in memory mapped for the call. Neither allocates:
/// this runs in the SIGSYS handler, which can interrupt the program inside
/// `malloc`, and `mmap` (a raw system call) is safe there.
pub struct Pins {
    inline: [Option<IoPin>; 6],
    n: usize,
    spill: Option<Spill>,
}

impl Pins {
    /// Room for `want` pins.
    pub fn with_capacity(want: usize) -> Pins {
        let spill = (want > 6).then(|| Spill::with_capacity(want - 6));
        Pins {
            inline: Default::default(),
            n: 0,
            spill,
        }
    }

    /// Keep `p` until the call ends. Past the capacity asked for, the pin
    /// is released at once (the caller counted the buffers it pins).
    pub fn push(&mut self, p: IoPin) {
        if self.n < self.inline.len() {
            self.inline[self.n] = Some(p);
            self.n += 1;
        } else if let Some(s) = &mut self.spill {
            s.push(p);
        }
    }
}

/// Pins past the inline ones, in an anonymous mapping of their own.
pub struct Spill {
    map: farmem_sys::mem::Mapping,
    len: usize,
    cap: usize,
}

impl Spill {
    fn with_capacity(cap: usize) -> Spill {
        let bytes = (cap * std::mem::size_of::<IoPin>()).next_multiple_of(farmem_sys::PAGE_SIZE);
        match farmem_sys::mem::Mapping::anonymous(bytes, false) {
            Ok(map) => Spill { map, len: 0, cap },
            Err(e) => {
                let mut m = farmem_sys::msg::MsgBuf::new();
                let _ = writeln!(
                    m,
                    "farmem: cannot map room for {cap} pins of one system call: {e}"
                );
                farmem_sys::fatal(m.as_bytes())
            }
        }
    }

    fn push(&mut self, p: IoPin) {
        if self.len == self.cap {
            drop(p);
            return;
        }
        // SAFETY: the mapping holds `cap` IoPins (page-aligned, so aligned
        // for IoPin); slot `len` is past the initialized ones.
        unsafe { self.map.as_ptr().cast::<IoPin>().add(self.len).write(p) };
        self.len += 1;
    }
}

impl Drop for Spill {
    fn drop(&mut self) {
        for i in 0..self.len {
            // SAFETY: slots below `len` were written once and never moved;
            // each is dropped once, here, before the mapping goes.
            unsafe { std::ptr::drop_in_place(self.map.as_ptr().cast::<IoPin>().add(i)) };
        }
    }
}

/// Pin and fault in the far buffers of system call `nr` with arguments
/// `a`. Returns the pins (released on drop) and the first far address, or
/// None when the call touches no far memory. Two passes over the call's
/// buffers (count, then pin), so nothing is collected on the heap.
///
/// # Safety
/// `a` are the arguments the program passes to the kernel for `nr`.
unsafe fn pin_buffers(
    r: &'static rt::Runtime,
    nr: c_long,
    a: &[usize; 6],
) -> Option<(Pins, usize)> {
    let mut n = 0usize;
    let mut first = 0usize;
    let mut total = 0usize;
    // SAFETY: per the contract.
    unsafe {
        buffers::for_each(nr, a, &mut |b| {
            if r.overlaps(b.addr, b.len) {
                total = total.saturating_add(b.len);
                if n == 0 {
                    first = b.addr;
                }
                n += 1;
            }
        })
    };
    if n == 0 {
        return None;
    }
    if total > r.pin_limit_bytes() {
        fatal_call_with(nr, first, |m| {
            let _ = write!(
                m,
                "hands the kernel {} of far memory in one call, more than the {} that may be pinned \
                 (3/4 of the local budget); raise FARMEM_LOCAL",
                Size(total as u64),
                Size(r.pin_limit_bytes() as u64)
            );
        });
    }
    let mut pins = Pins::with_capacity(n);
    // SAFETY: per the contract; the same buffers as the first pass.
    unsafe {
        buffers::for_each(nr, a, &mut |b| {
            if r.overlaps(b.addr, b.len) {
                if let Some(p) = r.pin_for_io(b.addr, b.len, b.kernel_writes) {
                    pins.push(p);
                }
            }
        })
    };
    Some((pins, first))
}

/// Pin the far ranges the table lists for `nr` with arguments `a` (pass 0
/// for the arguments a caller pins itself, such as a chunked data buffer);
/// released on drop.
///
/// # Safety
/// As [`pinned`].
pub unsafe fn pin_args(nr: c_long, a: &[usize; 6]) -> Option<Pins> {
    let r = rt::get()?;
    // SAFETY: per the contract.
    unsafe { pin_buffers(r, nr, a) }.map(|(pins, _)| pins)
}

/// Run `call` (system call `nr`'s libc entry point, or the system call
/// itself) with its far buffers pinned.
///
/// # Safety
/// `a` are the arguments `call` passes to the kernel for `nr`.
#[inline]
pub unsafe fn pinned<R: Ret>(nr: c_long, a: [usize; 6], call: impl FnOnce() -> R) -> R {
    // SAFETY: per the contract.
    unsafe { pinned_with(nr, a, true, call) }
}

/// [`pinned`], with the EFAULT check optional (`process_vm_*` may fail on
/// the other process's memory, which the caller handles).
///
/// # Safety
/// As [`pinned`].
#[inline]
pub unsafe fn pinned_with<R: Ret>(
    nr: c_long,
    a: [usize; 6],
    check_efault: bool,
    call: impl FnOnce() -> R,
) -> R {
    let Some(r) = rt::get() else {
        return call();
    };
    // Every thread that makes system calls while far memory exists gets the
    // raw-call net (threads that existed before farmem started are armed
    // here), and one the net let run a call natively is blocked again.
    crate::dispatch::arm_this_thread();
    // SAFETY: per the contract.
    let Some((pins, first)) = (unsafe { pin_buffers(r, nr, &a) }) else {
        return call();
    };
    let ret = call();
    let efault = check_efault && ret.failed() && errno() == libc::EFAULT;
    drop(pins);
    if efault {
        fatal_call(
            nr,
            first,
            "failed with EFAULT although its far pages were pinned",
        );
    }
    ret
}

fn errno() -> c_int {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() }
}

/// Stop the program: a system call on far memory cannot be made to work.
pub fn fatal_call(nr: c_long, addr: usize, what: &str) -> ! {
    fatal_call_with(nr, addr, |m| {
        let _ = m.write_str(what);
    })
}

/// [`fatal_call`], with what went wrong written by `what`.
pub fn fatal_call_with(nr: c_long, addr: usize, what: impl FnOnce(&mut MsgBuf)) -> ! {
    let mut m = MsgBuf::new();
    fatal_message(&mut m, nr, addr, what);
    farmem_sys::fatal(m.as_bytes())
}

/// The message [`fatal_call`] stops the program with, formatted into `m`
/// without allocating (it is reached from the SIGSYS handler).
pub fn fatal_message(m: &mut MsgBuf, nr: c_long, addr: usize, what: impl FnOnce(&mut MsgBuf)) {
    let _ = write!(
        m,
        "farmem: system call {} ({nr}) on far memory at {addr:#x} ",
        syscall_name(nr)
    );
    what(m);
    let _ = m.write_str(
        ". The program is stopped rather than given a wrong result. Please report this with \
         the command line (docs/design.md, \"System calls on far memory\").\n",
    );
}

/// A readable name for the system calls the table knows.
#[allow(non_upper_case_globals)] // libc's SYS_* names
pub fn syscall_name(nr: c_long) -> &'static str {
    use libc::*;
    match nr {
        SYS_read => "read",
        SYS_write => "write",
        SYS_pread64 => "pread64",
        SYS_pwrite64 => "pwrite64",
        SYS_readv => "readv",
        SYS_writev => "writev",
        SYS_preadv => "preadv",
        SYS_pwritev => "pwritev",
        SYS_preadv2 => "preadv2",
        SYS_pwritev2 => "pwritev2",
        SYS_recvfrom => "recvfrom",
        SYS_sendto => "sendto",
        SYS_recvmsg => "recvmsg",
        SYS_sendmsg => "sendmsg",
        SYS_recvmmsg => "recvmmsg",
        SYS_sendmmsg => "sendmmsg",
        SYS_getrandom => "getrandom",
        SYS_getdents64 => "getdents64",
        SYS_process_vm_readv => "process_vm_readv",
        SYS_process_vm_writev => "process_vm_writev",
        SYS_vmsplice => "vmsplice",
        SYS_splice => "splice",
        SYS_futex => "futex",
        SYS_futex_waitv => "futex_waitv",
        SYS_epoll_wait => "epoll_wait",
        SYS_epoll_pwait => "epoll_pwait",
        SYS_poll => "poll",
        SYS_ppoll => "ppoll",
        SYS_select => "select",
        SYS_getsockopt => "getsockopt",
        SYS_setsockopt => "setsockopt",
        SYS_accept4 => "accept4",
        SYS_connect => "connect",
        SYS_fstat => "fstat",
        SYS_newfstatat => "newfstatat",
        SYS_statx => "statx",
        SYS_openat => "openat",
        SYS_execve => "execve",
        SYS_io_submit => "io_submit",
        SYS_io_uring_enter => "io_uring_enter",
        SYS_msgsnd => "msgsnd",
        SYS_msgrcv => "msgrcv",
        SYS_sendfile => "sendfile",
        SYS_getxattr => "getxattr",
        _ => "(number)",
    }
}

/// Generates the libc wrappers: `name(args) -> ret = SYS_nr(syscall args)`.
/// The syscall arguments are the libc arguments in the kernel's order (libc
/// entry points that are not a plain system call name the one they make).
macro_rules! wrap {
    ($( $(#[$doc:meta])* $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty
        = $nr:ident ( $($sa:expr),* ) ; )*) => { $(
        $(#[$doc])*
        ///
        /// # Safety
        /// As the C library function of this name.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            type F = unsafe extern "C" fn($($ty),*) -> $ret;
            let f = crate::io::real!(crate::io::c_name!($name), F);
            let mut a = [0usize; 6];
            let given = [$(crate::Reg::reg($sa)),*];
            a[..given.len()].copy_from_slice(&given);
            // SAFETY: forwarded unchanged, with the far buffers the table
            // lists for this system call pinned.
            unsafe { pinned(libc::$nr, a, || f($($arg),*)) }
        }
    )* };
}

wrap! {
    sendmsg(fd: c_int, m: *const msghdr, flags: c_int) -> ssize_t = SYS_sendmsg(fd, m, flags);
    recvmsg(fd: c_int, m: *mut msghdr, flags: c_int) -> ssize_t = SYS_recvmsg(fd, m, flags);
    sendmmsg(fd: c_int, v: *mut mmsghdr, n: c_uint, flags: c_int) -> c_int
        = SYS_sendmmsg(fd, v, n, flags);
    recvmmsg(fd: c_int, v: *mut mmsghdr, n: c_uint, flags: c_int, t: *mut timespec) -> c_int
        = SYS_recvmmsg(fd, v, n, flags, t);
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
    epoll_wait(ep: c_int, ev: *mut epoll_event, max: c_int, t: c_int) -> c_int
        = SYS_epoll_wait(ep, ev, max, t);
    epoll_pwait(ep: c_int, ev: *mut epoll_event, max: c_int, t: c_int, m: *const sigset_t) -> c_int
        = SYS_epoll_pwait(ep, ev, max, t);
    epoll_ctl(ep: c_int, op: c_int, fd: c_int, ev: *mut epoll_event) -> c_int
        = SYS_epoll_ctl(ep, op, fd, ev);
    poll(fds: *mut pollfd, n: nfds_t, t: c_int) -> c_int = SYS_poll(fds, n, t);
    ppoll(fds: *mut pollfd, n: nfds_t, t: *const timespec, m: *const sigset_t) -> c_int
        = SYS_ppoll(fds, n, t);
    select(n: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set, t: *mut timeval) -> c_int
        = SYS_select(n, r, w, e, t);
    pselect(n: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set, t: *const timespec,
        m: *const sigset_t) -> c_int = SYS_pselect6(n, r, w, e, t);
    getsockopt(fd: c_int, l: c_int, o: c_int, v: *mut c_void, n: *mut socklen_t) -> c_int
        = SYS_getsockopt(fd, l, o, v, n);
    setsockopt(fd: c_int, l: c_int, o: c_int, v: *const c_void, n: socklen_t) -> c_int
        = SYS_setsockopt(fd, l, o, v, n);
    accept(fd: c_int, a: *mut sockaddr, n: *mut socklen_t) -> c_int = SYS_accept(fd, a, n);
    accept4(fd: c_int, a: *mut sockaddr, n: *mut socklen_t, fl: c_int) -> c_int
        = SYS_accept4(fd, a, n);
    getsockname(fd: c_int, a: *mut sockaddr, n: *mut socklen_t) -> c_int
        = SYS_getsockname(fd, a, n);
    getpeername(fd: c_int, a: *mut sockaddr, n: *mut socklen_t) -> c_int
        = SYS_getpeername(fd, a, n);
    connect(fd: c_int, a: *const sockaddr, n: socklen_t) -> c_int = SYS_connect(fd, a, n);
    bind(fd: c_int, a: *const sockaddr, n: socklen_t) -> c_int = SYS_bind(fd, a, n);
    socketpair(d: c_int, t: c_int, p: c_int, sv: *mut c_int) -> c_int = SYS_socketpair(d, t, p, sv);
    pipe(fds: *mut c_int) -> c_int = SYS_pipe(fds);
    pipe2(fds: *mut c_int, fl: c_int) -> c_int = SYS_pipe2(fds, fl);
    fstat(fd: c_int, st: *mut libc::stat) -> c_int = SYS_fstat(fd, st);
    fstat64(fd: c_int, st: *mut libc::stat) -> c_int = SYS_fstat(fd, st);
    stat(p: *const c_char, st: *mut libc::stat) -> c_int = SYS_stat(p, st);
    stat64(p: *const c_char, st: *mut libc::stat) -> c_int = SYS_stat(p, st);
    lstat(p: *const c_char, st: *mut libc::stat) -> c_int = SYS_lstat(p, st);
    lstat64(p: *const c_char, st: *mut libc::stat) -> c_int = SYS_lstat(p, st);
    fstatat(d: c_int, p: *const c_char, st: *mut libc::stat, fl: c_int) -> c_int
        = SYS_newfstatat(d, p, st, fl);
    fstatat64(d: c_int, p: *const c_char, st: *mut libc::stat, fl: c_int) -> c_int
        = SYS_newfstatat(d, p, st, fl);
    statx(d: c_int, p: *const c_char, fl: c_int, mask: c_uint, st: *mut libc::statx) -> c_int
        = SYS_statx(d, p, fl, mask, st);
    /// `open(2)`; the optional mode is passed in the same register.
    open(p: *const c_char, fl: c_int, mode: mode_t) -> c_int = SYS_open(p, fl, mode);
    open64(p: *const c_char, fl: c_int, mode: mode_t) -> c_int = SYS_open(p, fl, mode);
    openat(d: c_int, p: *const c_char, fl: c_int, mode: mode_t) -> c_int
        = SYS_openat(d, p, fl, mode);
    openat64(d: c_int, p: *const c_char, fl: c_int, mode: mode_t) -> c_int
        = SYS_openat(d, p, fl, mode);
    __open_2(p: *const c_char, fl: c_int) -> c_int = SYS_open(p, fl);
    __open64_2(p: *const c_char, fl: c_int) -> c_int = SYS_open(p, fl);
    creat(p: *const c_char, mode: mode_t) -> c_int = SYS_creat(p, mode);
    access(p: *const c_char, m: c_int) -> c_int = SYS_access(p, m);
    unlink(p: *const c_char) -> c_int = SYS_unlink(p);
    mkdir(p: *const c_char, m: mode_t) -> c_int = SYS_mkdir(p, m);
    rename(a: *const c_char, b: *const c_char) -> c_int = SYS_rename(a, b);
    readlink(p: *const c_char, b: *mut c_char, n: size_t) -> ssize_t = SYS_readlink(p, b, n);
    getcwd(b: *mut c_char, n: size_t) -> *mut c_char = SYS_getcwd(b, n);
    execve(p: *const c_char, v: *const *const c_char, e: *const *const c_char) -> c_int
        = SYS_execve(p, v, e);
    execv(p: *const c_char, v: *const *const c_char) -> c_int = SYS_execve(p, v);
    execvp(p: *const c_char, v: *const *const c_char) -> c_int = SYS_execve(p, v);
    execvpe(p: *const c_char, v: *const *const c_char, e: *const *const c_char) -> c_int
        = SYS_execve(p, v, e);
    wait4(pid: pid_t, s: *mut c_int, o: c_int, ru: *mut rusage) -> pid_t = SYS_wait4(pid, s, o, ru);
    waitpid(pid: pid_t, s: *mut c_int, o: c_int) -> pid_t = SYS_wait4(pid, s, o);
    waitid(t: c_int, id: c_uint, i: *mut siginfo_t, o: c_int) -> c_int = SYS_waitid(t, id, i, o);
    nanosleep(a: *const timespec, b: *mut timespec) -> c_int = SYS_nanosleep(a, b);
    uname(b: *mut libc::utsname) -> c_int = SYS_uname(b);
    sysinfo(b: *mut libc::sysinfo) -> c_int = SYS_sysinfo(b);
    getrusage(w: c_int, b: *mut rusage) -> c_int = SYS_getrusage(w, b);
    sched_getaffinity(pid: pid_t, n: size_t, m: *mut libc::cpu_set_t) -> c_int
        = SYS_sched_getaffinity(pid, n, m);
    sched_setaffinity(pid: pid_t, n: size_t, m: *const libc::cpu_set_t) -> c_int
        = SYS_sched_setaffinity(pid, n, m);
    mincore(a: *mut c_void, n: size_t, v: *mut c_uchar) -> c_int = SYS_mincore(a, n, v);
    msgsnd(id: c_int, p: *const c_void, n: size_t, fl: c_int) -> c_int = SYS_msgsnd(id, p, n, fl);
    msgrcv(id: c_int, p: *mut c_void, n: size_t, t: c_long, fl: c_int) -> ssize_t
        = SYS_msgrcv(id, p, n, t, fl);
    sendfile(o: c_int, i: c_int, off: *mut off_t, n: size_t) -> ssize_t = SYS_sendfile(o, i, off, n);
    sendfile64(o: c_int, i: c_int, off: *mut off_t, n: size_t) -> ssize_t
        = SYS_sendfile(o, i, off, n);
    copy_file_range(fi: c_int, oi: *mut off_t, fo: c_int, oo: *mut off_t, n: size_t, fl: c_uint)
        -> ssize_t = SYS_copy_file_range(fi, oi, fo, oo, n, fl);
    getxattr(p: *const c_char, k: *const c_char, v: *mut c_void, n: size_t) -> ssize_t
        = SYS_getxattr(p, k, v, n);
    fgetxattr(fd: c_int, k: *const c_char, v: *mut c_void, n: size_t) -> ssize_t
        = SYS_fgetxattr(fd, k, v, n);
    setxattr(p: *const c_char, k: *const c_char, v: *const c_void, n: size_t, fl: c_int) -> c_int
        = SYS_setxattr(p, k, v, n, fl);
    fsetxattr(fd: c_int, k: *const c_char, v: *const c_void, n: size_t, fl: c_int) -> c_int
        = SYS_fsetxattr(fd, k, v, n, fl);
    rmdir(p: *const c_char) -> c_int = SYS_rmdir(p);
    chdir(p: *const c_char) -> c_int = SYS_chdir(p);
    truncate(p: *const c_char, n: off_t) -> c_int = SYS_truncate(p, n);
    truncate64(p: *const c_char, n: off_t) -> c_int = SYS_truncate(p, n);
    chmod(p: *const c_char, m: mode_t) -> c_int = SYS_chmod(p, m);
    chown(p: *const c_char, u: libc::uid_t, g: libc::gid_t) -> c_int = SYS_chown(p, u, g);
    lchown(p: *const c_char, u: libc::uid_t, g: libc::gid_t) -> c_int = SYS_lchown(p, u, g);
    link(a: *const c_char, b: *const c_char) -> c_int = SYS_link(a, b);
    symlink(a: *const c_char, b: *const c_char) -> c_int = SYS_symlink(a, b);
    symlinkat(a: *const c_char, d: c_int, b: *const c_char) -> c_int = SYS_symlinkat(a, d, b);
    linkat(d1: c_int, a: *const c_char, d2: c_int, b: *const c_char, fl: c_int) -> c_int
        = SYS_linkat(d1, a, d2, b, fl);
    renameat(d1: c_int, a: *const c_char, d2: c_int, b: *const c_char) -> c_int
        = SYS_renameat(d1, a, d2, b);
    renameat2(d1: c_int, a: *const c_char, d2: c_int, b: *const c_char, fl: c_uint) -> c_int
        = SYS_renameat2(d1, a, d2, b, fl);
    unlinkat(d: c_int, p: *const c_char, fl: c_int) -> c_int = SYS_unlinkat(d, p, fl);
    mkdirat(d: c_int, p: *const c_char, m: mode_t) -> c_int = SYS_mkdirat(d, p, m);
    faccessat(d: c_int, p: *const c_char, m: c_int, fl: c_int) -> c_int
        = SYS_faccessat(d, p, m, fl);
    fchmodat(d: c_int, p: *const c_char, m: mode_t, fl: c_int) -> c_int = SYS_fchmodat(d, p, m);
    fchownat(d: c_int, p: *const c_char, u: libc::uid_t, g: libc::gid_t, fl: c_int) -> c_int
        = SYS_fchownat(d, p, u, g, fl);
    mknod(p: *const c_char, m: mode_t, dev: libc::dev_t) -> c_int = SYS_mknod(p, m, dev);
    mknodat(d: c_int, p: *const c_char, m: mode_t, dev: libc::dev_t) -> c_int
        = SYS_mknodat(d, p, m, dev);
    mkfifo(p: *const c_char, m: mode_t) -> c_int = SYS_mknod(p, m);
    readlinkat(d: c_int, p: *const c_char, b: *mut c_char, n: size_t) -> ssize_t
        = SYS_readlinkat(d, p, b, n);
    utimensat(d: c_int, p: *const c_char, t: *const timespec, fl: c_int) -> c_int
        = SYS_utimensat(d, p, t, fl);
    futimens(fd: c_int, t: *const timespec) -> c_int = SYS_utimensat(fd, 0usize, t);
    inotify_add_watch(fd: c_int, p: *const c_char, m: u32) -> c_int
        = SYS_inotify_add_watch(fd, p, m);
    memfd_create(p: *const c_char, fl: c_uint) -> c_int = SYS_memfd_create(p, fl);
    listxattr(p: *const c_char, l: *mut c_char, n: size_t) -> ssize_t = SYS_listxattr(p, l, n);
    llistxattr(p: *const c_char, l: *mut c_char, n: size_t) -> ssize_t = SYS_llistxattr(p, l, n);
    flistxattr(fd: c_int, l: *mut c_char, n: size_t) -> ssize_t = SYS_flistxattr(fd, l, n);
    /// `fcntl(2)`; the optional argument is passed in the same register.
    fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int = SYS_fcntl(fd, cmd, arg);
    fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int = SYS_fcntl(fd, cmd, arg);
    /// `ioctl(2)`: the generic requests the table knows (see design.md).
    ioctl(fd: c_int, req: c_ulong, arg: usize) -> c_int = SYS_ioctl(fd, req, arg);
    statfs(p: *const c_char, b: *mut libc::statfs) -> c_int = SYS_statfs(p, b);
    statfs64(p: *const c_char, b: *mut libc::statfs) -> c_int = SYS_statfs(p, b);
    fstatfs(fd: c_int, b: *mut libc::statfs) -> c_int = SYS_fstatfs(fd, b);
    fstatfs64(fd: c_int, b: *mut libc::statfs) -> c_int = SYS_fstatfs(fd, b);
    getrlimit(r: c_int, l: *mut libc::rlimit) -> c_int = SYS_getrlimit(r, l);
    getrlimit64(r: c_int, l: *mut libc::rlimit) -> c_int = SYS_getrlimit(r, l);
    setrlimit(r: c_int, l: *const libc::rlimit) -> c_int = SYS_setrlimit(r, l);
    setrlimit64(r: c_int, l: *const libc::rlimit) -> c_int = SYS_setrlimit(r, l);
    prlimit(pid: pid_t, r: c_int, n: *const libc::rlimit, o: *mut libc::rlimit) -> c_int
        = SYS_prlimit64(pid, r, n, o);
    prlimit64(pid: pid_t, r: c_int, n: *const libc::rlimit, o: *mut libc::rlimit) -> c_int
        = SYS_prlimit64(pid, r, n, o);
    semop(id: c_int, ops: *mut libc::sembuf, n: size_t) -> c_int = SYS_semop(id, ops, n);
    semtimedop(id: c_int, ops: *mut libc::sembuf, n: size_t, t: *const timespec) -> c_int
        = SYS_semtimedop(id, ops, n, t);
    timerfd_settime(fd: c_int, fl: c_int, n: *const libc::itimerspec, o: *mut libc::itimerspec)
        -> c_int = SYS_timerfd_settime(fd, fl, n, o);
    timerfd_gettime(fd: c_int, c: *mut libc::itimerspec) -> c_int = SYS_timerfd_gettime(fd, c);
    getresuid(r: *mut libc::uid_t, e: *mut libc::uid_t, s: *mut libc::uid_t) -> c_int
        = SYS_getresuid(r, e, s);
    getresgid(r: *mut libc::gid_t, e: *mut libc::gid_t, s: *mut libc::gid_t) -> c_int
        = SYS_getresgid(r, e, s);
    sigaltstack(n: *const libc::stack_t, o: *mut libc::stack_t) -> c_int = SYS_sigaltstack(n, o);
    getitimer(w: c_int, v: *mut libc::itimerval) -> c_int = SYS_getitimer(w, v);
    setitimer(w: c_int, n: *const libc::itimerval, o: *mut libc::itimerval) -> c_int
        = SYS_setitimer(w, n, o);
    sigpending(s: *mut sigset_t) -> c_int = SYS_rt_sigpending(s, 8usize);
    sched_getparam(pid: pid_t, p: *mut libc::sched_param) -> c_int = SYS_sched_getparam(pid, p);
    sched_setparam(pid: pid_t, p: *const libc::sched_param) -> c_int
        = SYS_sched_setparam(pid, p);
    times(b: *mut libc::tms) -> libc::clock_t = SYS_times(b);
}

/// `process_vm_readv(2)`: the local side is pinned here; a far remote side
/// (another farmem process) is brought in by [`crate::remote`].
///
/// # Safety
/// As `process_vm_readv(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn process_vm_readv(
    pid: pid_t,
    local: *const iovec,
    ln: c_ulong,
    remote: *const iovec,
    rn: c_ulong,
    flags: c_ulong,
) -> ssize_t {
    // SAFETY: same contract.
    unsafe { crate::remote::vm_copy(false, pid, local, ln, remote, rn, flags) }
}

/// `process_vm_writev(2)`.
///
/// # Safety
/// As `process_vm_writev(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn process_vm_writev(
    pid: pid_t,
    local: *const iovec,
    ln: c_ulong,
    remote: *const iovec,
    rn: c_ulong,
    flags: c_ulong,
) -> ssize_t {
    // SAFETY: same contract.
    unsafe { crate::remote::vm_copy(true, pid, local, ln, remote, rn, flags) }
}

type SyscallFn =
    unsafe extern "C" fn(c_long, c_long, c_long, c_long, c_long, c_long, c_long) -> c_long;

/// The C library's `syscall(2)`.
pub fn real_syscall() -> SyscallFn {
    crate::io::real!(c"syscall", SyscallFn)
}

/// Hook for the `farmem run` shim: memory-map calls made through
/// `syscall(2)` (tcmalloc makes its own `mmap` this way) go to the shim's
/// `mmap`/`munmap`/`mremap`/`madvise`/`mprotect` so that large ones become
/// far memory, and `memfd_create` so that a heap it would hold (ZGC's) is
/// refused with a message.
pub static MAP_HOOK: AtomicUsize = AtomicUsize::new(0);

/// The signature of [`MAP_HOOK`]: `Some(result)` when the shim handled it.
pub type MapHook = fn(c_long, &[usize; 6]) -> Option<c_long>;

/// `syscall(2)`: raw system calls go through the same table. On x86-64 the
/// variadic arguments arrive in the registers (and stack slot) a call with
/// seven fixed arguments uses; unused ones are forwarded as they are, which
/// is what the C library does.
///
/// # Safety
/// As `syscall(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn syscall(
    nr: c_long,
    a0: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
) -> c_long {
    let a = [a0, a1, a2, a3, a4, a5].map(crate::Reg::reg);
    let f = real_syscall();
    match nr {
        // Before and after the runtime starts: an allocator's own mmap may
        // be what starts it, and SIGBUS must never be blocked.
        libc::SYS_mmap
        | libc::SYS_munmap
        | libc::SYS_mremap
        | libc::SYS_madvise
        | libc::SYS_mprotect
        | libc::SYS_memfd_create => {
            let hook = MAP_HOOK.load(std::sync::atomic::Ordering::Acquire);
            if hook != 0 {
                // SAFETY: MAP_HOOK only ever holds a `MapHook`.
                let hook = unsafe { std::mem::transmute::<usize, MapHook>(hook) };
                if let Some(r) = hook(nr, &a) {
                    return r;
                }
            }
        }
        libc::SYS_rt_sigprocmask => {
            if let Some(r) = crate::signals::intercept(nr, &a) {
                return r;
            }
        }
        // The other process may have far memory even if this one has none.
        libc::SYS_process_vm_readv | libc::SYS_process_vm_writev => {
            return crate::remote::intercept(nr, &a).unwrap_or(-1);
        }
        _ => {}
    }
    if rt::get().is_none() {
        // No far memory: nothing else to look at.
        // SAFETY: forwarded unchanged.
        return unsafe { f(nr, a0, a1, a2, a3, a4, a5) };
    }
    // Plain transfers take the chunked path of the libc wrappers, so a
    // buffer larger than the pin limit still works (in parts, as the kernel
    // may return short anyway).
    // SAFETY: the program's arguments, as the wrappers take them.
    unsafe {
        let (fd, p, n) = (farmem_sys::int_arg(a[0]), a1 as *mut c_void, a[2]);
        match nr {
            libc::SYS_read => return crate::io::read(fd, p, n) as c_long,
            libc::SYS_write => return crate::io::write(fd, p, n) as c_long,
            libc::SYS_pread64 => return crate::io::pread(fd, p, n, a3 as off_t) as c_long,
            libc::SYS_pwrite64 => return crate::io::pwrite(fd, p, n, a3 as off_t) as c_long,
            libc::SYS_readv => {
                return crate::io::readv(fd, p as *const iovec, farmem_sys::int_arg(a[2])) as c_long
            }
            libc::SYS_writev => {
                return crate::io::writev(fd, p as *const iovec, farmem_sys::int_arg(a[2]))
                    as c_long
            }
            _ => {}
        }
    }
    // SAFETY: the program's arguments for nr, forwarded unchanged.
    if let Some(r) = unsafe { crate::aio::intercept(nr, &a, &|| f(nr, a0, a1, a2, a3, a4, a5)) } {
        return r;
    }
    // SAFETY: forwarded unchanged, with the table's far buffers pinned.
    unsafe { pinned(nr, a, || f(nr, a0, a1, a2, a3, a4, a5)) }
}
