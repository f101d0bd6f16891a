//! The one table of which user memory each system call hands the kernel.
//!
//! In SIGBUS mode the kernel cannot fault a far page in for a system call:
//! the call fails with EFAULT (or returns short). So before any call that
//! may touch far memory, farmem pins every far page the call will read or
//! write and faults it in from user mode. This table says, per system-call
//! number, which ranges those are. Every path into the kernel uses it: the
//! generated libc wrappers (the call families), `syscall(2)`, and the
//! syscall-user-dispatch safety net for raw system calls.
//!
//! Reading the argument structures here (iovec arrays, `msghdr`s, strings)
//! happens in user mode, so far pages among them fault in normally; the
//! structures themselves are listed too, because the kernel reads them.

use libc::{c_long, iovec, msghdr};

/// Not in the libc crate's x86-64 list.
const SYS_IO_PGETEVENTS: c_long = 333;

/// One range of user memory a system call may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buf {
    pub addr: usize,
    pub len: usize,
    /// The kernel writes into it (so it must be writable and is dirtied).
    pub kernel_writes: bool,
}

/// Sizes of the kernel structures the table names (x86-64).
const STAT_BYTES: usize = std::mem::size_of::<libc::stat>();
const STATX_BYTES: usize = 256;
const TIMESPEC_BYTES: usize = 16;
const EPOLL_EVENT_BYTES: usize = 12;
const POLLFD_BYTES: usize = 8;
const FD_SET_BYTES: usize = 128;
const RUSAGE_BYTES: usize = 144;
const SIGINFO_BYTES: usize = 128;
const UTSNAME_BYTES: usize = 390;
const SYSINFO_BYTES: usize = 112;
const IOCB_BYTES: usize = 64;
const FUTEX_WAITV_BYTES: usize = 24;
const FLOCK_BYTES: usize = 32;
const STATFS_BYTES: usize = 120;
const SIGACTION_BYTES: usize = 32;
/// Longest string or argv/envp list the table follows; longer ones are
/// listed up to here (the kernel itself stops at PATH_MAX or ARG_MAX).
const STR_MAX: usize = 1 << 20;
const VEC_MAX: usize = 1 << 17;

/// Calls `v` with every user range system call `nr` with arguments `a` may
/// touch. Null pointers and zero lengths are skipped. Unknown calls touch
/// nothing (as far as the table knows; see docs/design.md for the list).
///
/// # Safety
/// The arguments are those the program passes to the kernel; pointers the
/// table follows (iovec arrays, msghdr, strings) are read as the kernel
/// would read them, so they must be valid wherever the call itself would
/// succeed. An invalid pointer the kernel would reject with EFAULT is read
/// here too.
pub unsafe fn for_each(nr: c_long, a: &[usize; 6], v: &mut dyn FnMut(Buf)) {
    let mut out = |addr: usize, len: usize, w: bool| {
        if addr != 0 && len != 0 {
            v(Buf {
                addr,
                len,
                kernel_writes: w,
            })
        }
    };
    // One family of calls after another; each call is in one family (a
    // test checks), so the order only decides how soon a call is found:
    // reads and writes, the most frequent, first.
    // SAFETY: each family reads the arguments as this function's contract
    // allows.
    unsafe {
        let _ = transfer(nr, a, &mut out)
            || sockets(nr, a, &mut out)
            || waits(nr, a, &mut out)
            || paths(nr, a, &mut out)
            || process(nr, a, &mut out);
    }
}

