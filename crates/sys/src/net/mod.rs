//! Socket I/O by raw syscalls, with a bounded spin before blocking.
//!
//! Why spin: on an idle vCPU a blocking `recv` costs ~100 µs of wake-up (see
//! docs/design.md); a reply from a memory server usually arrives in ~5–20 µs.
//! So a waiting client polls the non-blocking socket for `spin_ns`, then falls
//! back to `poll(2)` until `timeout_ns` has passed.

use crate::{cvt, cvt_long, now_ns};
use std::io;
use std::os::fd::RawFd;

/// How long to spin, and when to give up.
#[derive(Debug, Clone, Copy)]
pub struct Wait {
    pub spin_ns: u64,
    pub timeout_ns: u64,
}

/// Largest iovec count one `send_vectored` call takes (kept on the stack,
/// which may be a signal handler's).
pub const MAX_IOV: usize = 72;

fn wait_ready(fd: RawFd, events: i16, start: u64, wait: Wait, spins: &mut u32) -> io::Result<()> {
    let elapsed = now_ns().saturating_sub(start);
    if elapsed < wait.spin_ns {
        *spins += 1;
        // Yield on every round after the first few: when the peer (say a
        // memory server thread) shares this CPU it runs at once; when it
        // does not, a yield with nothing else runnable costs ~0.3 us.
        if *spins > 4 {
            crate::sched_yield();
        } else {
            for _ in 0..16 {
                crate::cpu_relax();
            }
        }
        return Ok(());
    }
    if elapsed >= wait.timeout_ns {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "no reply before the timeout",
        ));
    }
    let left_ms = ((wait.timeout_ns - elapsed) / 1_000_000).clamp(1, 1000) as i32;
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: pfd is one live pollfd.
    let r =
        unsafe { crate::raw_syscall!(libc::SYS_poll, &mut pfd as *mut libc::pollfd, 1, left_ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

/// Receive exactly `buf.len()` bytes from a non-blocking socket.
pub fn recv_exact(fd: RawFd, buf: &mut [u8], wait: Wait) -> io::Result<()> {
    let mut got = 0;
    let start = now_ns();
    let mut spins = 0u32;
    while got < buf.len() {
        // SAFETY: the pointer/length describe the live slice buf[got..].
        let r = unsafe {
            crate::raw_syscall!(
                libc::SYS_recvfrom,
                fd,
                buf[got..].as_mut_ptr() as usize,
                buf.len() - got,
                libc::MSG_DONTWAIT,
                0usize,
                0usize,
            )
        };
        match cvt_long(r) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed by peer",
                ))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait_ready(fd, libc::POLLIN, start, wait, &mut spins)?
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One byte range for vectored I/O, given by address. For memory that other
/// threads may touch at the same time (a memory server's page store), where a
/// Rust slice would promise an exclusivity the program cannot give.
#[derive(Debug, Clone, Copy)]
pub struct RawBuf {
    pub ptr: *mut u8,
    pub len: usize,
}

impl RawBuf {
    pub const EMPTY: RawBuf = RawBuf {
        ptr: std::ptr::null_mut(),
        len: 0,
    };

    /// A range covering `b` (for sending: the kernel only reads it).
    pub fn of(b: &[u8]) -> RawBuf {
        RawBuf {
            ptr: b.as_ptr().cast_mut(),
            len: b.len(),
        }
    }
}

/// Send every byte of `parts` (gathered, no copy) on a non-blocking socket.
pub fn send_vectored(fd: RawFd, parts: &[&[u8]], wait: Wait) -> io::Result<()> {
    let ranges = parts.iter().map(|p| (p.as_ptr().cast_mut(), p.len()));
    // SAFETY: every range is a live slice borrowed for the whole call.
    unsafe { send_ranges(fd, ranges, wait) }
}

/// [`send_vectored`] for ranges given by address.
///
/// # Safety
/// Each range must stay mapped and readable until the call returns.
pub unsafe fn send_vectored_raw(fd: RawFd, parts: &[RawBuf], wait: Wait) -> io::Result<()> {
    // SAFETY: forwarded to the caller's contract.
    unsafe { send_ranges(fd, parts.iter().map(|p| (p.ptr, p.len)), wait) }
}

/// The body of both sends, taking the ranges as an iterator so that the
/// only array on the stack (which may be a signal handler's) is the iovecs.
///
/// # Safety
/// As [`send_vectored_raw`].
unsafe fn send_ranges(
    fd: RawFd,
    parts: impl ExactSizeIterator<Item = (*mut u8, usize)>,
    wait: Wait,
) -> io::Result<()> {
    // SAFETY: forwarded to the caller's contract (readable ranges).
    unsafe { transfer(fd, parts, Direction::Send, wait) }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Send,
    Recv,
}

/// Move every byte of `parts` through `fd` (gathered or scattered, no copy),
/// spinning then polling while the socket would block.
///
/// # Safety
/// Each range must stay mapped until the call returns, readable for a send
/// and writable (with no Rust reference into it) for a receive.
unsafe fn transfer(
    fd: RawFd,
    parts: impl ExactSizeIterator<Item = (*mut u8, usize)>,
    dir: Direction,
    wait: Wait,
) -> io::Result<()> {
    assert!(parts.len() <= MAX_IOV, "too many iovecs");
    let count = parts.len();
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; MAX_IOV];
    for (slot, (ptr, len)) in iov.iter_mut().zip(parts) {
        slot.iov_base = ptr.cast();
        slot.iov_len = len;
    }
    let (nr, flags, event) = match dir {
        Direction::Send => (
            libc::SYS_sendmsg,
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            libc::POLLOUT,
        ),
        Direction::Recv => (libc::SYS_recvmsg, libc::MSG_DONTWAIT, libc::POLLIN),
    };
    let mut first = 0;
    let start = now_ns();
    let mut spins = 0u32;
    while first < count {
        if iov[first].iov_len == 0 {
            first += 1;
            continue;
        }
        // SAFETY: msghdr is plain data; zero is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov[first..count].as_mut_ptr();
        msg.msg_iovlen = count - first;
        // SAFETY: msg points at live iovecs describing memory the caller
        // keeps readable or writable (this function's contract).
        let r = unsafe { crate::raw_syscall!(nr, fd, &mut msg as *mut libc::msghdr, flags) };
        match cvt_long(r) {
            Ok(0) if dir == Direction::Recv => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed by peer",
                ))
            }
            Ok(n) => advance(&mut iov[..count], &mut first, n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait_ready(fd, event, start, wait, &mut spins)?
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Move past `n` transferred bytes: drop finished iovecs, trim a partial one.
fn advance(iov: &mut [libc::iovec], first: &mut usize, mut n: usize) {
    while n > 0 && *first < iov.len() {
        let take = n.min(iov[*first].iov_len);
        // take <= iov_len of this iovec, so the base stays inside its range.
        iov[*first].iov_base = (iov[*first].iov_base as usize + take) as *mut libc::c_void;
        iov[*first].iov_len -= take;
        n -= take;
        if iov[*first].iov_len == 0 {
            *first += 1;
        }
    }
}

/// Receive exactly the total length of `parts` (scattered, no copy) from a
/// non-blocking socket, spinning then polling like [`recv_exact`].
///
/// # Safety
/// Each range must stay mapped and writable until the call returns, and
/// nothing may hold a Rust reference into it meanwhile.
pub unsafe fn recv_exact_vectored_raw(fd: RawFd, parts: &[RawBuf], wait: Wait) -> io::Result<()> {
    // SAFETY: forwarded to the caller's contract (writable ranges).
    unsafe {
        transfer(
            fd,
            parts.iter().map(|p| (p.ptr, p.len)),
            Direction::Recv,
            wait,
        )
    }
}

/// Ask for send and receive buffers of `bytes` each (`SO_SNDBUF`,
/// `SO_RCVBUF`; the kernel doubles the figure for its bookkeeping and caps it
/// at `net.core.wmem_max` / `rmem_max`). A buffer that holds a whole batch
/// lets a sender finish in one call instead of waiting for the peer to drain.
pub fn set_socket_buffers(fd: RawFd, bytes: usize) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
        // SAFETY: the option value is a live c_int and its exact size is passed.
        cvt(unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                socklen_of::<libc::c_int>(),
            )
        })?;
    }
    Ok(())
}

