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
    let r = unsafe { libc::syscall(libc::SYS_poll, &mut pfd as *mut libc::pollfd, 1, left_ms) };
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
            libc::syscall(
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

/// Send every byte of `parts` (gathered, no copy) on a non-blocking socket.
pub fn send_vectored(fd: RawFd, parts: &[&[u8]], wait: Wait) -> io::Result<()> {
    assert!(parts.len() <= MAX_IOV, "too many iovecs");
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; MAX_IOV];
    for (slot, p) in iov.iter_mut().zip(parts) {
        slot.iov_base = p.as_ptr() as *mut libc::c_void;
        slot.iov_len = p.len();
    }
    let mut first = 0;
    let count = parts.len();
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
        // SAFETY: msg points at live iovecs describing live slices.
        let r = unsafe {
            libc::syscall(
                libc::SYS_sendmsg,
                fd,
                &msg as *const libc::msghdr,
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        match cvt_long(r) {
            Ok(mut n) => {
                while n > 0 && first < count {
                    let take = n.min(iov[first].iov_len);
                    // SAFETY (pointer arithmetic): take <= iov_len of this iovec.
                    iov[first].iov_base =
                        (iov[first].iov_base as usize + take) as *mut libc::c_void;
                    iov[first].iov_len -= take;
                    n -= take;
                    if iov[first].iov_len == 0 {
                        first += 1;
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait_ready(fd, libc::POLLOUT, start, wait, &mut spins)?
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Put a socket in non-blocking mode.
pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_GETFL takes no pointer.
    let fl = cvt(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    // SAFETY: F_SETFL takes an int.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) }).map(|_| ())
}

/// `pread(2)` by raw syscall, retried on EINTR; returns bytes read (short at EOF).
pub fn pread_full(fd: RawFd, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: pointer/length describe the live slice buf[got..].
        let r = unsafe {
            libc::syscall(
                libc::SYS_pread64,
                fd,
                buf[got..].as_mut_ptr() as usize,
                buf.len() - got,
                offset + got as u64,
            )
        };
        match cvt_long(r) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// `pwrite(2)` by raw syscall, retried until everything is written.
pub fn pwrite_full(fd: RawFd, buf: &[u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: pointer/length describe the live slice buf[done..].
        let r = unsafe {
            libc::syscall(
                libc::SYS_pwrite64,
                fd,
                buf[done..].as_ptr() as usize,
                buf.len() - done,
                offset + done as u64,
            )
        };
        match cvt_long(r) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "pwrite wrote nothing",
                ))
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
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
            libc::syscall(
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