/// Reads, writes, and the calls that move bytes between descriptors,
/// processes and the kernel (pipes, splices, AIO). False when `nr` is not
/// one of them.
///
/// # Safety
/// As [`for_each`]'s.
#[allow(non_upper_case_globals)] // libc's SYS_* names
unsafe fn transfer(nr: c_long, a: &[usize; 6], out: &mut Out) -> bool {
    use libc::*;
    // SAFETY: the helpers below read the argument structures as the kernel
    // would; see `for_each`'s contract.
    unsafe {
        match nr {
            SYS_read | SYS_pread64 => out(a[1], a[2], true),
            SYS_write | SYS_pwrite64 => out(a[1], a[2], false),
            SYS_readv | SYS_preadv | SYS_preadv2 => iov(a[1], a[2], true, out),
            SYS_writev | SYS_pwritev | SYS_pwritev2 => iov(a[1], a[2], false, out),
            SYS_getrandom => out(a[0], a[1], true),
            SYS_getdents64 | SYS_getdents => out(a[1], a[2], true),
            SYS_process_vm_readv | SYS_process_vm_writev => {
                // The local side; the remote side is another process's
                // memory (see `crate::remote`).
                iov(a[1], a[2], nr == SYS_process_vm_readv, out);
                out(a[3], a[4] * std::mem::size_of::<iovec>(), false);
            }
            // vmsplice maps or copies user pages to or from a pipe: pin as
            // written, which covers both directions.
            SYS_vmsplice => iov(a[1], a[2], true, out),
            SYS_splice => {
                out(a[1], 8, true);
                out(a[3], 8, true);
            }
            SYS_sendfile => out(a[2], 8, true),
            SYS_copy_file_range => {
                out(a[1], 8, true);
                out(a[3], 8, true);
            }
            SYS_pipe | SYS_pipe2 => out(a[0], 8, true),
            SYS_io_submit => {
                let n = a[1].min(VEC_MAX);
                out(a[2], n * 8, false);
                if a[2] != 0 {
                    for i in 0..n {
                        let cb = *((a[2] + i * 8) as *const usize);
                        iocb(cb, out);
                    }
                }
            }
            SYS_io_getevents | SYS_IO_PGETEVENTS => {
                out(a[3], a[2] * 32, true);
                out(a[4], TIMESPEC_BYTES, false);
            }
            _ => return false,
        }
    }
    true
}

/// Socket calls: messages, addresses and options. False when `nr` is not
/// one of them.
///
/// # Safety
/// As [`for_each`]'s.
#[allow(non_upper_case_globals)] // libc's SYS_* names
unsafe fn sockets(nr: c_long, a: &[usize; 6], out: &mut Out) -> bool {
    use libc::*;
    // SAFETY: the helpers below read the argument structures as the kernel
    // would; see `for_each`'s contract.
    unsafe {
        match nr {
            SYS_recvfrom => {
                out(a[1], a[2], true);
                sockaddr_out(a[4], a[5], out);
            }
            SYS_sendto => {
                out(a[1], a[2], false);
                out(a[4], a[5], false);
            }
            SYS_recvmsg => msg(a[1], true, out),
            SYS_sendmsg => msg(a[1], false, out),
            SYS_recvmmsg | SYS_sendmmsg => {
                let w = nr == SYS_recvmmsg;
                let n = a[2].min(VEC_MAX);
                let size = std::mem::size_of::<mmsghdr>();
                // The kernel writes msg_len back into every entry.
                out(a[1], n * size, true);
                for i in 0..n {
                    msg(a[1] + i * size, w, out);
                }
                if w {
                    // The kernel writes the time left back.
                    out(a[4], TIMESPEC_BYTES, true);
                }
            }
            SYS_getsockopt => {
                if a[4] != 0 {
                    out(a[3], *(a[4] as *const u32) as usize, true);
                }
                out(a[4], 4, true);
            }
            SYS_setsockopt => out(a[3], a[4], false),
            SYS_accept | SYS_accept4 | SYS_getsockname | SYS_getpeername => {
                sockaddr_out(a[1], a[2], out)
            }
            SYS_connect | SYS_bind => out(a[1], a[2], false),
            SYS_socketpair => out(a[3], 8, true),
            _ => return false,
        }
    }
    true
}

