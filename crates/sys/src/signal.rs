//! Signal handlers and masks.

use crate::cvt;
use std::io;

/// The handler signature for `SA_SIGINFO` handlers.
pub type SigInfoHandler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

/// Install `handler` for `sig` with `SA_SIGINFO | SA_RESTART` (not `SA_ONSTACK`: a small alternate stack, such as the one Rust sets up for overflow detection, is too small for the fault path),
/// returning the previous action (for chaining faults that are not ours).
pub fn install(sig: libc::c_int, handler: SigInfoHandler) -> io::Result<libc::sigaction> {
    // SAFETY: sigaction is plain old data; zero is a valid initial value.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = handler as usize;
    sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    // SAFETY: sa.sa_mask is a valid sigset_t to initialise.
    unsafe { libc::sigemptyset(&mut sa.sa_mask) };
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers refer to live sigaction structs.
    cvt(unsafe { libc::sigaction(sig, &sa, &mut old) })?;
    Ok(old)
}

/// Restore a saved action (used to fall back to the default for faults
/// outside farmem's memory).
pub fn restore(sig: libc::c_int, act: &libc::sigaction) -> io::Result<()> {
    // SAFETY: `act` is a live sigaction; old action not requested.
    cvt(unsafe { libc::sigaction(sig, act, std::ptr::null_mut()) }).map(|_| ())
}

/// Reset `sig` to its default disposition.
pub fn set_default(sig: libc::c_int) {
    // SAFETY: SIG_DFL is always a valid disposition.
    unsafe { libc::signal(sig, libc::SIG_DFL) };
}

/// Blocks every blockable signal except the synchronous fault signals until
/// dropped (restoring the previous mask). Used around code that holds a lock
/// which a user's signal handler could need if it touched far memory.
pub struct SignalBlock {
    old: libc::sigset_t,
}

impl SignalBlock {
    pub fn new() -> SignalBlock {
        // SAFETY: sigset_t is plain data and is initialised by sigfillset.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a live sigset_t.
        unsafe { libc::sigfillset(&mut set) };
        for s in [libc::SIGBUS, libc::SIGSEGV, libc::SIGILL, libc::SIGFPE] {
            // SAFETY: `set` is a live sigset_t; s is a valid signal number.
            unsafe { libc::sigdelset(&mut set, s) };
        }
        // SAFETY: as above.
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
