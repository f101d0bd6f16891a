//! Processes: fork, pipes, exit.

use crate::cvt;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

/// `pipe2(O_CLOEXEC)`: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a live two-int array.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both fds were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

pub enum Forked {
    Child,
    Parent(libc::pid_t),
}

/// `fork(2)`.
///
/// # Safety
/// In a multi-threaded process the child may only rely on state no other
/// thread could have held locked at the fork (glibc's malloc is reset in the
/// child; other locks are not).
pub unsafe fn fork() -> io::Result<Forked> {
    // SAFETY: per the caller's contract.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid)),
    }
}

/// `_exit(2)`: leave without running atexit handlers or flushing stdio
/// buffers inherited from the parent.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and has no preconditions.
    unsafe { libc::_exit(code) }
}

pub fn getppid() -> libc::pid_t {
    // SAFETY: no preconditions.
    unsafe { libc::getppid() }
}

/// Name the calling thread (visible in `ps -L`, `top -H`).
pub fn set_thread_name(name: &std::ffi::CStr) {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
}

/// Reap a child without blocking; true if it has exited.
pub fn try_reap(pid: libc::pid_t) -> bool {
    let mut status = 0;
    // SAFETY: status is a live int.
    unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) == pid }
}

/// The child that [`forward_signals`] passes signals on to (0: none yet).
static FORWARD_TO: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let pid = FORWARD_TO.load(std::sync::atomic::Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    }
}

/// Pass `sigs` on to process `pid` instead of acting on them: a launcher
/// (`farmem run`) that is sent SIGTERM must stop its program, not leave it
/// running.
pub fn forward_signals(pid: libc::pid_t, sigs: &[libc::c_int]) {
    FORWARD_TO.store(pid, std::sync::atomic::Ordering::Relaxed);
    for &s in sigs {
        // SAFETY: installing a handler that only calls kill().
        unsafe { libc::signal(s, forward as *const () as libc::sighandler_t) };
    }
}