/// Waiting and time: futexes, polling, sleeps, timers, child status,
/// and the IPC queues and semaphores a call may wait on. False when `nr`
/// is not one of them.
///
/// # Safety
/// As [`for_each`]'s.
#[allow(non_upper_case_globals)] // libc's SYS_* names
unsafe fn waits(nr: c_long, a: &[usize; 6], out: &mut Out) -> bool {
    use libc::*;
    // SAFETY: the helpers below read the argument structures as the kernel
    // would; see `for_each`'s contract.
    unsafe {
        match nr {
            SYS_futex => futex(a, out),
            SYS_futex_waitv => {
                let n = a[1].min(128);
                out(a[0], n * FUTEX_WAITV_BYTES, false);
                if a[0] != 0 {
                    for i in 0..n {
                        let uaddr = farmem_sys::usize_from(
                            *((a[0] + i * FUTEX_WAITV_BYTES + 8) as *const u64),
                        );
                        out(uaddr, 4, true);
                    }
                }
                out(a[3], TIMESPEC_BYTES, false);
            }
            SYS_epoll_wait | SYS_epoll_pwait | SYS_epoll_pwait2 => {
                out(
                    a[1],
                    usize::try_from(farmem_sys::int_arg(a[2])).unwrap_or(0) * EPOLL_EVENT_BYTES,
                    true,
                );
                if nr == SYS_epoll_pwait2 {
                    out(a[3], TIMESPEC_BYTES, false);
                }
            }
            SYS_epoll_ctl => out(a[3], EPOLL_EVENT_BYTES, false),
            SYS_poll | SYS_ppoll => {
                out(a[0], a[1] * POLLFD_BYTES, true);
                if nr == SYS_ppoll {
                    out(a[2], TIMESPEC_BYTES, true);
                }
            }
            SYS_select | SYS_pselect6 => {
                out(a[1], FD_SET_BYTES, true);
                out(a[2], FD_SET_BYTES, true);
                out(a[3], FD_SET_BYTES, true);
                out(a[4], TIMESPEC_BYTES, true);
            }
            SYS_wait4 => {
                out(a[1], 4, true);
                out(a[3], RUSAGE_BYTES, true);
            }
            SYS_waitid => {
                out(a[2], SIGINFO_BYTES, true);
                out(a[4], RUSAGE_BYTES, true);
            }
            SYS_nanosleep => {
                out(a[0], TIMESPEC_BYTES, false);
                out(a[1], TIMESPEC_BYTES, true);
            }
            SYS_clock_nanosleep => {
                out(a[2], TIMESPEC_BYTES, false);
                out(a[3], TIMESPEC_BYTES, true);
            }
            SYS_clock_gettime | SYS_clock_getres => out(a[1], TIMESPEC_BYTES, true),
            SYS_msgsnd => out(a[1], a[2] + 8, false),
            SYS_msgrcv => out(a[1], a[2] + 8, true),
            SYS_mq_timedsend => {
                out(a[1], a[2], false);
                out(a[4], TIMESPEC_BYTES, false);
            }
            SYS_mq_timedreceive => {
                out(a[1], a[2], true);
                out(a[3], 4, true);
                out(a[4], TIMESPEC_BYTES, false);
            }
            SYS_semop => out(a[1], a[2] * 6, false),
            SYS_semtimedop => {
                out(a[1], a[2] * 6, false);
                out(a[3], TIMESPEC_BYTES, false);
            }
            SYS_timerfd_settime | SYS_timer_settime => {
                out(a[2], 32, false);
                out(a[3], 32, true);
            }
            SYS_timerfd_gettime | SYS_timer_gettime => out(a[1], 32, true),
            SYS_getitimer => out(a[1], 32, true),
            SYS_setitimer => {
                out(a[1], 32, false);
                out(a[2], 32, true);
            }
            _ => return false,
        }
    }
    true
}

