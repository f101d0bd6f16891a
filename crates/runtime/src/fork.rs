//! fork: the guard that stops a forked child from reading far memory as
//! zeros. The child keeps the parent's mappings but not its userfaultfd or
//! fault-handling threads, so far memory stays with the parent.

use crate::get;
use farmem_sys::msg::MsgBuf;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

static FORKED: AtomicBool = AtomicBool::new(false);

/// In a forked child the userfaultfd is gone: missing pages would silently
/// read as zero. Make the whole arena inaccessible instead, so the child stops
/// with a clear message if it touches far memory.
pub(crate) extern "C" fn after_fork_child() {
    FORKED.store(true, Ordering::Release);
    if let Some(rt) = get() {
        // SAFETY: the arena is ours; nothing in the child may use it any more.
        let _ = unsafe {
            farmem_sys::mem::mprotect(rt.arena.base() as *mut u8, rt.arena.len(), libc::PROT_NONE)
        };
        let _ = farmem_sys::signal::install(libc::SIGSEGV, on_sigsegv_child);
    }
}

/// True in a child created by fork() after init.
pub fn is_forked_child() -> bool {
    FORKED.load(Ordering::Acquire)
}

pub(crate) extern "C" fn on_sigsegv_child(
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    _ctx: *mut libc::c_void,
) {
    // SAFETY: called by the kernel as an SA_SIGINFO fault handler.
    let addr = unsafe { farmem_sys::signal::fault_addr(info) };
    if let Some(rt) = get() {
        if rt.arena.contains(addr) {
            let mut m = MsgBuf::new();
            let _ = writeln!(
                m,
                "farmem: process {} (a fork() child) touched far memory at {addr:#x}; far memory stays with the parent. \
                 Use threads, or exec a new program in the child.",
                std::process::id()
            );
            farmem_sys::fatal(m.as_bytes());
        }
    }
    farmem_sys::signal::set_default(sig);
}
