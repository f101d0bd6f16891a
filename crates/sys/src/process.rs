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

/// Undo [`forward_signals`]: `sigs` back to their default action, and no
/// process to forward to.
pub fn stop_forwarding(sigs: &[libc::c_int]) {
    for &s in sigs {
        crate::signal::set_default(s);
    }
    FORWARD_TO.store(0, std::sync::atomic::Ordering::Relaxed);
}

/// Start `argv[0]` (a path) with `argv` and environment `env` (`KEY=VALUE`
/// strings), its stdout on /dev/null, no signals blocked, and
/// `pass` duplicated onto descriptor `as_fd` in the child (every other
/// descriptor of this process is close-on-exec or inherited as usual).
/// Returns the child's pid once `execve` has succeeded; if it fails, the
/// child's errno comes back as the error.
///
/// Everything the child needs is prepared before the fork: between fork and
/// exec it makes only async-signal-safe calls, so this is safe to call from
/// a multi-threaded process (and from a library constructor).
pub fn spawn_passing_fd(
    argv: &[std::ffi::CString],
    env: &[std::ffi::CString],
    pass: std::os::fd::BorrowedFd<'_>,
    as_fd: std::os::fd::RawFd,
) -> io::Result<libc::pid_t> {
    use std::os::fd::AsRawFd;
    assert!(!argv.is_empty(), "argv needs the program");
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = env.iter().map(|a| a.as_ptr()).collect();
    envp.push(std::ptr::null());
    // SAFETY: sigset_t is plain data; sigemptyset initialises it.
    let mut none: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `none` is a live sigset_t.
    unsafe { libc::sigemptyset(&mut none) };
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null")?;
    // Reports the child's exec failure; close-on-exec, so a successful exec
    // shows as end of file.
    let (rd, wr) = pipe()?;
    let (null_fd, wr_fd, pass_fd) = (null.as_raw_fd(), wr.as_raw_fd(), pass.as_raw_fd());
    // SAFETY: the child below makes only async-signal-safe calls (dup2,
    // fcntl, sigprocmask, execve, write, _exit) on memory prepared before
    // the fork.
    match unsafe { fork() }? {
        Forked::Child => {
            // SAFETY: plain descriptor calls; the pointers in `ptrs` point
            // at the caller's live CStrings (copied into the child).
            unsafe {
                let ok = libc::dup2(null_fd, 1) >= 0
                    && if pass_fd == as_fd {
                        // dup2 onto itself keeps close-on-exec: clear it.
                        libc::fcntl(as_fd, libc::F_SETFD, 0) == 0
                    } else {
                        libc::dup2(pass_fd, as_fd) >= 0
                    };
                // A mask blocked by the caller (a signal handler, a library
                // constructor) would outlive the exec: start clean.
                if ok && libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) == 0 {
                    libc::execve(ptrs[0], ptrs.as_ptr(), envp.as_ptr());
                }
                let e = *libc::__errno_location();
                libc::write(wr_fd, (&e as *const libc::c_int).cast(), 4);
                libc::_exit(127)
            }
        }
        Forked::Parent(pid) => {
            drop(wr);
            let mut buf = [0u8; 4];
            let mut f = std::fs::File::from(rd);
            let n = std::io::Read::read(&mut f, &mut buf).unwrap_or(0);
            if n == 4 {
                // SAFETY: status is a live int; the child has exited or will.
                unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
                return Err(io::Error::from_raw_os_error(i32::from_ne_bytes(buf)));
            }
            Ok(pid)
        }
    }
}

/// The file of the loaded object (executable or shared library) whose code
/// contains `addr`, as the dynamic loader names it.
pub fn object_path_of(addr: usize) -> Option<std::path::PathBuf> {
    // SAFETY: dladdr fills a zeroed Dl_info.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::dladdr(addr as *const libc::c_void, &mut info) } == 0
        || info.dli_fname.is_null()
    {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the loader.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    use std::os::unix::ffi::OsStrExt;
    Some(std::path::PathBuf::from(std::ffi::OsStr::from_bytes(
        name.to_bytes(),
    )))
}

/// Ask process `pid` to stop (SIGTERM), without waiting.
pub fn terminate(pid: libc::pid_t) {
    // SAFETY: kill takes plain integers.
    unsafe { libc::kill(pid, libc::SIGTERM) };
}

/// Send `sig` to `pid` (a child not yet reaped, so the pid is still its).
pub fn send_signal(pid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: kill takes plain integers.
    unsafe { libc::kill(pid, sig) };
}

/// Ask child `pid` to stop (SIGTERM) and wait for it to exit.
pub fn stop_child(pid: libc::pid_t) {
    // SAFETY: kill and waitpid on our own child; a null status is allowed.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
        while libc::waitpid(pid, std::ptr::null_mut(), 0) < 0
            && *libc::__errno_location() == libc::EINTR
        {}
    }
}

/// Run `f` in the child after every `fork` (pthread_atfork).
pub fn at_fork_child(f: unsafe extern "C" fn()) {
    // SAFETY: registering a plain extern "C" callback.
    unsafe { libc::pthread_atfork(None, None, Some(f)) };
}

/// Run `f` at normal process exit (atexit).
pub fn at_exit(f: extern "C" fn()) {
    // SAFETY: registering a plain extern "C" callback.
    unsafe { libc::atexit(f) };
}

/// Whether a seccomp filter is on this process (`Seccomp: 2` in
/// `/proc/self/status`): a container runtime's profile, or a sandbox's.
/// None where the kernel does not say (no `/proc`, or no seccomp).
pub fn seccomp_filtered() -> Option<bool> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let mode = status.lines().find_map(|l| l.strip_prefix("Seccomp:"))?;
    Some(mode.trim() == "2")
}