/// Calls that name files by path, and the structures they fill in
/// (stat, statfs, extended attributes, exec's argv and envp). False when
/// `nr` is not one of them.
///
/// # Safety
/// As [`for_each`]'s.
#[allow(non_upper_case_globals)] // libc's SYS_* names
unsafe fn paths(nr: c_long, a: &[usize; 6], out: &mut Out) -> bool {
    use libc::*;
    // SAFETY: the helpers below read the argument structures as the kernel
    // would; see `for_each`'s contract.
    unsafe {
        match nr {
            SYS_fstat => out(a[1], STAT_BYTES, true),
            SYS_stat | SYS_lstat => {
                string(a[0], out);
                out(a[1], STAT_BYTES, true);
            }
            SYS_newfstatat => {
                string(a[1], out);
                out(a[2], STAT_BYTES, true);
            }
            SYS_statx => {
                string(a[1], out);
                out(a[4], STATX_BYTES, true);
            }
            SYS_open | SYS_access | SYS_chdir | SYS_mkdir | SYS_rmdir | SYS_unlink
            | SYS_truncate | SYS_chmod | SYS_chown | SYS_creat | SYS_chroot | SYS_acct
            | SYS_swapon | SYS_swapoff | SYS_uselib => string(a[0], out),
            SYS_openat | SYS_faccessat | SYS_faccessat2 | SYS_mkdirat | SYS_unlinkat
            | SYS_fchmodat | SYS_fchownat => string(a[1], out),
            SYS_rename | SYS_link | SYS_symlink => {
                string(a[0], out);
                string(a[1], out);
            }
            SYS_renameat | SYS_renameat2 | SYS_linkat => {
                string(a[1], out);
                string(a[3], out);
            }
            SYS_readlink => {
                string(a[0], out);
                out(a[1], a[2], true);
            }
            SYS_readlinkat => {
                string(a[1], out);
                out(a[2], a[3], true);
            }
            SYS_getcwd => out(a[0], a[1], true),
            SYS_execve => {
                string(a[0], out);
                strings(a[1], out);
                strings(a[2], out);
            }
            SYS_execveat => {
                string(a[1], out);
                strings(a[2], out);
                strings(a[3], out);
            }
            SYS_getxattr | SYS_lgetxattr => {
                string(a[0], out);
                string(a[1], out);
                out(a[2], a[3], true);
            }
            SYS_fgetxattr => {
                string(a[1], out);
                out(a[2], a[3], true);
            }
            SYS_setxattr | SYS_lsetxattr => {
                string(a[0], out);
                string(a[1], out);
                out(a[2], a[3], false);
            }
            SYS_fsetxattr => {
                string(a[1], out);
                out(a[2], a[3], false);
            }
            SYS_statfs => {
                string(a[0], out);
                out(a[1], STATFS_BYTES, true);
            }
            SYS_fstatfs => out(a[1], STATFS_BYTES, true),
            SYS_utimensat => {
                string(a[1], out);
                out(a[2], 2 * TIMESPEC_BYTES, false);
            }
            SYS_inotify_add_watch => string(a[1], out),
            SYS_mknod | SYS_memfd_create | SYS_lchown => string(a[0], out),
            SYS_mknodat => string(a[1], out),
            SYS_symlinkat => {
                string(a[0], out);
                string(a[2], out);
            }
            SYS_listxattr | SYS_llistxattr => {
                string(a[0], out);
                out(a[1], a[2], true);
            }
            SYS_flistxattr => out(a[1], a[2], true),
            _ => return false,
        }
    }
    true
}

