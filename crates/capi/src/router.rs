//! `syscall(2)`: the router every raw system call goes through, whether
//! the program calls `syscall` itself or the raw-call net
//! ([`crate::dispatch`]) caught a `syscall` instruction. Memory-map calls go
//! to the `farmem run` shim's hook, signal masks and `process_vm_*` to their
//! families, plain transfers to the chunked I/O wrappers, AIO to its pin
//! keeper, and everything else through the table with its far buffers
//! pinned.

use farmem_runtime as rt;
use libc::{c_long, c_void, iovec, off_t};
use std::sync::atomic::AtomicUsize;

type SyscallFn =
    unsafe extern "C" fn(c_long, c_long, c_long, c_long, c_long, c_long, c_long) -> c_long;

/// The C library's `syscall(2)`.
pub fn real_syscall() -> SyscallFn {
    crate::forward::real!(c"syscall", SyscallFn)
}

/// Hook for the `farmem run` shim: memory-map calls made through
/// `syscall(2)` (tcmalloc makes its own `mmap` this way) go to the shim's
/// `mmap`/`munmap`/`mremap`/`madvise`/`mprotect` so that large ones become
/// far memory, and `memfd_create` so that a heap it would hold (ZGC's) is
/// refused with a message.
pub static MAP_HOOK: AtomicUsize = AtomicUsize::new(0);

/// The signature of [`MAP_HOOK`]: `Some(result)` when the shim handled it.
pub type MapHook = fn(c_long, &[usize; 6]) -> Option<c_long>;

/// `syscall(2)`: raw system calls go through the same table. On x86-64 the
/// variadic arguments arrive in the registers (and stack slot) a call with
/// seven fixed arguments uses; unused ones are forwarded as they are, which
/// is what the C library does.
///
/// # Safety
/// As `syscall(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn syscall(
    nr: c_long,
    a0: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
) -> c_long {
    let a = [a0, a1, a2, a3, a4, a5].map(crate::reg::Reg::reg);
    let f = real_syscall();
    match nr {
        // Before and after the runtime starts: an allocator's own mmap may
        // be what starts it, and SIGBUS must never be blocked.
        libc::SYS_mmap
        | libc::SYS_munmap
        | libc::SYS_mremap
        | libc::SYS_madvise
        | libc::SYS_mprotect
        | libc::SYS_memfd_create => {
            let hook = MAP_HOOK.load(std::sync::atomic::Ordering::Acquire);
            if hook != 0 {
                // SAFETY: MAP_HOOK only ever holds a `MapHook`.
                let hook = unsafe { std::mem::transmute::<usize, MapHook>(hook) };
                if let Some(r) = hook(nr, &a) {
                    return r;
                }
            }
        }
        libc::SYS_rt_sigprocmask => {
            if let Some(r) = crate::signals::intercept(nr, &a) {
                return r;
            }
        }
        // The other process may have far memory even if this one has none.
        libc::SYS_process_vm_readv | libc::SYS_process_vm_writev => {
            return crate::remote::intercept(nr, &a).unwrap_or(-1);
        }
        _ => {}
    }
    if rt::get().is_none() {
        // No far memory: nothing else to look at.
        // SAFETY: forwarded unchanged.
        return unsafe { f(nr, a0, a1, a2, a3, a4, a5) };
    }
    // Plain transfers take the chunked path of the libc wrappers, so a
    // buffer larger than the pin limit still works (in parts, as the kernel
    // may return short anyway).
    // SAFETY: the program's arguments, as the wrappers take them.
    unsafe {
        let (fd, p, n) = (farmem_sys::int_arg(a[0]), a1 as *mut c_void, a[2]);
        match nr {
            libc::SYS_read => return crate::io::read(fd, p, n) as c_long,
            libc::SYS_write => return crate::io::write(fd, p, n) as c_long,
            libc::SYS_pread64 => return crate::io::pread(fd, p, n, a3 as off_t) as c_long,
            libc::SYS_pwrite64 => return crate::io::pwrite(fd, p, n, a3 as off_t) as c_long,
            libc::SYS_readv => {
                return crate::io::readv(fd, p as *const iovec, farmem_sys::int_arg(a[2])) as c_long
            }
            libc::SYS_writev => {
                return crate::io::writev(fd, p as *const iovec, farmem_sys::int_arg(a[2]))
                    as c_long
            }
            _ => {}
        }
    }
    // SAFETY: the program's arguments for nr, forwarded unchanged.
    if let Some(r) = unsafe { crate::aio::intercept(nr, &a, &|| f(nr, a0, a1, a2, a3, a4, a5)) } {
        return r;
    }
    // SAFETY: forwarded unchanged, with the table's far buffers pinned.
    unsafe { crate::pin::pinned(nr, a, || f(nr, a0, a1, a2, a3, a4, a5)) }
}
