//! `process_vm_readv`/`process_vm_writev` on another farmem process's far
//! memory.
//!
//! The local iovecs are pinned like any other buffer. The remote ones live
//! in the target process: if the copy comes up short there (in SIGBUS mode a
//! non-resident far page of the target fails the copy), ask the target's pin
//! service ([`farmem_runtime::PeerPins`]) to pin the next remote range, and
//! copy it. A target that runs no service is not a farmem process: its
//! EFAULT is real and is returned as it is.

use crate::pin::pinned_with;
use crate::reg::Reg as _;
use farmem_runtime::PeerPins;
use libc::{c_long, c_ulong, iovec, pid_t, ssize_t};

type VmFn =
    unsafe extern "C" fn(pid_t, *const iovec, c_ulong, *const iovec, c_ulong, c_ulong) -> ssize_t;

fn real(write: bool) -> VmFn {
    if write {
        crate::forward::real!(c"process_vm_writev", VmFn)
    } else {
        crate::forward::real!(c"process_vm_readv", VmFn)
    }
}

fn set_errno(e: libc::c_int) {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() = e };
}

/// At most this many iovecs per side of one piece of a chunked copy.
const PIECE_IOVS: usize = 16;

/// Up to [`PIECE_IOVS`] iovecs of a vector after skipping some bytes, at
/// most so many bytes long: on the stack, as the SIGSYS path must not
/// allocate.
struct Tail {
    v: [iovec; PIECE_IOVS],
    n: usize,
}

impl Tail {
    fn of(v: &[iovec], mut skip: usize, mut max: usize) -> Tail {
        let mut t = Tail {
            v: [iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; PIECE_IOVS],
            n: 0,
        };
        for e in v {
            if max == 0 || t.n == PIECE_IOVS {
                break;
            }
            if skip >= e.iov_len {
                skip -= e.iov_len;
                continue;
            }
            let n = (e.iov_len - skip).min(max);
            t.v[t.n] = iovec {
                // SAFETY: skip < iov_len, so the pointer stays in the element.
                iov_base: unsafe { e.iov_base.cast::<u8>().add(skip) }.cast(),
                iov_len: n,
            };
            t.n += 1;
            max -= n;
            skip = 0;
        }
        t
    }

    fn as_slice(&self) -> &[iovec] {
        &self.v[..self.n]
    }

    fn bytes(&self) -> usize {
        self.as_slice().iter().map(|e| e.iov_len).sum()
    }
}

/// Shared body of the two calls.
///
/// # Safety
/// As `process_vm_readv(2)`.
pub unsafe fn vm_copy(
    write: bool,
    pid: pid_t,
    local: *const iovec,
    ln: c_ulong,
    remote: *const iovec,
    rn: c_ulong,
    flags: c_ulong,
) -> ssize_t {
    let f = real(write);
    let nr = if write {
        libc::SYS_process_vm_writev
    } else {
        libc::SYS_process_vm_readv
    };
    let call = |l: *const iovec, ln: c_ulong, r: *const iovec, rn: c_ulong| {
        let a = [
            pid.reg(),
            l as usize,
            ln.reg(),
            r as usize,
            rn.reg(),
            flags.reg(),
        ];
        // SAFETY: forwarded with the local far buffers pinned. An EFAULT
        // may come from the other process's memory: not checked here.
        unsafe { pinned_with(nr, a, false, || f(pid, l, ln, r, rn, flags)) }
    };
    if local.is_null() || remote.is_null() || ln > 1024 || rn > 1024 {
        // The kernel reports the error.
        return call(local, ln, remote, rn);
    }
    // SAFETY: the caller passes ln and rn valid iovecs (at most IOV_MAX,
    // checked above).
    let (lv, rv) = unsafe {
        (
            std::slice::from_raw_parts(local, farmem_sys::usize_from(ln)),
            std::slice::from_raw_parts(remote, farmem_sys::usize_from(rn)),
        )
    };
    let sum = |v: &[iovec]| {
        v.iter()
            .map(|e| e.iov_len)
            .fold(0usize, usize::saturating_add)
    };
    let total = sum(lv).min(sum(rv));
    // Pieces small enough for this process to pin their local far pages.
    let chunk = farmem_runtime::get().map_or(usize::MAX, |r| r.io_chunk());
    if total <= chunk {
        let res = call(local, ln, remote, rn);
        let short = usize::try_from(res).is_ok_and(|n| n < total);
        let efault = res < 0 && errno() == libc::EFAULT;
        if !short && !efault {
            return res;
        }
    }
    let mut done = 0usize;
    let mut peer: Option<PeerPins> = None;
    let mut last = 0 as ssize_t;
    while done < total {
        let n = chunk.min(total - done);
        let (l, r) = (Tail::of(lv, done, n), Tail::of(rv, done, n));
        let want = l.bytes().min(r.bytes());
        let (l, r) = (l.as_slice(), r.as_slice());
        let got = call(
            l.as_ptr(),
            l.len() as c_ulong,
            r.as_ptr(),
            r.len() as c_ulong,
        );
        last = got;
        if got > 0 {
            done += got.unsigned_abs();
            if got.unsigned_abs() == want {
                continue;
            }
        } else if got < 0 && errno() != libc::EFAULT {
            break;
        }
        // Short or EFAULT: the rest may be the other process's far memory,
        // not resident there. Ask its pin service for the next range.
        if peer.is_none() {
            peer = PeerPins::connect(pid);
        }
        let Some(p) = peer.as_mut() else { break };
        let Some(seg) = Tail::of(rv, done, n).as_slice().first().copied() else {
            break;
        };
        let granted: usize = p
            .pin(seg.iov_base as usize, seg.iov_len, write)
            .unwrap_or_default();
        if granted == 0 {
            break; // not far memory there: a real fault
        }
        let r = [iovec {
            iov_base: seg.iov_base,
            iov_len: granted,
        }];
        let l = Tail::of(lv, done, granted);
        let l = l.as_slice();
        let got = call(l.as_ptr(), l.len() as c_ulong, r.as_ptr(), 1);
        last = got;
        if got <= 0 {
            break;
        }
        done += got.unsigned_abs();
    }
    if done > 0 {
        return done as ssize_t;
    }
    if last >= 0 {
        set_errno(libc::EFAULT);
    }
    -1
}