/// The process's own state: names, limits, signals, scheduling, and
/// the generic fcntl and ioctl arguments. Safe: it follows no pointer.
/// False when `nr` is not one of them.
#[allow(non_upper_case_globals)] // libc's SYS_* names
fn process(nr: c_long, a: &[usize; 6], out: &mut Out) -> bool {
    use libc::*;
    match nr {
        SYS_uname => out(a[0], UTSNAME_BYTES, true),
        SYS_sysinfo => out(a[0], SYSINFO_BYTES, true),
        SYS_getrusage => out(a[1], RUSAGE_BYTES, true),
        SYS_sched_getaffinity => out(a[2], a[1], true),
        SYS_sched_setaffinity => out(a[2], a[1], false),
        SYS_mincore => {
            let pages = a[1].div_ceil(farmem_sys::PAGE_SIZE);
            out(a[2], pages, true);
        }
        SYS_fcntl => {
            const F_GETLK: usize = 5;
            const F_SETLK: usize = 6;
            const F_SETLKW: usize = 7;
            const F_GETOWN_EX: usize = 16;
            const F_SETOWN_EX: usize = 15;
            const F_OFD_GETLK: usize = 36;
            const F_OFD_SETLK: usize = 37;
            const F_OFD_SETLKW: usize = 38;
            match a[1] {
                F_GETLK | F_SETLK | F_SETLKW | F_OFD_GETLK | F_OFD_SETLK | F_OFD_SETLKW => {
                    out(a[2], FLOCK_BYTES, true)
                }
                F_GETOWN_EX | F_SETOWN_EX => out(a[2], 8, true),
                _ => {}
            }
        }
        // ioctl's argument depends on the device; these are the generic
        // ones (an int, a window size). Others are listed in design.md.
        SYS_ioctl => match a[1] as libc::c_ulong {
            libc::FIONREAD | libc::TIOCOUTQ | libc::FIONBIO | libc::FIOASYNC => out(a[2], 4, true),
            libc::TIOCGWINSZ | libc::TIOCSWINSZ => out(a[2], 8, true),
            _ => {}
        },
        SYS_getrlimit => out(a[1], 16, true),
        SYS_setrlimit => out(a[1], 16, false),
        SYS_prlimit64 => {
            out(a[2], 16, false);
            out(a[3], 16, true);
        }
        SYS_getresuid | SYS_getresgid => {
            out(a[0], 4, true);
            out(a[1], 4, true);
            out(a[2], 4, true);
        }
        SYS_sigaltstack => {
            out(a[0], 24, false);
            out(a[1], 24, true);
        }
        SYS_rt_sigpending => out(a[0], a[1], true),
        SYS_rt_sigprocmask => {
            out(a[1], a[3], false);
            out(a[2], a[3], true);
        }
        SYS_rt_sigaction => {
            out(a[1], SIGACTION_BYTES, false);
            out(a[2], SIGACTION_BYTES, true);
        }
        SYS_sched_getparam => out(a[1], 4, true),
        SYS_sched_setparam | SYS_sched_setscheduler => out(a[1], 4, false),
        SYS_times => out(a[0], 32, true),
        _ => return false,
    }
    true
}

type Out<'a> = dyn FnMut(usize, usize, bool) + 'a;

/// An iovec array and the buffers it names.
///
/// # Safety
/// `v` points to `n` iovecs (or is null).
unsafe fn iov(v: usize, n: usize, w: bool, out: &mut Out) {
    let n = n.min(VEC_MAX);
    if v == 0 {
        return;
    }
    out(v, n * std::mem::size_of::<iovec>(), false);
    // SAFETY: per the contract.
    let s = unsafe { std::slice::from_raw_parts(v as *const iovec, n) };
    for e in s {
        out(e.iov_base as usize, e.iov_len, w);
    }
}

/// A `msghdr`, its name, iovecs and control data.
///
/// # Safety
/// `m` points to a msghdr (or is null).
unsafe fn msg(m: usize, w: bool, out: &mut Out) {
    if m == 0 {
        return;
    }
    // recvmsg writes msg_namelen, msg_controllen and msg_flags back.
    out(m, std::mem::size_of::<msghdr>(), w);
    // SAFETY: per the contract.
    let h = unsafe { &*(m as *const msghdr) };
    out(h.msg_name as usize, h.msg_namelen as usize, w);
    // SAFETY: the msghdr names msg_iovlen iovecs.
    unsafe { iov(h.msg_iov as usize, h.msg_iovlen, w, out) };
    out(h.msg_control as usize, h.msg_controllen, w);
}

