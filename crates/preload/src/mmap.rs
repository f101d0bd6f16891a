//! The mmap family: `mmap`, `munmap`, `mremap`, `madvise`, `mprotect`, and
//! the same calls made through `syscall(2)`.

use super::*;

pub(crate) type MmapFn =
    unsafe extern "C" fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void;
pub(crate) type MunmapFn = unsafe extern "C" fn(*mut c_void, size_t) -> c_int;
pub(crate) type MremapFn =
    unsafe extern "C" fn(*mut c_void, size_t, size_t, c_int, *mut c_void) -> *mut c_void;

/// What a new mapping asked of `mmap` becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NewFar {
    /// Plain memory: a large private anonymous read-write mapping at no
    /// fixed address.
    Plain,
    /// A large reservation (`PROT_NONE`, `MAP_NORESERVE`, private and
    /// anonymous), which the program will commit piece by piece with
    /// `mmap(MAP_FIXED)` or `mprotect`: how the JVM makes its heap. The
    /// address it names is a hint (the JVM's compressed-pointer layouts):
    /// the arena cannot honour it, so the program gets an arena address,
    /// gives it back and asks elsewhere, as it does when the kernel declines.
    Reservation,
}

/// Whether a new mapping goes far, and as what.
pub(crate) fn far_mappable(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
) -> Option<NewFar> {
    let want = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    let refuse = libc::MAP_FIXED
        | libc::MAP_FIXED_NOREPLACE
        | libc::MAP_SHARED
        | libc::MAP_HUGETLB
        | libc::MAP_GROWSDOWN
        | libc::MAP_STACK;
    if !big(len) || flags & want != want || flags & refuse != 0 {
        return None;
    }
    if addr.is_null() && prot == libc::PROT_READ | libc::PROT_WRITE {
        Some(NewFar::Plain)
    } else if prot == libc::PROT_NONE && flags & libc::MAP_NORESERVE != 0 {
        Some(NewFar::Reservation)
    } else {
        None
    }
}

/// `mmap(MAP_FIXED)` over far memory: a private anonymous mapping at most
/// read-write is a commit or an uncommit (fresh far pages under `prot`);
/// anything else (a file, shared memory, executable code) is lent to the
/// kernel, which maps it as asked.
fn map_fixed_over_far(
    r: &'static rt::Runtime,
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    let _g = Guard::enter();
    if !(addr as usize).is_multiple_of(farmem_sys::PAGE_SIZE) || len == 0 {
        set_errno(libc::EINVAL);
        return libc::MAP_FAILED;
    }
    if flags & libc::MAP_FIXED_NOREPLACE != 0 && flags & libc::MAP_FIXED == 0 {
        // The arena is mapped everywhere: nothing there is free.
        set_errno(libc::EEXIST);
        return libc::MAP_FAILED;
    }
    // MAP_TYPE: private, shared or shared-validate (both bits).
    const MAP_TYPE: c_int = 0x0f;
    let a = addr as usize;
    let res = if flags & MAP_TYPE == libc::MAP_PRIVATE
        && flags & libc::MAP_ANONYMOUS != 0
        && flags & libc::MAP_HUGETLB == 0
        && prot & !(libc::PROT_READ | libc::PROT_WRITE) == 0
    {
        r.recommit(a, len, prot).map(|()| addr)
    } else {
        r.lend(a, len).map(|()| {
            static NEXT: Next = Next::new(c"mmap");
            let f = NEXT.or_die();
            // SAFETY: the range is lent to the kernel (farmem no longer
            // pages it); the call is the program's, forwarded unchanged.
            let p =
                unsafe { std::mem::transmute::<usize, MmapFn>(f)(addr, len, prot, flags, fd, off) };
            if p == libc::MAP_FAILED {
                // Take the range back, zero, as the failed call may have
                // left it.
                let e = farmem_sys::signal::errno();
                let _ = r.recommit(a, len, libc::PROT_READ | libc::PROT_WRITE);
                set_errno(e);
            }
            p
        })
    };
    match res {
        Ok(p) => p,
        Err(rt::RuntimeError::InvalidRange { .. }) => die(&format!(
            "mmap({addr:p}, {len}, MAP_FIXED) reaches over far memory the program did not \
             allocate there; farmem cannot let the kernel replace its arena"
        )),
        Err(e) => die(&format!(
            "mmap({addr:p}, {len}, MAP_FIXED) over far memory: {e}"
        )),
    }
}