fn errno() -> libc::c_int {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() }
}

/// `syscall(SYS_process_vm_readv, ...)` and `..._writev`: the same path.
pub fn intercept(nr: c_long, a: &[usize; 6]) -> Option<c_long> {
    if nr != libc::SYS_process_vm_readv && nr != libc::SYS_process_vm_writev {
        return None;
    }
    // SAFETY: the caller's arguments, forwarded as `process_vm_*(2)` takes them.
    let r = unsafe {
        vm_copy(
            nr == libc::SYS_process_vm_writev,
            farmem_sys::int_arg(a[0]),
            a[1] as *const iovec,
            a[2] as c_ulong,
            a[3] as *const iovec,
            a[4] as c_ulong,
            a[5] as c_ulong,
        )
    };
    Some(r as c_long)
}

/// `process_vm_readv(2)`: the local side is pinned here; a far remote side
/// (another farmem process) is brought in here.
///
/// # Safety
/// As `process_vm_readv(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn process_vm_readv(
    pid: pid_t,
    local: *const iovec,
    ln: c_ulong,
    remote: *const iovec,
    rn: c_ulong,
    flags: c_ulong,
) -> ssize_t {
    // SAFETY: same contract.
    unsafe { vm_copy(false, pid, local, ln, remote, rn, flags) }
}

/// `process_vm_writev(2)`.
///
/// # Safety
/// As `process_vm_writev(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn process_vm_writev(
    pid: pid_t,
    local: *const iovec,
    ln: c_ulong,
    remote: *const iovec,
    rn: c_ulong,
    flags: c_ulong,
) -> ssize_t {
    // SAFETY: same contract.
    unsafe { vm_copy(true, pid, local, ln, remote, rn, flags) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_skips_and_limits_across_elements() {
        let mut a = [0u8; 10];
        let mut b = [0u8; 20];
        let v = [
            iovec {
                iov_base: a.as_mut_ptr().cast(),
                iov_len: 10,
            },
            iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: 20,
            },
        ];
        let t = Tail::of(&v, 4, 12);
        let t = t.as_slice();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].iov_base as usize, a.as_ptr() as usize + 4);
        assert_eq!(t[0].iov_len, 6);
        assert_eq!(t[1].iov_base as usize, b.as_ptr() as usize);
        assert_eq!(t[1].iov_len, 6);
        let t = Tail::of(&v, 15, usize::MAX);
        assert_eq!(t.as_slice().len(), 1);
        assert_eq!(t.as_slice()[0].iov_len, 15);
        // At most PIECE_IOVS elements, however many the vector has.
        let many = vec![v[0]; 40];
        let t = Tail::of(&many, 3, usize::MAX);
        assert_eq!(t.as_slice().len(), PIECE_IOVS);
        assert_eq!(t.bytes(), 7 + 10 * (PIECE_IOVS - 1));
    }
}