/// The memory cgroup of process `pid` (this process for `None`), as
/// `/proc/PID/cgroup` names it: the cgroup v1 `memory` controller's line,
/// else the unified (v2) line. None where it cannot be read.
pub fn memory_cgroup(pid: Option<u32>) -> Option<String> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/cgroup"),
        None => "/proc/self/cgroup".to_string(),
    };
    let text = std::fs::read_to_string(path).ok()?;
    let mut unified = None;
    for line in text.lines() {
        // "ID:CONTROLLERS:PATH"; the path may itself hold colons.
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        if controllers.split(',').any(|c| c == "memory") {
            return Some(format!("memory:{path}"));
        }
        if controllers.is_empty() {
            unified = Some(format!("unified:{path}"));
        }
    }
    unified
}

pub fn getuid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::getuid() }
}

/// The effective uid: the user whose rights this process has.
pub fn geteuid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() }
}

/// Fill `buf` from the kernel's random source; false if it could not (see
/// [`fill_random`] for why).
pub fn random_bytes(buf: &mut [u8]) -> bool {
    fill_random(buf).is_ok()
}

/// Fill all of `buf` from the kernel's random source (`getrandom`, which
/// blocks until the pool is ready), again after a signal or a short read.
/// The error is the kernel's: callers stop rather than use a weaker source.
pub fn fill_random(buf: &mut [u8]) -> io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        let rest = &mut buf[at..];
        // SAFETY: the pointer and length describe `rest`, a live slice.
        let r = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        match usize::try_from(r) {
            Ok(0) => return Err(io::Error::other("getrandom returned no bytes")),
            Ok(n) => at += n,
            Err(_) => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// The running kernel's release (`uname -r`).
pub fn kernel_release() -> String {
    uname_field(|u| &u.release)
}

/// This host's name (`uname -n`).
pub fn hostname() -> String {
    uname_field(|u| &u.nodename)
}

fn uname_field(field: fn(&libc::utsname) -> &[libc::c_char; 65]) -> String {
    // SAFETY: uname fills a zeroed utsname.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: u is a live utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown".into();
    }
    // SAFETY: uname NUL-terminates each of its fields.
    unsafe { std::ffi::CStr::from_ptr(field(&u).as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// Move the calling process into the cgroup whose `cgroup.procs` (v2) or
/// `tasks`/`cgroup.procs` (v1) file is `procs`. Made for a `pre_exec` hook:
/// it allocates nothing and makes only async-signal-safe calls.
pub fn enter_cgroup(procs: &std::ffi::CStr) -> io::Result<()> {
    // SAFETY: open of a NUL-terminated path the caller keeps alive.
    let fd = unsafe { libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = [0u8; 16];
    // SAFETY: getpid has no preconditions.
    let mut pid = unsafe { libc::getpid() }.unsigned_abs(); // a pid is positive
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (pid % 10) as u8;
        pid /= 10;
        if pid == 0 {
            break;
        }
    }
    // SAFETY: writing from a live stack buffer to our own fd, then closing it.
    let r = unsafe { libc::write(fd, buf[i..].as_ptr().cast(), buf.len() - i) };
    let e = io::Error::last_os_error();
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    if r < 0 {
        return Err(e);
    }
    Ok(())
}

/// If child `pid` has exited: its wait status (as `ExitStatusExt::from_raw`
/// takes it) and its peak resident set in bytes (`ru_maxrss`). Reaps it.
pub fn try_wait_rusage(pid: libc::pid_t) -> io::Result<Option<(i32, u64)>> {
    let mut status = 0;
    // SAFETY: rusage is plain data, filled by wait4.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: status and ru are live; WNOHANG returns at once.
    let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
    match r {
        0 => Ok(None),
        r if r == pid => Ok(Some((
            status,
            u64::try_from(ru.ru_maxrss).unwrap_or(0) * 1024,
        ))),
        _ => Err(io::Error::last_os_error()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::os::fd::AsFd;

    #[test]
    fn random_bytes_fill_the_whole_buffer() {
        // More than getrandom returns in one call for a large request.
        let mut big = vec![0u8; 64 << 20];
        fill_random(&mut big).unwrap();
        assert!(big[big.len() - 4096..].iter().any(|&b| b != 0));
        let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
        assert!(random_bytes(&mut a) && random_bytes(&mut b));
        assert_ne!(a, b);
    }

    #[test]
    fn spawn_passes_the_descriptor_and_reports_exec_failure() {
        let (rd, wr) = pipe().unwrap();
        // The child writes into the passed descriptor as its fd 5.
        let argv = ["/bin/sh", "-c", "echo passed >&5"].map(|a| CString::new(a).unwrap());
        let pid = spawn_passing_fd(&argv, &[], wr.as_fd(), 5).unwrap();
        drop(wr);
        let mut got = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(rd), &mut got).unwrap();
        assert_eq!(got, "passed\n");
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        let (_, wr) = pipe().unwrap();
        let argv = [CString::new("/nonexistent/farmem").unwrap()];
        let e = spawn_passing_fd(&argv, &[], wr.as_fd(), 3).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    }

    /// A process's memory cgroup reads the same through its pid as through
    /// `self`, and a pid that does not exist has none.
    #[test]
    fn seccomp_is_read_from_this_process() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let filtered = status.contains("Seccomp:\t2");
        assert_eq!(seccomp_filtered(), Some(filtered));
    }

    #[test]
    fn memory_cgroup_names_this_process() {
        let me = memory_cgroup(None).expect("/proc/self/cgroup names a memory cgroup");
        assert!(
            me.starts_with("memory:") || me.starts_with("unified:"),
            "{me}"
        );
        assert_eq!(memory_cgroup(Some(std::process::id())), Some(me));
        assert_eq!(memory_cgroup(Some(u32::MAX)), None);
    }
}