/// `mmap(2)`.
///
/// # Safety
/// As `mmap(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    if flags & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE) != 0 {
        if let Some(r) = far(addr) {
            return map_fixed_over_far(r, addr, len, prot, flags, fd, off);
        }
    } else if let Some(kind) = far_mappable(addr, len, prot, flags) {
        if let Some(p) = far_alloc(len) {
            if kind == NewFar::Plain {
                return p;
            }
            let r = rt::get().expect("far_alloc succeeded, so the runtime runs");
            let _g = Guard::enter();
            match r.protect(p as usize, len, libc::PROT_NONE) {
                Ok(()) => return p,
                Err(e) => die(&format!("reserving {len} bytes of far memory: {e}")),
            }
        }
    }
    static NEXT: Next = Next::new(c"mmap");
    let f = NEXT.or_die();
    // SAFETY: f is the C library's mmap; arguments forwarded unchanged.
    unsafe { std::mem::transmute::<usize, MmapFn>(f)(addr, len, prot, flags, fd, off) }
}

/// `mmap64` (the same as `mmap` on 64-bit).
///
/// # Safety
/// As `mmap(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: same contract.
    unsafe { mmap(addr, len, prot, flags, fd, off) }
}

/// `munmap(2)`: a whole far mapping is freed; part of one is discarded.
///
/// # Safety
/// As `munmap(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    if let Some(r) = far(addr) {
        let _g = Guard::enter();
        if !(addr as usize).is_multiple_of(farmem_sys::PAGE_SIZE) || len == 0 {
            set_errno(libc::EINVAL);
            return -1;
        }
        let whole = r.alloc_size(addr.cast()).is_some_and(|size| len >= size);
        let res = if whole {
            r.free(addr.cast())
        } else {
            r.discard(addr as usize, len)
        };
        return match res {
            Ok(()) => 0,
            Err(_) => {
                set_errno(libc::EINVAL);
                -1
            }
        };
    }
    static NEXT: Next = Next::new(c"munmap");
    let f = NEXT.or_die();
    // SAFETY: f is the C library's munmap.
    unsafe { std::mem::transmute::<usize, MunmapFn>(f)(addr, len) }
}

/// `mremap(2)`. Declared with the optional fifth argument: on x86-64 a
/// variadic call passes it in the same register.
///
/// # Safety
/// As `mremap(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    if let Some(r) = far(old) {
        let size = r.alloc_size(old.cast()).unwrap_or(0);
        if flags & libc::MREMAP_FIXED != 0 || size == 0 {
            // Moving far memory to a chosen address is not supported.
            set_errno(libc::EINVAL);
            return libc::MAP_FAILED;
        }
        if new_len <= size {
            return old;
        }
        if flags & libc::MREMAP_MAYMOVE == 0 {
            set_errno(libc::ENOMEM);
            return libc::MAP_FAILED;
        }
        let Some(q) = far_alloc(new_len) else {
            set_errno(libc::ENOMEM);
            return libc::MAP_FAILED;
        };
        // SAFETY: both regions are live; old holds at least old_len.min(size) bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(old.cast::<u8>(), q.cast::<u8>(), old_len.min(size))
        };
        let _g = Guard::enter();
        let _ = r.free(old.cast());
        return q;
    }
    static NEXT: Next = Next::new(c"mremap");
    let f = NEXT.or_die();
    // SAFETY: f is the C library's mremap; arguments forwarded unchanged.
    unsafe { std::mem::transmute::<usize, MremapFn>(f)(old, old_len, new_len, flags, new_addr) }
}

pub(crate) type MadviseFn = unsafe extern "C" fn(*mut c_void, size_t, c_int) -> c_int;
pub(crate) type MprotectFn = unsafe extern "C" fn(*mut c_void, size_t, c_int) -> c_int;

/// `madvise(2)`. On far memory: the purges allocators use (`MADV_DONTNEED`,
/// `MADV_FREE`, `MADV_REMOVE`) drop the pages, which then read as zero;
/// access-pattern advice goes to the runtime; the rest (huge pages, dump and
/// fork flags, KSM, populate, cold/pageout hints) has no meaning for pages
/// farmem manages and succeeds without effect.
///
/// # Safety
/// As `madvise(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int {
    if let Some(r) = far(addr).filter(|r| !r.is_lent(addr as usize, len)) {
        if !(addr as usize).is_multiple_of(farmem_sys::PAGE_SIZE) {
            set_errno(libc::EINVAL);
            return -1;
        }
        if len == 0 {
            return 0;
        }
        let _g = Guard::enter();
        let res = match advice {
            libc::MADV_DONTNEED | libc::MADV_FREE | libc::MADV_REMOVE => r.zero(addr as usize, len),
            libc::MADV_WILLNEED => r.advise(addr as usize, len, rt::Advice::WillNeed),
            libc::MADV_SEQUENTIAL => r.advise(addr as usize, len, rt::Advice::Sequential),
            libc::MADV_RANDOM => r.advise(addr as usize, len, rt::Advice::Random),
            libc::MADV_NORMAL => r.advise(addr as usize, len, rt::Advice::Normal),
            _ => Ok(()),
        };
        return match res {
            Ok(()) => 0,
            Err(_) => {
                set_errno(libc::ENOMEM);
                -1
            }
        };
    }
    static NEXT: Next = Next::new(c"madvise");
    let f = NEXT.or_die();
    // SAFETY: f is the C library's madvise.
    unsafe { std::mem::transmute::<usize, MadviseFn>(f)(addr, len, advice) }
}

