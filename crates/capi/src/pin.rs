//! Pin-and-call: a call's far buffers, as the table lists them, are
//! pinned and faulted in from user mode around the call; a call that still
//! fails with EFAULT on far memory stops the program with a message. Also
//! the chunked form for transfers larger than the pin limit, and the
//! generator of the plain wrappers (`wrap!`).
//!
//! Everything here runs on the SIGSYS path too, so none of it allocates.

use crate::table;
use farmem_runtime::{self as rt, IoPin};
use farmem_sys::mapvec::MapVec;
use farmem_sys::msg::MsgBuf;
use farmem_sys::units::Size;
use libc::{c_char, c_int, c_long, c_void, ssize_t};
use std::fmt::Write as _;

/// A C return value that can say "failed, see errno".
pub trait Ret: Copy {
    fn failed(self) -> bool;
}
impl Ret for c_int {
    fn failed(self) -> bool {
        self == -1
    }
}
impl Ret for isize {
    fn failed(self) -> bool {
        self == -1
    }
}
impl Ret for i64 {
    fn failed(self) -> bool {
        self == -1
    }
}
impl Ret for *mut c_char {
    fn failed(self) -> bool {
        self.is_null()
    }
}

/// The pins one call holds (released on drop). Most calls need a few, kept
/// inline; the rest go in memory mapped for the call ([`MapVec`]). Neither
/// allocates: this runs in the SIGSYS handler, which can interrupt the
/// program inside `malloc`.
pub struct Pins {
    inline: [Option<IoPin>; 6],
    n: usize,
    spill: MapVec<IoPin>,
}

impl Pins {
    /// Room for `want` pins.
    pub fn with_capacity(want: usize) -> Pins {
        let mut spill = MapVec::new();
        if want > 6 {
            if let Err(e) = spill.reserve(want - 6) {
                let mut m = MsgBuf::new();
                let _ = writeln!(
                    m,
                    "farmem: cannot map room for {want} pins of one system call: {e}"
                );
                farmem_sys::fatal(m.as_bytes())
            }
        }
        Pins {
            inline: Default::default(),
            n: 0,
            spill,
        }
    }

    /// Keep `p` until the call ends. Past the capacity asked for, the pin
    /// is released at once (the caller counted the buffers it pins).
    pub fn push(&mut self, p: IoPin) {
        if self.n < self.inline.len() {
            self.inline[self.n] = Some(p);
            self.n += 1;
        } else if self.spill.len() < self.spill.capacity() {
            // Cannot fail: the room is there.
            let _ = self.spill.push(p);
        }
    }
}

/// Pin and fault in the far buffers of system call `nr` with arguments
/// `a`. Returns the pins (released on drop) and the first far address, or
/// None when the call touches no far memory. Two passes over the call's
/// buffers (count, then pin), so nothing is collected on the heap.
///
/// # Safety
/// `a` are the arguments the program passes to the kernel for `nr`.
unsafe fn pin_buffers(
    r: &'static rt::Runtime,
    nr: c_long,
    a: &[usize; 6],
) -> Option<(Pins, usize)> {
    let mut n = 0usize;
    let mut first = 0usize;
    let mut total = 0usize;
    // SAFETY: per the contract.
    unsafe {
        table::for_each(nr, a, &mut |b| {
            if r.overlaps(b.addr, b.len) {
                total = total.saturating_add(b.len);
                if n == 0 {
                    first = b.addr;
                }
                n += 1;
            }
        })
    };
    if n == 0 {
        return None;
    }
    if total > r.pin_limit_bytes() {
        fatal_call_with(nr, first, |m| {
            let _ = write!(
                m,
                "hands the kernel {} of far memory in one call, more than the {} that may be pinned \
                 (3/4 of the local budget); raise FARMEM_LOCAL",
                Size(total as u64),
                Size(r.pin_limit_bytes() as u64)
            );
        });
    }
    let mut pins = Pins::with_capacity(n);
    // SAFETY: per the contract; the same buffers as the first pass.
    unsafe {
        table::for_each(nr, a, &mut |b| {
            if r.overlaps(b.addr, b.len) {
                if let Some(p) = r.pin_for_io(b.addr, b.len, b.kernel_writes) {
                    pins.push(p);
                }
            }
        })
    };
    Some((pins, first))
}

/// Pin the far ranges the table lists for `nr` with arguments `a` (pass 0
/// for the arguments a caller pins itself, such as a chunked data buffer);
/// released on drop.
///
/// # Safety
/// As [`pinned`].
pub unsafe fn pin_args(nr: c_long, a: &[usize; 6]) -> Option<Pins> {
    let r = rt::get()?;
    // SAFETY: per the contract.
    unsafe { pin_buffers(r, nr, a) }.map(|(pins, _)| pins)
}

/// Run `call` (system call `nr`'s libc entry point, or the system call
/// itself) with its far buffers pinned.
///
/// # Safety
/// `a` are the arguments `call` passes to the kernel for `nr`.
#[inline]
pub unsafe fn pinned<R: Ret>(nr: c_long, a: [usize; 6], call: impl FnOnce() -> R) -> R {
    // SAFETY: per the contract.
    unsafe { pinned_with(nr, a, true, call) }
}