/// A value-result socket address: `addr` of `*len` bytes, and `len`.
///
/// # Safety
/// `len` points to a socklen_t (or is null).
unsafe fn sockaddr_out(addr: usize, len: usize, out: &mut Out) {
    if len != 0 {
        // SAFETY: per the contract.
        out(addr, unsafe { *(len as *const u32) } as usize, true);
        out(len, 4, true);
    }
}

/// A NUL-terminated string.
///
/// # Safety
/// `s` is a NUL-terminated string (or null).
unsafe fn string(s: usize, out: &mut Out) {
    if s != 0 {
        // SAFETY: per the contract.
        let n = unsafe { libc::strnlen(s as *const libc::c_char, STR_MAX) };
        out(s, n + 1, false);
    }
}

/// A NULL-terminated array of strings (argv, envp).
///
/// # Safety
/// `v` is such an array (or null).
unsafe fn strings(v: usize, out: &mut Out) {
    if v == 0 {
        return;
    }
    let mut i = 0;
    while i < VEC_MAX {
        // SAFETY: per the contract, entries up to the NULL are readable.
        let s = unsafe { *((v + i * 8) as *const usize) };
        if s == 0 {
            break;
        }
        // SAFETY: each entry is a string.
        unsafe { string(s, out) };
        i += 1;
    }
    out(v, (i + 1) * 8, false);
}

/// The futex words and timeout a `futex(2)` operation uses.
///
/// # Safety
/// As the kernel reads them.
unsafe fn futex(a: &[usize; 6], out: &mut Out) {
    const WAIT: usize = 0;
    const REQUEUE: usize = 3;
    const CMP_REQUEUE: usize = 4;
    const WAKE_OP: usize = 5;
    const LOCK_PI: usize = 6;
    const WAIT_BITSET: usize = 9;
    const WAIT_REQUEUE_PI: usize = 11;
    const CMP_REQUEUE_PI: usize = 12;
    const LOCK_PI2: usize = 13;
    let op = a[1] & 127;
    // Every operation addresses the word; PI operations write it.
    out(a[0], 4, true);
    if matches!(
        op,
        WAIT | LOCK_PI | WAIT_BITSET | WAIT_REQUEUE_PI | LOCK_PI2
    ) {
        out(a[3], TIMESPEC_BYTES, false);
    }
    if matches!(
        op,
        REQUEUE | CMP_REQUEUE | WAKE_OP | WAIT_REQUEUE_PI | CMP_REQUEUE_PI
    ) {
        out(a[4], 4, true);
    }
}

