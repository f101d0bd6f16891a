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

/// The fault handler's installation: like [`install`], but every
/// asynchronous signal stays blocked while the handler runs, and `sig`
/// itself does not (`SA_NODEFER`).
///
/// The asynchronous signals: the handler holds spin locks and owns pages
/// mid-transition, and a program's signal handler that ran on top of it and
/// touched far memory would fault again inside it or spin on a lock its own
/// thread holds. `sig` itself: a fault raised while its signal is blocked
/// kills the process on the spot, with no word of why; unblocked, a fault
/// inside the handler reaches the handler again, which can say what
/// happened before it stops the program.
pub fn install_fault_handler(
    sig: libc::c_int,
    handler: SigInfoHandler,
) -> io::Result<libc::sigaction> {
    install_with_mask(sig, handler, true)
}

fn install_with_mask(
    sig: libc::c_int,
    handler: SigInfoHandler,
    fault_handler: bool,
) -> io::Result<libc::sigaction> {
    // SAFETY: sigaction is plain old data; zero is a valid initial value.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = handler as usize;
    sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    sa.sa_mask = if fault_handler {
        sa.sa_flags |= libc::SA_NODEFER;
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
        SignalBlock::block(&async_signals())
    }

    /// Blocks `sig` alone until dropped (restoring the previous mask).
    pub fn only(sig: libc::c_int) -> SignalBlock {
        // SAFETY: sigset_t is plain data; sigemptyset initialises it.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a live sigset_t; sig is a valid signal number.
        unsafe {
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
        }
        SignalBlock::block(&set)
    }

    fn block(set: &libc::sigset_t) -> SignalBlock {
        // SAFETY: sigset_t is plain data; pthread_sigmask fills it.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: both sets are live.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, set, &mut old) };
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
    static NEXT: crate::dl::Next = crate::dl::Next::new(c"sigaction");
    let f = NEXT.get_or(libc::sigaction as *const () as usize);
    // SAFETY: `f` is a function with sigaction's C prototype.
    unsafe { std::mem::transmute::<usize, SigactionFn>(f) }
}

/// How many dispositions a [`SavedAction`] keeps before it reuses a slot.
const SAVED_SLOTS: usize = 32;

/// A signal disposition the program asked for, kept for the handler farmem
/// keeps installed to chain to (the program's SIGBUS crash reporter, a
/// seccomp supervisor's SIGSYS handler). It is set from `sigaction`, which
/// POSIX lets a signal handler call, and read from farmem's handler, so
/// neither side allocates or takes a lock: each set writes the next slot of
/// a ring, then publishes its index.
///
/// HAZARD: a reader copies the published slot while writers go on. Slot i
/// is written again only after `SAVED_SLOTS` more sets:
///   reader: loads index 5, starts copying slot 5, is preempted;
///   writers: 32 `sigaction` calls for this signal, the last one rewriting
///   slot 5;
///   reader: finishes the copy, torn.
/// Programs set a signal's disposition a handful of times, so the ring is
/// never lapped in practice.
pub struct SavedAction {
    slots: [std::cell::UnsafeCell<std::mem::MaybeUninit<libc::sigaction>>; SAVED_SLOTS],
    next: std::sync::atomic::AtomicUsize,
    /// Published slot + 1; 0 while none was set.
    current: std::sync::atomic::AtomicUsize,
}

// SAFETY: slots are written only before their index is published (Release)
// and read after it is loaded (Acquire); see the hazard above.
unsafe impl Sync for SavedAction {}

impl SavedAction {
    pub const fn new() -> SavedAction {
        SavedAction {
            slots: [const { std::cell::UnsafeCell::new(std::mem::MaybeUninit::uninit()) };
                SAVED_SLOTS],
            next: std::sync::atomic::AtomicUsize::new(0),
            current: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Keep `act`; returns the one it replaces.
    pub fn set(&self, act: libc::sigaction) -> Option<libc::sigaction> {
        use std::sync::atomic::Ordering;
        let i = self.next.fetch_add(1, Ordering::Relaxed) % SAVED_SLOTS;
        // SAFETY: slot i is not published (see the hazard for a lapped ring).
        unsafe { (*self.slots[i].get()).write(act) };
        let old = self.current.swap(i + 1, Ordering::AcqRel);
        self.read(old)
    }

    /// The disposition kept, if one was set.
    pub fn get(&self) -> Option<libc::sigaction> {
        self.read(self.current.load(std::sync::atomic::Ordering::Acquire))
    }

    fn read(&self, published: usize) -> Option<libc::sigaction> {
        let i = published.checked_sub(1)?;
        // SAFETY: a published slot was written before its index was stored.
        Some(unsafe { (*self.slots[i].get()).assume_init_read() })
    }
}

impl Default for SavedAction {
    fn default() -> SavedAction {
        SavedAction::new()
    }
}

#[cfg(test)]
mod saved_tests {
    use super::*;

    fn with_handler(h: usize) -> libc::sigaction {
        // SAFETY: a zeroed sigaction is valid.
        let mut a: libc::sigaction = unsafe { std::mem::zeroed() };
        a.sa_sigaction = h;
        a
    }

    #[test]
    fn it_keeps_the_last_and_hands_back_the_one_before_across_the_ring() {
        let s = SavedAction::new();
        assert!(s.get().is_none());
        assert!(s.set(with_handler(100)).is_none());
        for h in 101..(101 + 3 * SAVED_SLOTS) {
            let old = s.set(with_handler(h)).expect("a previous one");
            assert_eq!(old.sa_sigaction, h - 1);
            assert_eq!(s.get().unwrap().sa_sigaction, h);
        }
    }
}
