//! The safety net for system calls made without the C library.
//!
//! The wrappers in the call families ([`crate::io`], [`crate::net`], ...) see every system call
//! a program makes through libc. A program can also execute the `syscall`
//! instruction itself: liburing and libaio do, as do programs with inline
//! assembly. For those, farmem turns on syscall user dispatch in each
//! thread that may touch far memory, with the C library's code as the
//! allowed range: system calls from libc run at full speed (the kernel
//! compares the instruction pointer with the range), and any other raises
//! SIGSYS. The handler runs the call through the same table, with its far
//! buffers pinned, and puts the result where the instruction would have.
//!
//! A few calls cannot be re-made from inside a signal handler: `clone`,
//! `clone3`, `fork`, `vfork` (the child would start inside the handler) and
//! `rt_sigreturn`. For those the handler lets the instruction run again
//! natively, with the thread's selector set to allow; the next system call
//! the thread makes through a farmem wrapper blocks again. `io_uring_setup` fails with
//! ENOSYS, as on a kernel built without io_uring: the ring's buffers are
//! read by kernel threads long after any call returns, which pinning
//! around a call cannot cover, and programs fall back to ordinary calls.

use crate::selector;
use farmem_runtime as rt;
use farmem_sys::dispatch;

/// Set up the net (once, when the runtime starts); off with
/// `FARMEM_RAW_SYSCALLS=allow`.
pub fn start() {
    if selector::active() {
        return;
    }
    match rt::get() {
        Some(r) if r.config().raw_syscalls() == rt::config::RawSyscalls::Dispatch => {}
        _ => return,
    }
    let Some((lo, hi)) = dispatch::text_segment_of(libc::getpid as *const () as usize) else {
        return;
    };
    if dispatch::install_sigsys(on_sigsys).is_err() {
        return;
    }
    selector::set_range(lo, hi);
}

extern "C" fn on_sigsys(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo.
    let code = unsafe { (*info).si_code };
    if code != dispatch::SYS_USER_DISPATCH {
        // A seccomp SIGSYS or one sent by kill: the program's.
        match crate::signals::program_sigsys() {
            Some(a) if a.sa_sigaction != libc::SIG_DFL && a.sa_sigaction != libc::SIG_IGN => {
                if a.sa_flags & libc::SA_SIGINFO != 0 {
                    // SAFETY: installed by the program as an SA_SIGINFO handler.
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        unsafe { std::mem::transmute(a.sa_sigaction) };
                    f(sig, info, ctx);
                } else {
                    // SAFETY: installed by the program as a plain handler.
                    let f: extern "C" fn(libc::c_int) =
                        unsafe { std::mem::transmute(a.sa_sigaction) };
                    f(sig);
                }
            }
            Some(a) if a.sa_sigaction == libc::SIG_IGN => {}
            _ => farmem_sys::signal::set_default(sig),
        }
        return;
    }
    // SAFETY: errno is thread-local; the handler leaves it as it found it.
    let saved = unsafe { *libc::__errno_location() };
    // SAFETY: ctx is this SIGSYS handler's ucontext.
    let (nr, a) = unsafe { dispatch::stopped_call(ctx) };
    match nr {
        libc::SYS_clone
        | libc::SYS_clone3
        | libc::SYS_fork
        | libc::SYS_vfork
        | libc::SYS_rt_sigreturn => {
            selector::allow_once();
            // SAFETY: as above.
            unsafe { dispatch::rerun(ctx, nr) };
        }
        libc::SYS_io_uring_setup if rt::get().is_some() => {
            // SAFETY: as above.
            unsafe { dispatch::set_result(ctx, -(libc::ENOSYS as libc::c_long)) };
        }
        _ => {
            let a = a.map(|x| x as libc::c_long);
            // SAFETY: the program's own call, made through farmem's
            // `syscall`, which pins far buffers and runs it from libc.
            let r = unsafe { crate::router::syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]) };
            // SAFETY: errno is thread-local.
            let r = if r == -1 {
                // SAFETY: errno is thread-local.
                -(unsafe { *libc::__errno_location() }) as libc::c_long
            } else {
                r
            };
            // SAFETY: as above.
            unsafe { dispatch::set_result(ctx, r) };
        }
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved };
}

type StartFn = extern "C" fn(*mut libc::c_void) -> *mut libc::c_void;
type CreateFn = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    StartFn,
    *mut libc::c_void,
) -> libc::c_int;

struct Start {
    f: StartFn,
    arg: *mut libc::c_void,
}

extern "C" fn armed_start(p: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `p` is the Box leaked by pthread_create below.
    let s = unsafe { Box::from_raw(p.cast::<Start>()) };
    selector::arm_this_thread();
    (s.f)(s.arg)
}

/// `pthread_create(3)`: new threads get the net when farmem runs.
///
/// # Safety
/// As `pthread_create(3)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_create(
    t: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    f: StartFn,
    arg: *mut libc::c_void,
) -> libc::c_int {
    let real = crate::forward::real!(c"pthread_create", CreateFn);
    if !selector::active() {
        // SAFETY: forwarded unchanged.
        return unsafe { real(t, attr, f, arg) };
    }
    let s = Box::into_raw(Box::new(Start { f, arg }));
    // SAFETY: forwarded with a start routine that arms the net, then runs f.
    let r = unsafe { real(t, attr, armed_start, s.cast()) };
    if r != 0 {
        // SAFETY: the thread was not created; the box is still ours.
        drop(unsafe { Box::from_raw(s) });
    }
    r
}
