//! Linux AIO (`io_submit`): far buffers stay pinned until the I/O completes.
//!
//! With `O_DIRECT` the device moves the data after `io_submit` has
//! returned, into or out of the pages the kernel pinned at submission. If
//! farmem evicted such a page meanwhile, a read would land in a page no
//! longer mapped (and the program would later fetch stale data). So the
//! pins taken for an `io_submit` are kept per control block until the
//! completion is reaped (`io_getevents`/`io_pgetevents` returns it), the
//! request is cancelled, or the context is destroyed (which waits for every
//! request). libaio makes these calls with its own `syscall` instructions:
//! they arrive through the raw-call net ([`crate::dispatch`]) or `syscall(2)`.

use crate::pin::{pin_args, Pins};
use farmem_runtime as rt;
use farmem_sys::mapvec::MapVec;
use libc::c_long;
use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard};

/// One submitted control block's pins.
struct Held {
    ctx: usize,
    cb: usize,
    /// Released when the entry goes.
    _pins: Pins,
}

/// The pins of every request in flight, in memory mapped for them: this
/// runs in the SIGSYS handler (libaio's own `syscall` instructions), which
/// must not allocate. A program has at most a few thousand requests in
/// flight, so lookups are a scan.
static HELD: Mutex<MapVec<Held>> = Mutex::new(MapVec::new());

fn held() -> MutexGuard<'static, MapVec<Held>> {
    HELD.lock().unwrap_or_else(|p| p.into_inner())
}

/// Release the pins of control block `cb` of context `ctx`, if held.
fn release(ctx: usize, cb: usize) {
    let mut h = held();
    if let Some(i) = h.as_slice().iter().position(|x| x.ctx == ctx && x.cb == cb) {
        drop(h.swap_remove(i));
    }
}

const SYS_IO_PGETEVENTS: c_long = 333;
const IO_EVENT_BYTES: usize = 32;

/// Handle the AIO calls; `real` makes the system call itself.
///
/// # Safety
/// `a` are the program's arguments for system call `nr`.
pub unsafe fn intercept(nr: c_long, a: &[usize; 6], real: &dyn Fn() -> c_long) -> Option<c_long> {
    match nr {
        libc::SYS_io_submit => {
            rt::get()?;
            let (ctx, n, cbs) = (a[0], a[1].min(1 << 17), a[2]);
            if cbs == 0 || n == 0 {
                return None;
            }
            // SAFETY: the program passes `n` iocb pointers.
            let cb_at = |i: usize| unsafe { *((cbs + i * 8) as *const usize) };
            for i in 0..n {
                let cb = cb_at(i);
                // A one-element io_submit over the same control block: its
                // buffers (and the block itself when far); the one-pointer
                // array is on this stack, never far.
                let one = [0, 1, &cb as *const usize as usize, 0, 0, 0];
                // SAFETY: the program's control block, read as the kernel
                // reads it.
                if let Some(pins) = unsafe { pin_args(libc::SYS_io_submit, &one) } {
                    if let Err((h, e)) = held().push(Held {
                        ctx,
                        cb,
                        _pins: pins,
                    }) {
                        drop(h);
                        let mut m = farmem_sys::msg::MsgBuf::new();
                        let _ = writeln!(
                            m,
                            "farmem: cannot map room to keep the pins of an io_submit: {e}"
                        );
                        farmem_sys::fatal(m.as_bytes());
                    }
                }
            }
            // SAFETY: the program's arguments; the pointer array and the
            // control blocks are pinned for the call itself as well.
            let ret = unsafe { crate::pin::pinned(nr, *a, real) };
            let submitted = usize::try_from(ret).unwrap_or(0);
            // Blocks the kernel did not take complete never: let them go.
            for i in submitted..n {
                release(ctx, cb_at(i));
            }
            Some(ret)
        }
        libc::SYS_io_getevents | SYS_IO_PGETEVENTS => {
            let ret = real();
            if ret > 0 && a[3] != 0 {
                for i in 0..usize::try_from(ret).unwrap_or(0) {
                    // SAFETY: the kernel wrote `ret` io_events at a[3];
                    // `obj` (the iocb pointer) is the second u64.
                    let obj = unsafe { *((a[3] + i * IO_EVENT_BYTES + 8) as *const u64) };
                    release(a[0], farmem_sys::usize_from(obj));
                }
            }
            Some(ret)
        }
        libc::SYS_io_cancel => {
            let ret = real();
            if ret == 0 {
                release(a[0], a[1]);
            }
            Some(ret)
        }
        libc::SYS_io_destroy => {
            let ret = real();
            held().retain(|x| x.ctx != a[0]);
            Some(ret)
        }
        _ => None,
    }
}