/// One Linux AIO control block and its buffer.
///
/// # Safety
/// `cb` points to a `struct iocb` (or is null).
unsafe fn iocb(cb: usize, out: &mut Out) {
    if cb == 0 {
        return;
    }
    out(cb, IOCB_BYTES, false);
    // struct iocb: aio_lio_opcode (u16) at 16, aio_buf (u64) at 24,
    // aio_nbytes (u64) at 32.
    // SAFETY: per the contract.
    let (op, buf, n) = unsafe {
        (
            *((cb + 16) as *const u16),
            farmem_sys::usize_from(*((cb + 24) as *const u64)),
            farmem_sys::usize_from(*((cb + 32) as *const u64)),
        )
    };
    const PREAD: u16 = 0;
    const PWRITE: u16 = 1;
    const PREADV: u16 = 7;
    const PWRITEV: u16 = 8;
    match op {
        PREAD => out(buf, n, true),
        PWRITE => out(buf, n, false),
        // SAFETY: for vectored operations aio_buf is an iovec array.
        PREADV => unsafe { iov(buf, n, true, out) },
        // SAFETY: as above.
        PWRITEV => unsafe { iov(buf, n, false, out) },
        _ => {}
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(nr: c_long, a: [usize; 6]) -> Vec<Buf> {
        let mut v = Vec::new();
        // SAFETY: the tests pass valid structures.
        unsafe { for_each(nr, &a, &mut |b| v.push(b)) };
        v
    }

    #[test]
    fn read_and_write_name_their_buffer() {
        let b = collect(libc::SYS_read, [3, 0x1000, 64, 0, 0, 0]);
        assert_eq!(
            b,
            vec![Buf {
                addr: 0x1000,
                len: 64,
                kernel_writes: true
            }]
        );
        let b = collect(libc::SYS_pwrite64, [3, 0x2000, 10, 5, 0, 0]);
        assert!(!b[0].kernel_writes);
    }

    #[test]
    fn sendmsg_lists_header_iovecs_and_control() {
        let mut data = [0u8; 32];
        let mut ctl = [0u8; 24];
        let iovs = [
            iovec {
                iov_base: data.as_mut_ptr().cast(),
                iov_len: 16,
            },
            iovec {
                iov_base: data[16..].as_mut_ptr().cast(),
                iov_len: 16,
            },
        ];
        // SAFETY: zeroed msghdr is valid.
        let mut m: msghdr = unsafe { std::mem::zeroed() };
        m.msg_iov = iovs.as_ptr() as *mut iovec;
        m.msg_iovlen = 2;
        m.msg_control = ctl.as_mut_ptr().cast();
        m.msg_controllen = 24;
        let b = collect(libc::SYS_sendmsg, [3, &m as *const _ as usize, 0, 0, 0, 0]);
        let addrs: Vec<usize> = b.iter().map(|b| b.addr).collect();
        assert!(addrs.contains(&(&m as *const _ as usize)));
        assert!(addrs.contains(&(iovs.as_ptr() as usize)));
        assert!(addrs.contains(&(data.as_ptr() as usize)));
        assert!(addrs.contains(&(data[16..].as_ptr() as usize)));
        assert!(addrs.contains(&(ctl.as_ptr() as usize)));
        assert!(b.iter().all(|b| !b.kernel_writes));
        let b = collect(libc::SYS_recvmsg, [3, &m as *const _ as usize, 0, 0, 0, 0]);
        assert!(b
            .iter()
            .filter(|b| b.addr == data.as_ptr() as usize)
            .all(|b| b.kernel_writes));
    }

    #[test]
    fn strings_and_argv_are_followed() {
        let path = c"/tmp/some/path";
        let args = [c"a".as_ptr() as usize, c"bb".as_ptr() as usize, 0];
        let b = collect(
            libc::SYS_execve,
            [path.as_ptr() as usize, args.as_ptr() as usize, 0, 0, 0, 0],
        );
        assert_eq!(b[0].len, path.to_bytes_with_nul().len());
        assert!(b.iter().any(|b| b.addr == args[1] && b.len == 3));
        assert!(b
            .iter()
            .any(|b| b.addr == args.as_ptr() as usize && b.len == 24));
    }

    #[test]
    fn futex_wait_names_word_and_timeout_wake_only_word() {
        let b = collect(libc::SYS_futex, [0x1000, 128, 1, 0x2000, 0, 0]);
        assert_eq!(b.len(), 2);
        let b = collect(libc::SYS_futex, [0x1000, 129, 1, 5, 0, 0]);
        assert_eq!(b.len(), 1);
        assert!(b[0].kernel_writes);
    }

    #[test]
    fn each_call_is_in_one_family_at_most() {
        let a = [0; 6];
        for nr in 0..1024 {
            let mut none = |_, _, _| {};
            // SAFETY: null pointers everywhere: the families follow none.
            let claimed = unsafe {
                [
                    transfer(nr, &a, &mut none),
                    sockets(nr, &a, &mut none),
                    waits(nr, &a, &mut none),
                    paths(nr, &a, &mut none),
                    process(nr, &a, &mut none),
                ]
            };
            let n = claimed.iter().filter(|c| **c).count();
            assert!(n <= 1, "system call {nr} is in {n} families");
        }
    }

    #[test]
    fn unknown_calls_touch_nothing() {
        assert!(collect(libc::SYS_getpid, [0; 6]).is_empty());
        assert!(collect(libc::SYS_close, [3, 0, 0, 0, 0, 0]).is_empty());
    }
}
