//! Signals: the SIGBUS handler that runs the fault path, chaining to the
//! program's own handler.

use crate::fork::is_forked_child;
use crate::get;

/// The program's own SIGBUS disposition: the one installed before farmem
/// started, or one it asked for later through the `sigaction` wrapper.
/// SIGBUSes outside far memory go to it.
static PROGRAM_SIGBUS: farmem_sys::signal::SavedAction = farmem_sys::signal::SavedAction::new();

/// Record the program's SIGBUS disposition (farmem's handler stays the one
/// the kernel calls); returns the previous one. Allocation-free: the
/// program's `sigaction` may run in a signal handler.
pub fn set_program_sigbus(act: libc::sigaction) -> Option<libc::sigaction> {
    PROGRAM_SIGBUS.set(act)
}

/// The program's SIGBUS disposition, if farmem runs.
pub fn program_sigbus() -> Option<libc::sigaction> {
    PROGRAM_SIGBUS.get()
}
pub(crate) extern "C" fn print_stats_at_exit() {
    // A forked child shares its parent's published counters (and has no
    // far memory of its own): the parent prints them.
    if is_forked_child() {
        return;
    }
    if let Some(rt) = get() {
        farmem_sys::write_stderr(rt.stats_text().as_bytes());
    }
}

pub(crate) extern "C" fn on_sigbus(
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    ctx: *mut libc::c_void,
) {
    // The handler must leave errno as it found it.
    let errno = farmem_sys::signal::errno();
    // SAFETY: called by the kernel as an SA_SIGINFO fault handler.
    let addr = unsafe { farmem_sys::signal::fault_addr(info) };
    match get() {
        Some(rt) if rt.arena.contains(addr) => {
            // SAFETY: ctx is the handler's ucontext.
            let write = unsafe { farmem_sys::signal::fault_is_write(ctx) };
            rt.handle_fault(addr, write);
        }
        _ => chain_sigbus(sig, info, ctx),
    }
    farmem_sys::signal::set_errno(errno);
}

/// A SIGBUS that is not ours: hand it to the previous handler, or let the
/// default action (core dump) happen when the access is retried.
fn chain_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Some(prev) = program_sigbus() else {
        farmem_sys::signal::set_default(sig);
        return;
    };
    let prev = &prev;
    let h = prev.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        farmem_sys::signal::set_default(sig);
    } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed as an SA_SIGINFO handler.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(h) };
        f(sig, info, ctx);
    } else {
        // SAFETY: the previous handler was installed as a plain handler.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}
