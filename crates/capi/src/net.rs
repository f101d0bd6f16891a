//! Sockets and readiness: `recv`/`send` and their address forms (chunked
//! like the I/O calls), message calls, socket options and addresses, and
//! `poll`/`epoll`/`select`, whose event arrays the kernel writes.

use crate::forward::real;
use crate::pin::{chunked, far};
use crate::reg::Reg as _;
use libc::{
    c_int, c_uint, c_void, epoll_event, fd_set, mmsghdr, msghdr, nfds_t, pollfd, sigset_t, size_t,
    sockaddr, socklen_t, ssize_t, timespec, timeval,
};

type RecvFn = unsafe extern "C" fn(c_int, *mut c_void, size_t, c_int) -> ssize_t;
type SendFn = unsafe extern "C" fn(c_int, *const c_void, size_t, c_int) -> ssize_t;
type RecvFromFn = unsafe extern "C" fn(
    c_int,
    *mut c_void,
    size_t,
    c_int,
    *mut sockaddr,
    *mut socklen_t,
) -> ssize_t;
type SendToFn = unsafe extern "C" fn(
    c_int,
    *const c_void,
    size_t,
    c_int,
    *const sockaddr,
    socklen_t,
) -> ssize_t;

/// `recv(2)`.
///
/// # Safety
/// As `recv(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    let f = real!(c"recv", RecvFn);
    match far(buf, n) {
        // SAFETY: forwarded unchanged.
        None => unsafe { f(fd, buf, n, flags) },
        // SAFETY: each chunk lies inside the caller's buffer.
        Some(r) => chunked(
            r,
            buf as usize,
            n,
            true,
            flags & libc::MSG_WAITALL != 0,
            |p, l, _| unsafe { f(fd, p.cast(), l, flags) },
        ),
    }
}

/// `send(2)`.
///
/// # Safety
/// As `send(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    let f = real!(c"send", SendFn);
    match far(buf, n) {
        // SAFETY: forwarded unchanged.
        None => unsafe { f(fd, buf, n, flags) },
        // SAFETY: each chunk lies inside the caller's buffer.
        Some(r) => chunked(r, buf as usize, n, false, true, |p, l, _| unsafe {
            f(fd, p.cast(), l, flags)
        }),
    }
}

/// `recvfrom(2)`.
///
/// # Safety
/// As `recvfrom(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
) -> ssize_t {
    let f = real!(c"recvfrom", RecvFromFn);
    // The address and its length are kernel-written too.
    let a = [fd.reg(), 0, 0, flags.reg(), addr as usize, alen as usize];
    // SAFETY: the caller's address arguments, as the kernel reads them.
    let _addr_pins = unsafe { crate::pin::pin_args(libc::SYS_recvfrom, &a) };
    match far(buf, n) {
        // SAFETY: forwarded unchanged.
        None => unsafe { f(fd, buf, n, flags, addr, alen) },
        // Datagrams must arrive whole: pin the entire buffer for one call.
        Some(r) => {
            let _pin = r.pin_for_io(buf as usize, n.min(r.io_chunk()), true);
            // SAFETY: forwarded with the (first chunk of the) buffer pinned.
            unsafe { f(fd, buf, n.min(r.io_chunk()), flags, addr, alen) }
        }
    }
}

/// `sendto(2)`.
///
/// # Safety
/// As `sendto(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    addr: *const sockaddr,
    alen: socklen_t,
) -> ssize_t {
    let f = real!(c"sendto", SendToFn);
    let a = [fd.reg(), 0, 0, flags.reg(), addr as usize, alen as usize];
    // SAFETY: the caller's address arguments, as the kernel reads them.
    let _addr_pins = unsafe { crate::pin::pin_args(libc::SYS_sendto, &a) };
    match far(buf, n) {
        // SAFETY: forwarded unchanged.
        None => unsafe { f(fd, buf, n, flags, addr, alen) },
        Some(r) => {
            let _pin = r.pin_for_io(buf as usize, n, false);
            // SAFETY: forwarded with the buffer pinned.
            unsafe { f(fd, buf, n, flags, addr, alen) }
        }
    }
}

type RecvChkFn = unsafe extern "C" fn(c_int, *mut c_void, size_t, size_t, c_int) -> ssize_t;

/// `__recv_chk`.
///
/// # Safety
/// As `recv(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
    flags: c_int,
) -> ssize_t {
    if n > buflen {
        let f = real!(c"__recv_chk", RecvChkFn);
        // SAFETY: glibc's check reports the overflow and aborts.
        return unsafe { f(fd, buf, n, buflen, flags) };
    }
    // SAFETY: same contract as recv.
    unsafe { recv(fd, buf, n, flags) }
}

crate::pin::wrap! {
    sendmsg(fd: c_int, m: *const msghdr, flags: c_int) -> ssize_t = SYS_sendmsg(fd, m, flags);
    recvmsg(fd: c_int, m: *mut msghdr, flags: c_int) -> ssize_t = SYS_recvmsg(fd, m, flags);
    sendmmsg(fd: c_int, v: *mut mmsghdr, n: c_uint, flags: c_int) -> c_int
        = SYS_sendmmsg(fd, v, n, flags);
    recvmmsg(fd: c_int, v: *mut mmsghdr, n: c_uint, flags: c_int, t: *mut timespec) -> c_int
        = SYS_recvmmsg(fd, v, n, flags, t);
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
}