/// `mprotect(2)`. On far memory the protection is the kernel's, as for
/// any mapping, and the content is kept (see `farmem_runtime::remap`);
/// on a range lent to the kernel it is the kernel's call. `PROT_EXEC`
/// lends the range to the kernel with its content: code never runs from
/// far memory.
///
/// # Safety
/// As `mprotect(2)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mprotect(addr: *mut c_void, len: size_t, prot: c_int) -> c_int {
    if let Some(r) = far(addr) {
        if !r.is_lent(addr as usize, len) {
            let _g = Guard::enter();
            let res = if prot & libc::PROT_EXEC != 0 {
                r.make_executable(addr as usize, len, prot)
            } else {
                r.protect(addr as usize, len, prot)
            };
            return match res {
                Ok(()) => 0,
                Err(rt::RuntimeError::Remap(_, e)) => {
                    set_errno(e.raw_os_error().unwrap_or(libc::EINVAL));
                    -1
                }
                Err(_) => {
                    // Not inside one allocation: as for unmapped memory.
                    set_errno(libc::ENOMEM);
                    -1
                }
            };
        }
    }
    static NEXT: Next = Next::new(c"mprotect");
    let f = NEXT.or_die();
    // SAFETY: f is the C library's mprotect.
    unsafe { std::mem::transmute::<usize, MprotectFn>(f)(addr, len, prot) }
}

/// The name ZGC gives the memfd that holds its heap.
const ZGC_HEAP: &[u8] = b"java_heap";

/// ZGC keeps the Java heap in a memfd named so, which it maps several
/// times over (colored pointers). Far pages cannot be mapped twice, so the
/// program is stopped before its heap exists, with the collectors that work.
/// (The JVM makes the call through `syscall(2)`, which comes here.)
fn check_memfd(name: &std::ffi::CStr) {
    if name.to_bytes() == ZGC_HEAP && THRESHOLD.load(Ordering::Acquire) != usize::MAX {
        die(rt::jvm::ZGC_REFUSED);
    }
}

/// Memory-map system calls made through `syscall(2)` (tcmalloc's own
/// `mmap` does this) take the same path as the C library's entry points.
pub(crate) fn map_hook(nr: libc::c_long, a: &[usize; 6]) -> Option<libc::c_long> {
    let ptr = |x: usize| x as *mut c_void;
    let ret_ptr = |p: *mut c_void| -> libc::c_long {
        if p == libc::MAP_FAILED {
            -1
        } else {
            p as libc::c_long
        }
    };
    // SAFETY: the program's own arguments, forwarded as the entry points
    // of the same names take them.
    unsafe {
        match nr {
            libc::SYS_memfd_create => {
                check_memfd(std::ffi::CStr::from_ptr(a[0] as *const libc::c_char));
                None
            }
            // Only the far cases (a new far mapping, or one at a fixed
            // address over far memory): the rest goes to the kernel as it
            // is (an allocator's own `mmap` may itself call
            // `syscall(SYS_mmap)`).
            libc::SYS_mmap
                if far_mappable(ptr(a[0]), a[1], int_arg(a[2]), int_arg(a[3])).is_some()
                    || (int_arg(a[3]) & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE) != 0
                        && is_far(ptr(a[0]))) =>
            {
                let p = mmap(
                    ptr(a[0]),
                    a[1],
                    int_arg(a[2]),
                    int_arg(a[3]),
                    int_arg(a[4]),
                    a[5] as off_t,
                );
                Some(ret_ptr(p))
            }
            libc::SYS_munmap if is_far(ptr(a[0])) => Some(munmap(ptr(a[0]), a[1]) as libc::c_long),
            libc::SYS_mremap if is_far(ptr(a[0])) => Some(ret_ptr(mremap(
                ptr(a[0]),
                a[1],
                a[2],
                int_arg(a[3]),
                ptr(a[4]),
            ))),
            libc::SYS_madvise if is_far(ptr(a[0])) => {
                Some(madvise(ptr(a[0]), a[1], int_arg(a[2])) as libc::c_long)
            }
            libc::SYS_madvise | libc::SYS_mprotect
                if is_far(ptr(a[0])) && rt::get().is_some_and(|r| r.is_lent(a[0], a[1])) =>
            {
                None
            }
            libc::SYS_mprotect if is_far(ptr(a[0])) => {
                Some(mprotect(ptr(a[0]), a[1], int_arg(a[2])) as libc::c_long)
            }
            _ => None,
        }
    }
}
