//! Signal masks and handlers that would break the fault path.
//!
//! farmem serves far-memory faults in the faulting thread's SIGBUS handler.
//! Two things a program may do to SIGBUS would turn a far-memory access into
//! death:
//! - *block it*: a thread that blocks every signal (jemalloc's background
//!   thread, many servers' helper threads) is killed by the kernel at its
//!   first fault on far memory, since a blocked synchronous signal cannot be
//!   delivered. So SIGBUS is taken out of every mask a program sets
//!   (`sigprocmask`, `pthread_sigmask`, a handler's `sa_mask`). Blocking a
//!   hardware-fault signal has no other effect worth keeping: the kernel
//!   kills the thread either way.
//! - *replace the handler*: once farmem runs, a program's `sigaction` or
//!   `signal` for SIGBUS is recorded as the handler SIGBUSes outside far
//!   memory go to (redis installs a crash reporter there), and farmem's
//!   handler stays installed. The same holds for SIGSYS while the raw-call
//!   net ([`crate::dispatch`]) is on: a seccomp supervisor's handler gets
//!   every SIGSYS that is not the net's.

use farmem_runtime as rt;
use farmem_sys::signal::SavedAction;
use libc::{c_int, sigset_t};

/// The program's own SIGSYS disposition (a seccomp supervisor's handler),
/// recorded by the `sigaction` wrapper while the raw-call net is on; the
/// net's handler ([`crate::dispatch`]) chains to it.
static PROGRAM_SIGSYS: SavedAction = SavedAction::new();

/// The program's SIGSYS disposition, if it set one while the net was on.
pub fn program_sigsys() -> Option<libc::sigaction> {
    PROGRAM_SIGSYS.get()
}

fn set_program_sigsys(act: libc::sigaction) -> Option<libc::sigaction> {
    PROGRAM_SIGSYS.set(act)
}

/// `set` without SIGBUS, when it would block SIGBUS.
fn strip(how: c_int, set: *const sigset_t) -> Option<sigset_t> {
    if set.is_null() || how == libc::SIG_UNBLOCK {
        return None;
    }
    // SAFETY: the caller passes a valid sigset.
    let mut copy = unsafe { *set };
    // SAFETY: `copy` is a live sigset.
    if unsafe { libc::sigismember(&copy, libc::SIGBUS) } != 1 {
        return None;
    }
    // SAFETY: as above.
    unsafe { libc::sigdelset(&mut copy, libc::SIGBUS) };
    Some(copy)
}

type MaskFn = unsafe extern "C" fn(c_int, *const sigset_t, *mut sigset_t) -> c_int;

/// `pthread_sigmask(3)`, never blocking SIGBUS.
///
/// # Safety
/// As `pthread_sigmask(3)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_sigmask(
    how: c_int,
    set: *const sigset_t,
    old: *mut sigset_t,
) -> c_int {
    let f = crate::forward::real!(c"pthread_sigmask", MaskFn);
    let copy = strip(how, set);
    let set = copy.as_ref().map_or(set, |c| c as *const sigset_t);
    // SAFETY: forwarded, with SIGBUS left out of the new mask.
    unsafe { f(how, set, old) }
}

/// `sigprocmask(2)`, never blocking SIGBUS.
///
/// # Safety
/// As `sigprocmask(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sigprocmask(
    how: c_int,
    set: *const sigset_t,
    old: *mut sigset_t,
) -> c_int {
    let f = crate::forward::real!(c"sigprocmask", MaskFn);
    let copy = strip(how, set);
    let set = copy.as_ref().map_or(set, |c| c as *const sigset_t);
    // SAFETY: forwarded, with SIGBUS left out of the new mask.
    unsafe { f(how, set, old) }
}

type ActionFn = unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;

