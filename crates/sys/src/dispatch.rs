//! Syscall user dispatch (`PR_SET_SYSCALL_USER_DISPATCH`, Linux 5.11+):
//! system calls made from outside one address range raise SIGSYS in the
//! calling thread instead of running.

use crate::cvt;
use std::io;

const PR_SET_SYSCALL_USER_DISPATCH: libc::c_int = 59;
const PR_SYS_DISPATCH_ON: libc::c_ulong = 1;
/// `si_code` of a SIGSYS raised by syscall user dispatch.
pub const SYS_USER_DISPATCH: libc::c_int = 2;
/// Selector values.
pub const FILTER_ALLOW: u8 = 0;
pub const FILTER_BLOCK: u8 = 1;

/// Turn dispatch on for the calling thread: system calls from outside
/// `[start, start+len)` raise SIGSYS while `*selector` is `FILTER_BLOCK`.
///
/// # Safety
/// `selector` must stay valid for the thread's life (a thread-local byte).
pub unsafe fn enable(start: usize, len: usize, selector: *const u8) -> io::Result<()> {
    // SAFETY: prctl with plain integer arguments and a pointer the caller
    // keeps alive.
    cvt(unsafe {
        libc::prctl(
            PR_SET_SYSCALL_USER_DISPATCH,
            PR_SYS_DISPATCH_ON,
            start as libc::c_ulong,
            len as libc::c_ulong,
            selector,
        )
    })
    .map(|_| ())
}

/// The executable segment of the loaded object that contains `addr`
/// (`[start, end)`), found from its program headers.
pub fn text_segment_of(addr: usize) -> Option<(usize, usize)> {
    // SAFETY: dladdr fills a zeroed Dl_info.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::dladdr(addr as *const libc::c_void, &mut info) } == 0 {
        return None;
    }
    struct Find {
        base: usize,
        found: Option<(usize, usize)>,
    }
    extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info and our `Find`.
        let (info, find) = unsafe { (&*info, &mut *data.cast::<Find>()) };
        // SAFETY: dlpi_phdr points to dlpi_phnum headers.
        let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
        let base = crate::usize_from(info.dlpi_addr);
        for ph in phdrs {
            if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_X != 0 {
                let start = base + crate::usize_from(ph.p_vaddr);
                let end = start + crate::usize_from(ph.p_memsz);
                if (start..end).contains(&find.base) {
                    find.found = Some((start, end));
                    return 1;
                }
            }
        }
        0
    }
    let mut find = Find {
        base: addr,
        found: None,
    };
    // SAFETY: the callback only reads the headers and writes `find`.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut find as *mut Find).cast()) };
    find.found
}

/// Install `handler` for SIGSYS (`SA_SIGINFO`), through the C library's
/// own `sigaction` (its restorer lies in the allowed range).
pub fn install_sigsys(handler: crate::signal::SigInfoHandler) -> io::Result<()> {
    crate::signal::install(libc::SIGSYS, handler).map(|_| ())
}

/// The system call a dispatch SIGSYS stopped: number and six arguments,
/// read from the signal context (x86-64 registers).
///
/// # Safety
/// `ctx` is the ucontext of a SIGSYS handler.
pub unsafe fn stopped_call(ctx: *mut libc::c_void) -> (libc::c_long, [usize; 6]) {
    // SAFETY: per the contract.
    let g = unsafe { &(*ctx.cast::<libc::ucontext_t>()).uc_mcontext.gregs };
    // A register's bits as an unsigned word.
    let r = |i: usize| usize::from_ne_bytes(g[i].to_ne_bytes());
    (
        g[libc::REG_RAX as usize] as libc::c_long,
        [
            r(libc::REG_RDI as usize),
            r(libc::REG_RSI as usize),
            r(libc::REG_RDX as usize),
            r(libc::REG_R10 as usize),
            r(libc::REG_R8 as usize),
            r(libc::REG_R9 as usize),
        ],
    )
}

/// Set the stopped call's result (the value `rax` will hold).
///
/// # Safety
/// As [`stopped_call`].
pub unsafe fn set_result(ctx: *mut libc::c_void, ret: libc::c_long) {
    // SAFETY: per the contract.
    unsafe { (*ctx.cast::<libc::ucontext_t>()).uc_mcontext.gregs[libc::REG_RAX as usize] = ret };
}

/// Make the thread run the stopped `syscall` instruction again on return
/// from the handler (`syscall` is two bytes long), with `rax` = `nr`.
///
/// # Safety
/// As [`stopped_call`].
pub unsafe fn rerun(ctx: *mut libc::c_void, nr: libc::c_long) {
    // SAFETY: per the contract.
    let g = unsafe { &mut (*ctx.cast::<libc::ucontext_t>()).uc_mcontext.gregs };
    g[libc::REG_RIP as usize] -= 2;
    g[libc::REG_RAX as usize] = nr;
}