/// `size_of::<T>()` as a `socklen_t`, for the option structs passed to
/// `setsockopt`/`getsockopt`.
fn socklen_of<T>() -> libc::socklen_t {
    // An int or a ucred: a few bytes, far below u32::MAX.
    #[allow(clippy::cast_possible_truncation)]
    let len = std::mem::size_of::<T>() as libc::socklen_t;
    len
}

/// An int-valued `SOL_SOCKET` option of `fd`.
fn sockopt_int(fd: RawFd, opt: libc::c_int) -> io::Result<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = socklen_of::<libc::c_int>();
    // SAFETY: v and len are live and len holds v's size.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    })
    .map(|_| v)
}

/// The socket's (send, receive) buffer sizes as the kernel reports them.
pub fn socket_buffers(fd: RawFd) -> io::Result<(usize, usize)> {
    let get = |opt| sockopt_int(fd, opt).map(|v| usize::try_from(v).unwrap_or(0));
    Ok((get(libc::SO_SNDBUF)?, get(libc::SO_RCVBUF)?))
}

/// Put a socket in non-blocking mode.
pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_GETFL takes no pointer.
    let fl = cvt(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    // SAFETY: F_SETFL takes an int.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) }).map(|_| ())
}

/// Receive at least one byte into the concatenation of `bufs` (scatter),
/// spinning then polling like [`recv_exact`]. Returns the byte count; 0 means
/// the peer closed the connection.
pub fn recv_some_vectored(fd: RawFd, bufs: &mut [&mut [u8]], wait: Wait) -> io::Result<usize> {
    assert!(bufs.len() <= MAX_IOV, "too many iovecs");
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; MAX_IOV];
    let mut k = 0;
    for b in bufs.iter_mut() {
        if !b.is_empty() {
            iov[k].iov_base = b.as_mut_ptr().cast();
            iov[k].iov_len = b.len();
            k += 1;
        }
    }
    if k == 0 {
        return Ok(0);
    }
    let start = now_ns();
    let mut spins = 0u32;
    loop {
        // SAFETY: msghdr is plain data; zero is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = k;
        // SAFETY: msg points at iovecs describing live, writable slices.
        let r = unsafe {
            crate::raw_syscall!(
                libc::SYS_recvmsg,
                fd,
                &mut msg as *mut libc::msghdr,
                libc::MSG_DONTWAIT,
            )
        };
        match cvt_long(r) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait_ready(fd, libc::POLLIN, start, wait, &mut spins)?
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Receive at least one byte into `buf`; 0 means the peer closed.
pub fn recv_some(fd: RawFd, buf: &mut [u8], wait: Wait) -> io::Result<usize> {
    recv_some_vectored(fd, &mut [buf], wait)
}

/// `shutdown(fd, SHUT_RDWR)`: wake any thread blocked on the socket with EOF.
pub fn shutdown(fd: RawFd) {
    // SAFETY: shutdown takes plain integers; a stale fd only yields EBADF.
    unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
}

/// The uid of the process at the other end of Unix socket `fd`.
pub fn peer_uid(fd: RawFd) -> io::Result<u32> {
    peer_cred(fd).map(|c| c.uid)
}

/// The peer's pid (in this process's pid namespace; 0 where it has none
/// there) of Unix socket `fd`, as the kernel recorded it (`SO_PEERCRED`).
pub fn peer_pid(fd: RawFd) -> io::Result<u32> {
    peer_cred(fd).map(|c| u32::try_from(c.pid).unwrap_or(0))
}

fn peer_cred(fd: RawFd) -> io::Result<libc::ucred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: u32::MAX,
        gid: 0,
    };
    let mut len = socklen_of::<libc::ucred>();
    // SAFETY: getsockopt into a live ucred of the stated size.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    })?;
    Ok(cred)
}

