//! Signals: the SIGBUS handler that runs the fault path, chaining to the
//! program's own handler.

use crate::fork::is_forked_child;
use crate::get;
use farmem_sys::msg::MsgBuf;
use std::cell::Cell;
use std::fmt::Write as _;

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

thread_local! {
    /// The far address whose fault this thread is handling, or 0.
    static HANDLING: Cell<usize> = const { Cell::new(0) };
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
    // The handler runs with SIGBUS unblocked (SA_NODEFER), so that a fault
    // of farmem's own while it handles one comes here and is named, where
    // the kernel would otherwise kill the program without a word.
    let outer = HANDLING.with(Cell::get);
    if outer != 0 {
        fault_in_handler(addr, outer);
    }
    match get() {
        Some(rt) if rt.arena.contains(addr) => {
            // SAFETY: ctx is the handler's ucontext.
            let write = unsafe { farmem_sys::signal::fault_is_write(ctx) };
            HANDLING.with(|h| h.set(addr));
            rt.handle_fault(addr, write);
            HANDLING.with(|h| h.set(0));
        }
        Some(rt) if rt.in_bin(addr) => {
            let mut m = MsgBuf::new();
            let _ = writeln!(
                m,
                "farmem: internal error: farmem touched {addr:#x}, a page of its bin of recycled \
                 pages that it took for present and is not; stopping the program (FARMEM_RECYCLE=0 \
                 runs without the bin)"
            );
            farmem_sys::fatal(m.as_bytes());
        }
        _ => chain_sigbus(sig, info, ctx),
    }
    farmem_sys::signal::set_errno(errno);
}

/// A fault at `addr` while this thread handled the one at `outer`: farmem's
/// own code touched memory that could not be served there. Stop the
/// program, saying where.
fn fault_in_handler(addr: usize, outer: usize) -> ! {
    let what = match get() {
        Some(rt) if rt.arena.contains(addr) => "far memory",
        Some(rt) if rt.in_bin(addr) => {
            "the bin of recycled pages (FARMEM_RECYCLE=0 runs without it)"
        }
        _ => "memory outside farmem's",
    };
    let mut m = MsgBuf::new();
    let _ = writeln!(
        m,
        "farmem: internal error: a fault at {addr:#x} ({what}) inside farmem's handling of the \
         fault at {outer:#x}; stopping the program"
    );
    farmem_sys::fatal(m.as_bytes());
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
        return;
    }
    // The program's handler runs with SIGBUS blocked, as the kernel would
    // have run it, unless it asked otherwise (farmem's own handler is
    // installed with SA_NODEFER).
    let _blocked =
        (prev.sa_flags & libc::SA_NODEFER == 0).then(|| farmem_sys::signal::SignalBlock::only(sig));
    if prev.sa_flags & libc::SA_SIGINFO != 0 {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What the child of [`faults_farmem_cannot_serve_are_named`] does
    /// (nothing when run on its own): start a runtime, then fault where
    /// `FARMEM_TEST_FAULT` says, which must stop it with a message.
    #[test]
    #[ignore = "run by faults_farmem_cannot_serve_are_named, in a process of its own"]
    fn fault_child() {
        let Ok(what) = std::env::var("FARMEM_TEST_FAULT") else {
            return;
        };
        // 64 MiB: a budget that has a bin of recycled pages.
        let cfg = crate::Config::from_str_config("local=64M arena=1G").unwrap();
        let rt = crate::init(cfg).unwrap();
        let far = rt.alloc(1 << 20).unwrap() as usize;
        let addr = match what.as_str() {
            // As if this thread were handling a fault already: farmem's
            // own code touching an absent far page there.
            "nested" => {
                HANDLING.with(|h| h.set(far + 4096));
                far
            }
            // A page of the bin that is not present (the bin starts empty).
            "bin" => {
                let Some(bin) = rt.bin.as_ref() else {
                    eprintln!("no bin on this kernel");
                    std::process::exit(3);
                };
                bin.first_page()
            }
            _ => unreachable!(),
        };
        // SAFETY: the address is mapped (far memory or the bin); reading it
        // faults, which is the point.
        let _ = unsafe { std::ptr::read_volatile(addr as *const u8) };
        eprintln!("the fault was served");
        std::process::exit(4);
    }

    /// A fault farmem cannot serve (on the bin, or inside its own handling
    /// of another) stops the program with a message naming it, where the
    /// kernel would otherwise kill it with SIGBUS and no word of why.
    #[test]
    fn faults_farmem_cannot_serve_are_named() {
        let exe = std::env::current_exe().unwrap();
        for (what, want) in [
            (
                "nested",
                "(far memory) inside farmem's handling of the fault at",
            ),
            (
                "bin",
                "a page of its bin of recycled pages that it took for present",
            ),
        ] {
            let out = std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "signals::tests::fault_child",
                    "--ignored",
                    "--nocapture",
                ])
                .env("FARMEM_TEST_FAULT", what)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            if out.status.code() == Some(3) {
                // A kernel without UFFDIO_MOVE (Linux 6.8) has no bin.
                assert_ne!(
                    std::env::var("CI").as_deref(),
                    Ok("true"),
                    "no bin of recycled pages on this kernel: the check cannot run"
                );
                continue;
            }
            assert!(!out.status.success(), "{what}: {err}");
            assert!(err.contains(want), "{what}: {err}");
            assert!(err.contains("internal error"), "{what}: {err}");
        }
    }
}