/// [`pinned`], with the EFAULT check optional (`process_vm_*` may fail on
/// the other process's memory, which the caller handles).
///
/// # Safety
/// As [`pinned`].
#[inline]
pub unsafe fn pinned_with<R: Ret>(
    nr: c_long,
    a: [usize; 6],
    check_efault: bool,
    call: impl FnOnce() -> R,
) -> R {
    let Some(r) = rt::get() else {
        return call();
    };
    // Every thread that makes system calls while far memory exists gets the
    // raw-call net (threads that existed before farmem started are armed
    // here), and one the net let run a call natively is blocked again.
    crate::selector::arm_this_thread();
    // SAFETY: per the contract.
    let Some((pins, first)) = (unsafe { pin_buffers(r, nr, &a) }) else {
        return call();
    };
    let ret = call();
    let efault = check_efault && ret.failed() && errno() == libc::EFAULT;
    drop(pins);
    if efault {
        fatal_call(
            nr,
            first,
            "failed with EFAULT although its far pages were pinned",
        );
    }
    ret
}

fn errno() -> c_int {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() }
}

/// Stop the program: a system call on far memory cannot be made to work.
pub fn fatal_call(nr: c_long, addr: usize, what: &str) -> ! {
    fatal_call_with(nr, addr, |m| {
        let _ = m.write_str(what);
    })
}

/// [`fatal_call`], with what went wrong written by `what`.
pub fn fatal_call_with(nr: c_long, addr: usize, what: impl FnOnce(&mut MsgBuf)) -> ! {
    let mut m = MsgBuf::new();
    fatal_message(&mut m, nr, addr, what);
    farmem_sys::fatal(m.as_bytes())
}

/// The message [`fatal_call`] stops the program with, formatted into `m`
/// without allocating (it is reached from the SIGSYS handler).
pub fn fatal_message(m: &mut MsgBuf, nr: c_long, addr: usize, what: impl FnOnce(&mut MsgBuf)) {
    let _ = write!(
        m,
        "farmem: system call {} ({nr}) on far memory at {addr:#x} ",
        table::syscall_name(nr)
    );
    what(m);
    let _ = m.write_str(
        ". The program is stopped rather than given a wrong result. Please report this with \
         the command line (docs/design.md, \"System calls on far memory\").\n",
    );
}

/// The runtime, if `[buf, buf+n)` overlaps far memory.
pub fn far(buf: *const c_void, n: usize) -> Option<&'static rt::Runtime> {
    let r = rt::get()?;
    r.overlaps(buf as usize, n).then_some(r)
}

pub fn is_regular(fd: c_int) -> bool {
    // SAFETY: fstat into a zeroed stat buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a live, writable stat.
    let r = unsafe { libc::fstat(fd, &mut st) };
    r == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFREG
}

/// Run `op(ptr, len, done)` over the buffer at address `buf` in pinned
/// chunks. `kernel_writes`: the call writes into the buffer. `more`: go on
/// after a full chunk. Only `op` touches the memory.
pub fn chunked(
    r: &'static rt::Runtime,
    buf: usize,
    n: usize,
    kernel_writes: bool,
    more: bool,
    mut op: impl FnMut(*mut u8, usize, usize) -> ssize_t,
) -> ssize_t {
    let chunk = r.io_chunk();
    let mut done = 0usize;
    while done < n {
        let len = chunk.min(n - done);
        let p = (buf + done) as *mut u8;
        let pin = r.pin_for_io(p as usize, len, kernel_writes);
        let got = op(p, len, done);
        drop(pin);
        // Negative: an error.
        let Ok(got) = usize::try_from(got) else {
            return if done > 0 { done as ssize_t } else { got };
        };
        done += got;
        if got < len || !more {
            break;
        }
    }
    done as ssize_t
}

/// Generates the libc wrappers: `name(args) -> ret = SYS_nr(syscall args)`.
/// The syscall arguments are the libc arguments in the kernel's order (libc
/// entry points that are not a plain system call name the one they make).
macro_rules! wrap {
    ($( $(#[$doc:meta])* $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty
        = $nr:ident ( $($sa:expr),* ) ; )*) => { $(
        $(#[$doc])*
        ///
        /// # Safety
        /// As the C library function of this name.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            type F = unsafe extern "C" fn($($ty),*) -> $ret;
            let f = crate::forward::real!(crate::forward::c_name!($name), F);
            let mut a = [0usize; 6];
            let given = [$(crate::reg::Reg::reg($sa)),*];
            a[..given.len()].copy_from_slice(&given);
            // SAFETY: forwarded unchanged, with the far buffers the table
            // lists for this system call pinned.
            unsafe { crate::pin::pinned(libc::$nr, a, || f($($arg),*)) }
        }
    )* };
}
pub(crate) use wrap;
