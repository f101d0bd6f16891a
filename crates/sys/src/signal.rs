//! Signal handlers and masks.

use crate::cvt;
use std::io;

/// The handler signature for `SA_SIGINFO` handlers.
pub type SigInfoHandler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

/// Install `handler` for `sig` with `SA_SIGINFO | SA_RESTART` (not `SA_ONSTACK`: a small alternate stack, such as the one Rust sets up for overflow detection, is too small for the fault path),
/// returning the previous action (for chaining faults that are not ours).
pub fn install(sig: libc::c_int, handler: SigInfoHandler) -> io::Result<libc::sigaction> {
    install_with_mask(sig, handler, false)
}

/// Like [`install`], but every asynchronous signal stays blocked while the
/// handler runs. The fault handler needs this: it holds spin locks and owns
/// pages mid-transition, and a program's signal handler that ran on top of it
/// and touched far memory would fault again with SIGBUS blocked (the kernel
/// then kills the process) or spin on a lock its own thread holds.
pub fn install_blocking_async(
    sig: libc::c_int,
    handler: SigInfoHandler,
) -> io::Result<libc::sigaction> {
    install_with_mask(sig, handler, true)
}

fn install_with_mask(
    sig: libc::c_int,
    handler: SigInfoHandler,
    block_async: bool,
) -> io::Result<libc::sigaction> {
    // SAFETY: sigaction is plain old data; zero is a valid initial value.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = handler as usize;
    sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    sa.sa_mask = if block_async {
        async_signals()
    } else {
        // SAFETY: sigset_t is plain data; sigemptyset initialises it.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a live sigset_t.
        unsafe { libc::sigemptyset(&mut set) };
        set
    };
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers refer to live sigaction structs.
    cvt(unsafe { real_sigaction()(sig, &sa, &mut old) })?;
    Ok(old)
}

/// Restore a saved action (used to fall back to the default for faults
/// outside farmem's memory).
pub fn restore(sig: libc::c_int, act: &libc::sigaction) -> io::Result<()> {
    // SAFETY: `act` is a live sigaction; old action not requested.
    cvt(unsafe { real_sigaction()(sig, act, std::ptr::null_mut()) }).map(|_| ())
}

/// Reset `sig` to its default disposition.
pub fn set_default(sig: libc::c_int) {
    // SAFETY: SIG_DFL is always a valid disposition.
    unsafe { libc::signal(sig, libc::SIG_DFL) };
}

/// Ignore `sig` (SIG_IGN).
pub fn ignore(sig: libc::c_int) {
    // SAFETY: SIG_IGN is always a valid disposition.
    unsafe { libc::signal(sig, libc::SIG_IGN) };
}

/// Run `handler` on `sig`. It must be async-signal-safe (store to an atomic).
pub fn on_signal(sig: libc::c_int, handler: extern "C" fn(libc::c_int)) {
    // SAFETY: a plain extern "C" handler; the caller keeps it signal-safe.
    unsafe { libc::signal(sig, handler as *const () as libc::sighandler_t) };
}

static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn interrupted(_: libc::c_int) {
    INTERRUPTED.store(true, std::sync::atomic::Ordering::Release);
}

/// A flag that SIGINT and SIGTERM set from now on, instead of ending the
/// process: for a loop that must tear down what it set up (a benchmark's
/// swap file, a server's rendezvous entry) before it exits.
pub fn interrupt_flag() -> &'static std::sync::atomic::AtomicBool {
    on_signal(libc::SIGINT, interrupted);
    on_signal(libc::SIGTERM, interrupted);
    &INTERRUPTED
}

/// Send `sig` to the calling thread.
pub fn raise(sig: libc::c_int) {
    // SAFETY: raise has no memory preconditions.
    unsafe { libc::raise(sig) };
}

/// The calling thread's `errno`, to be put back with [`set_errno`] by a
/// signal handler that makes system calls.
pub fn errno() -> libc::c_int {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

pub fn set_errno(v: libc::c_int) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = v };
}

/// Every signal except the synchronous fault signals (which cannot be
/// deferred: blocking one while it is raised kills the process).
fn async_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data and is initialised by sigfillset.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live sigset_t.
    unsafe { libc::sigfillset(&mut set) };
    for s in [
        libc::SIGBUS,
        libc::SIGSEGV,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGTRAP,
    ] {
        // SAFETY: `set` is a live sigset_t; s is a valid signal number.
        unsafe { libc::sigdelset(&mut set, s) };
    }
    set
}

/// Blocks every blockable signal except the synchronous fault signals until
/// dropped (restoring the previous mask). Used around code that holds a lock
/// which a user's signal handler could need if it touched far memory.
pub struct SignalBlock {
    old: libc::sigset_t,
}

impl SignalBlock {
    pub fn new() -> SignalBlock {
        let set = async_signals();
        // SAFETY: sigset_t is plain data; pthread_sigmask fills it.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: both sets are live.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) };
        SignalBlock { old }
    }
}

impl Default for SignalBlock {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for SignalBlock {
    fn drop(&mut self) {
        // SAFETY: `old` is the mask saved by new().
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

/// The faulting address of a SIGBUS/SIGSEGV.
///
/// # Safety
/// `info` must be the siginfo passed to a fault-signal handler.
pub unsafe fn fault_addr(info: *const libc::siginfo_t) -> usize {
    // SAFETY: per the contract `info` is valid and carries si_addr.
    unsafe { (*info).si_addr() as usize }
}

/// Whether the fault that raised the signal was a write (x86 page-fault error
/// code bit 1, saved by the kernel in the signal frame).
///
/// # Safety
/// `ctx` must be the ucontext passed to an `SA_SIGINFO` fault-signal handler.
pub unsafe fn fault_is_write(ctx: *const libc::c_void) -> bool {
    let uc = ctx.cast::<libc::ucontext_t>();
    // SAFETY: per the contract `uc` points to the live signal frame.
    let err = unsafe { (*uc).uc_mcontext.gregs[libc::REG_ERR as usize] };
    err & 2 != 0
}

type SigactionFn =
    unsafe extern "C" fn(libc::c_int, *const libc::sigaction, *mut libc::sigaction) -> libc::c_int;

/// The C library's `sigaction`, past farmem's own wrapper (which keeps
/// SIGBUS for farmem once it runs, and would swallow farmem's own calls).
fn real_sigaction() -> SigactionFn {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    let mut f = SLOT.load(Ordering::Relaxed);
    if f == 0 {
        // SAFETY: RTLD_NEXT lookup of a NUL-terminated name.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"sigaction".as_ptr()) } as usize;
        if f == 0 {
            f = libc::sigaction as *const () as usize;
        }
        SLOT.store(f, Ordering::Relaxed);
    }
    // SAFETY: `f` is a function with sigaction's C prototype.
    unsafe { std::mem::transmute::<usize, SigactionFn>(f) }
}