/// `sigaction(2)`: SIGBUS stays farmem's once it runs (the program's
/// handler is chained to), and no handler's mask blocks SIGBUS.
///
/// # Safety
/// As `sigaction(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    let f = crate::forward::real!(c"sigaction", ActionFn);
    if sig == libc::SIGBUS && rt::get().is_some() {
        let prev = if act.is_null() {
            rt::signals::program_sigbus()
        } else {
            // SAFETY: the caller passes a valid sigaction.
            let mut a = unsafe { *act };
            // SAFETY: sa_mask is a live sigset.
            unsafe { libc::sigdelset(&mut a.sa_mask, libc::SIGBUS) };
            rt::signals::set_program_sigbus(a)
        };
        if !old.is_null() {
            // SAFETY: the caller passes a writable sigaction. A program that
            // never set one sees the default disposition.
            unsafe {
                *old = prev.unwrap_or_else(|| {
                    let mut d: libc::sigaction = std::mem::zeroed();
                    d.sa_sigaction = libc::SIG_DFL;
                    d
                })
            };
        }
        return 0;
    }
    if sig == libc::SIGSYS && crate::selector::active() {
        // The raw-call net's handler stays; the program's is chained to for
        // SIGSYSes that are not the net's (seccomp's, kill's).
        let prev = if act.is_null() {
            program_sigsys()
        } else {
            // SAFETY: the caller passes a valid sigaction.
            set_program_sigsys(unsafe { *act })
        };
        if !old.is_null() {
            // SAFETY: the caller passes a writable sigaction.
            unsafe {
                *old = prev.unwrap_or_else(|| {
                    let mut d: libc::sigaction = std::mem::zeroed();
                    d.sa_sigaction = libc::SIG_DFL;
                    d
                })
            };
        }
        return 0;
    }
    if act.is_null() {
        // SAFETY: forwarded unchanged.
        return unsafe { f(sig, act, old) };
    }
    // SAFETY: the caller passes a valid sigaction.
    let mut a = unsafe { *act };
    // SAFETY: sa_mask is a live sigset.
    unsafe { libc::sigdelset(&mut a.sa_mask, libc::SIGBUS) };
    // SAFETY: forwarded with SIGBUS left out of the handler's mask.
    unsafe { f(sig, &a, old) }
}

/// `signal(2)`: the same rules as [`sigaction`], with BSD semantics (as
/// glibc's `signal`: `SA_RESTART`, handler not reset).
///
/// # Safety
/// As `signal(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: a zeroed sigaction is valid; the fields are set below.
    let mut a: libc::sigaction = unsafe { std::mem::zeroed() };
    a.sa_sigaction = handler;
    a.sa_flags = libc::SA_RESTART;
    // SAFETY: both are live sigactions.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above; an empty mask plus the signal itself, as glibc does.
    unsafe {
        libc::sigemptyset(&mut a.sa_mask);
        libc::sigaddset(&mut a.sa_mask, sig);
    }
    // SAFETY: both pointers are live.
    if unsafe { sigaction(sig, &a, &mut old) } != 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}

/// `rt_sigprocmask` and `rt_sigaction` made through `syscall(2)`: SIGBUS
/// is left out of the new mask the same way. Returns `Some(result)` when
/// handled here.
pub fn intercept(nr: libc::c_long, a: &[usize; 6]) -> Option<libc::c_long> {
    const BUS_BIT: u64 = 1 << (libc::SIGBUS - 1);
    match nr {
        libc::SYS_rt_sigprocmask if a[1] != 0 && farmem_sys::int_arg(a[0]) != libc::SIG_UNBLOCK => {
            // SAFETY: the kernel's sigset is a u64 on x86-64; the caller
            // passes a valid one.
            let set = unsafe { *(a[1] as *const u64) };
            if set & BUS_BIT == 0 {
                return None;
            }
            let copy = set & !BUS_BIT;
            // SAFETY: forwarded with the copy; other arguments unchanged.
            Some(unsafe { farmem_sys::raw_syscall!(nr, a[0], &copy as *const u64, a[2], a[3]) })
        }
        _ => None,
    }
}