/// Whether the peer of connected stream socket `fd` has closed it or the
/// connection failed (a non-blocking peek: no data is consumed).
pub fn peer_closed(fd: RawFd) -> bool {
    let mut b = 0u8;
    // SAFETY: a one-byte peek into a live local.
    let r = unsafe {
        libc::recv(
            fd,
            (&mut b as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    r == 0
        || (r < 0
            && !matches!(
                io::Error::last_os_error().raw_os_error(),
                Some(libc::EAGAIN | libc::EINTR)
            ))
}

/// Whether stream socket `fd` is connected to this host: a Unix socket, TCP
/// to a loopback address, or TCP whose two ends have the same address (a
/// server on one of this host's own addresses, as `farmem serve
/// --rendezvous` listens on the node's address: the kernel routes such a
/// connection through loopback, so the peer is in this network namespace).
pub fn peer_is_local(fd: RawFd) -> bool {
    let Some(peer) = socket_ip(fd, libc::getpeername) else {
        // A Unix socket (or no peer).
        return socket_family(fd) == Some(libc::AF_UNIX);
    };
    let local_ip = |ip: std::net::IpAddr| match ip {
        std::net::IpAddr::V4(v) => v.is_loopback(),
        std::net::IpAddr::V6(v) => {
            v.is_loopback() || v.to_ipv4_mapped().is_some_and(|v| v.is_loopback())
        }
    };
    local_ip(peer) || socket_ip(fd, libc::getsockname) == Some(peer)
}

type NameFn =
    unsafe extern "C" fn(libc::c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> libc::c_int;

/// The socket's family, from its own name.
fn socket_family(fd: RawFd) -> Option<libc::c_int> {
    let (sa, _) = socket_name(fd, libc::getsockname)?;
    Some(libc::c_int::from(sa.ss_family))
}

/// `getsockname` or `getpeername` into a `sockaddr_storage`.
fn socket_name(fd: RawFd, name: NameFn) -> Option<(libc::sockaddr_storage, libc::socklen_t)> {
    // SAFETY: an all-zero sockaddr_storage is valid for the call to fill.
    let mut sa: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    // 128 bytes: fits socklen_t.
    #[allow(clippy::cast_possible_truncation)]
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: sa and len describe a live, large-enough buffer.
    let r = unsafe {
        name(
            fd,
            (&mut sa as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    };
    (r == 0).then_some((sa, len))
}

/// The IP address of the socket's own end or its peer's (`name`), if it is
/// an IP socket.
fn socket_ip(fd: RawFd, name: NameFn) -> Option<std::net::IpAddr> {
    let (sa, _) = socket_name(fd, name)?;
    match libc::c_int::from(sa.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says it is a sockaddr_in.
            let a = unsafe { &*(&sa as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)).into())
        }
        libc::AF_INET6 => {
            // SAFETY: the family says it is a sockaddr_in6.
            let a =
                unsafe { &*(&sa as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(std::net::Ipv6Addr::from(a.sin6_addr.s6_addr).into())
        }
        _ => None,
    }
}

/// Wait up to `ms` milliseconds for `fd` to be readable (or for a signal).
pub fn wait_readable(fd: RawFd, ms: i32) {
    wait_readable_any(&[fd], ms);
}

/// Wait up to `ms` milliseconds for any of `fds` (at most 4) to be
/// readable (or for a signal).
pub fn wait_readable_any(fds: &[RawFd], ms: i32) {
    let mut pfds = [libc::pollfd {
        fd: -1,
        events: libc::POLLIN,
        revents: 0,
    }; 4];
    let n = fds.len().min(pfds.len());
    for (p, &fd) in pfds.iter_mut().zip(&fds[..n]) {
        p.fd = fd;
    }
    // SAFETY: the first `n` of `pfds` are live pollfds. A timeout, EINTR or
    // an error all mean "look again" to the callers.
    unsafe { libc::poll(pfds.as_mut_ptr(), n as libc::nfds_t, ms) };
}

/// The address family (`AF_UNIX`, `AF_INET`, `AF_INET6`) of `fd` if it is a
/// listening socket; an error naming what it is not otherwise.
pub fn listening_family(fd: RawFd) -> io::Result<libc::c_int> {
    let get = |opt| sockopt_int(fd, opt);
    let family = get(libc::SO_DOMAIN).map_err(|e| {
        if e.raw_os_error() == Some(libc::ENOTSOCK) {
            io::Error::new(io::ErrorKind::InvalidInput, "not a socket")
        } else {
            e
        }
    })?;
    if get(libc::SO_ACCEPTCONN)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a socket, but not listening",
        ));
    }
    Ok(family)
}

/// One address of a network interface (`getifaddrs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceAddr {
    pub interface: String,
    pub addr: std::net::IpAddr,
    /// The interface is up (`IFF_UP`).
    pub up: bool,
    pub loopback: bool,
}

/// Every IPv4 and IPv6 address of this host's interfaces, in the kernel's
/// order.
pub fn interface_addrs() -> io::Result<Vec<InterfaceAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head into `head`, freed below.
    cvt(unsafe { libc::getifaddrs(&mut head) })?;
    let mut out = Vec::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned, alive until
        // freeifaddrs; its name is a NUL-terminated string and its address,
        // when not null, a sockaddr of the family it states.
        unsafe {
            let ifa = &*p;
            p = ifa.ifa_next;
            if ifa.ifa_addr.is_null() {
                continue;
            }
            let addr = match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let sin = &*ifa.ifa_addr.cast::<libc::sockaddr_in>();
                    std::net::IpAddr::from(u32::from_be(sin.sin_addr.s_addr).to_be_bytes())
                }
                libc::AF_INET6 => {
                    let sin6 = &*ifa.ifa_addr.cast::<libc::sockaddr_in6>();
                    std::net::IpAddr::from(sin6.sin6_addr.s6_addr)
                }
                _ => continue,
            };
            let flags = ifa.ifa_flags;
            out.push(InterfaceAddr {
                interface: std::ffi::CStr::from_ptr(ifa.ifa_name)
                    .to_string_lossy()
                    .into_owned(),
                addr,
                up: flags & libc::IFF_UP as u32 != 0,
                loopback: flags & libc::IFF_LOOPBACK as u32 != 0,
            });
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// Most descriptors one [`recv_exact_with_fd`] accepts in one message; any
/// more are closed and the receive fails (a peer that sends several where
/// one was asked for is not trusted).
const MAX_FDS_IN: usize = 4;

/// Send all of `bytes` on Unix stream socket `fd`, passing descriptor `pass`
/// with them (`SCM_RIGHTS`). The descriptor travels with the first byte
/// the kernel takes; the rest follows as plain data.
pub fn send_with_fd(fd: RawFd, bytes: &[u8], pass: RawFd, wait: Wait) -> io::Result<()> {
    if bytes.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a descriptor must travel with at least one byte",
        ));
    }
    const SPACE: usize = cmsg_space::<libc::c_int>(1);
    let mut control = [0u64; SPACE.div_ceil(8)];
    let start = now_ns();
    let mut spins = 0u32;
    loop {
        let mut iov = libc::iovec {
            iov_base: bytes.as_ptr().cast_mut().cast(),
            iov_len: bytes.len(),
        };
        // SAFETY: msghdr is plain data; zero is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = SPACE;
        // SAFETY: msg_control points at SPACE writable bytes, room for one
        // header and one int (CMSG_SPACE), so CMSG_FIRSTHDR is non-null and
        // CMSG_DATA has room for the descriptor.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(INT_LEN) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), pass);
        }
        // SAFETY: msg points at a live iovec over `bytes` and at `control`.
        let r = unsafe {
            crate::raw_syscall!(
                libc::SYS_sendmsg,
                fd,
                &mut msg as *mut libc::msghdr,
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT
            )
        };
        match cvt_long(r) {
            Ok(n) => return send_vectored(fd, &[&bytes[n..]], wait),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait_ready(fd, libc::POLLOUT, start, wait, &mut spins)?
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The size of a C int, as `CMSG_LEN` takes it.
const INT_LEN: u32 = 4;
const _: () = assert!(std::mem::size_of::<libc::c_int>() == INT_LEN as usize);

/// `CMSG_SPACE` for `n` values of `T`, as a constant.
const fn cmsg_space<T>(n: usize) -> usize {
    let align = std::mem::size_of::<usize>();
    let hdr = std::mem::size_of::<libc::cmsghdr>().next_multiple_of(align);
    hdr + (n * std::mem::size_of::<T>()).next_multiple_of(align)
}

/// Receive exactly `buf.len()` bytes from Unix stream socket `fd`, and the
/// one descriptor the peer passed with them (`SCM_RIGHTS`, close-on-exec),
/// if any. More than one descriptor, or a truncated control message, is an
/// error (every descriptor received is closed).
pub fn recv_exact_with_fd(
    fd: RawFd,
    buf: &mut [u8],
    wait: Wait,
) -> io::Result<Option<std::os::fd::OwnedFd>> {
    use std::os::fd::FromRawFd;
    const SPACE: usize = cmsg_space::<libc::c_int>(MAX_FDS_IN);
    let mut got_fd: Option<std::os::fd::OwnedFd> = None;
    let mut extra = false;
    let mut got = 0;
    let start = now_ns();
    let mut spins = 0u32;
    while got < buf.len() {
        let mut control = [0u64; SPACE.div_ceil(8)];
        let mut iov = libc::iovec {
            iov_base: buf[got..].as_mut_ptr().cast(),
            iov_len: buf.len() - got,
        };
        // SAFETY: msghdr is plain data; zero is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = SPACE;
        // SAFETY: msg points at a live iovec over buf[got..] and at
        // `control`, both writable for the call.
        let r = unsafe {
            crate::raw_syscall!(
                libc::SYS_recvmsg,
                fd,
                &mut msg as *mut libc::msghdr,
                libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC
            )
        };
        let n = match cvt_long(r) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed by peer",
                ))
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait_ready(fd, libc::POLLIN, start, wait, &mut spins)?;
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        got += n;
        // Take ownership of every descriptor that arrived, so that none
        // leaks whatever the peer sent.
        // SAFETY: the kernel filled msg_control with msg_controllen bytes of
        // well-formed control messages; CMSG_NXTHDR stays inside them.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(c).cast::<libc::c_int>();
                    let bytes = (*c).cmsg_len - libc::CMSG_LEN(0) as usize;
                    for i in 0..bytes / std::mem::size_of::<libc::c_int>() {
                        let raw = std::ptr::read_unaligned(data.add(i));
                        let owned = std::os::fd::OwnedFd::from_raw_fd(raw);
                        if got_fd.is_none() {
                            got_fd = Some(owned);
                        } else {
                            extra = true;
                        }
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            extra = true;
        }
    }
    if extra {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the peer passed more than one file descriptor with a message",
        ));
    }
    Ok(got_fd)
}

#[cfg(test)]
mod tests;
