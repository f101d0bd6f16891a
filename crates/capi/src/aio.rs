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

use crate::buffers;
use farmem_runtime::{self as rt, IoPin};
use libc::c_long;
use std::collections::HashMap;
use std::sync::Mutex;

/// (context, control block) -> its pins.
type Held = HashMap<(usize, usize), Vec<IoPin>>;
static HELD: Mutex<Option<Held>> = Mutex::new(None);

const SYS_IO_PGETEVENTS: c_long = 333;
const IO_EVENT_BYTES: usize = 32;

/// Handle the AIO calls; `real` makes the system call itself.
///
/// # Safety
/// `a` are the program's arguments for system call `nr`.
pub unsafe fn intercept(nr: c_long, a: &[usize; 6], real: &dyn Fn() -> c_long) -> Option<c_long> {
    match nr {
        libc::SYS_io_submit => {
            let r = rt::get()?;
            let (ctx, n, cbs) = (a[0], a[1].min(1 << 17), a[2]);
            if cbs == 0 || n == 0 {
                return None;
            }
            let mut per_cb: Vec<Vec<IoPin>> = Vec::with_capacity(n);
            for i in 0..n {
                // SAFETY: the program passes `n` iocb pointers.
                let cb = unsafe { *((cbs + i * 8) as *const usize) };
                let mut pins = Vec::new();
                let one = [0, 1, &cb as *const usize as usize, 0, 0, 0];
                // SAFETY: a one-element io_submit over the same control block.
                unsafe {
                    buffers::for_each(libc::SYS_io_submit, &one, &mut |b| {
                        if r.overlaps(b.addr, b.len) && b.addr != &cb as *const usize as usize {
                            if let Some(p) = r.pin_for_io(b.addr, b.len, b.kernel_writes) {
                                pins.push(p);
                            }
                        }
                    })
                };
                per_cb.push(pins);
            }
            // SAFETY: the program's arguments; the pointer array and the
            // control blocks are pinned for the call itself as well.
            let ret = unsafe { crate::calls::pinned(nr, *a, real) };
            let submitted = usize::try_from(ret).unwrap_or(0);
            let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
            let map = held.get_or_insert_with(HashMap::new);
            for (i, pins) in per_cb.into_iter().enumerate().take(submitted) {
                if !pins.is_empty() {
                    // SAFETY: as above.
                    let cb = unsafe { *((cbs + i * 8) as *const usize) };
                    map.insert((ctx, cb), pins);
                }
            }
            Some(ret)
        }
        libc::SYS_io_getevents | SYS_IO_PGETEVENTS => {
            let ret = real();
            if ret > 0 && a[3] != 0 {
                let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(map) = held.as_mut() {
                    for i in 0..usize::try_from(ret).unwrap_or(0) {
                        // SAFETY: the kernel wrote `ret` io_events at a[3];
                        // `obj` (the iocb pointer) is the second u64.
                        let obj = unsafe { *((a[3] + i * IO_EVENT_BYTES + 8) as *const u64) };
                        map.remove(&(a[0], farmem_sys::usize_from(obj)));
                    }
                }
            }
            Some(ret)
        }
        libc::SYS_io_cancel => {
            let ret = real();
            if ret == 0 {
                let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(map) = held.as_mut() {
                    map.remove(&(a[0], a[1]));
                }
            }
            Some(ret)
        }
        libc::SYS_io_destroy => {
            let ret = real();
            let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(map) = held.as_mut() {
                map.retain(|&(ctx, _), _| ctx != a[0]);
            }
            Some(ret)
        }
        _ => None,
    }
}
