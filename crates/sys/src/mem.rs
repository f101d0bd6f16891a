//! Anonymous mappings and `madvise`.

use crate::{cvt, PAGE_SIZE};
use std::io;
use std::ptr::NonNull;

/// An anonymous private mapping, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Mapping is plain address space; concurrent access to its bytes is
// governed by the users of `as_ptr`, not by the owner.
unsafe impl Send for Mapping {}
// SAFETY: as above; the type itself holds no interior state.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Reserve `len` bytes of anonymous, private, zero-filled address space.
    /// With `noreserve`, no swap/commit is accounted (the pages are never
    /// populated by the kernel for farmem's arena: userfaultfd fills them).
    pub fn anonymous(len: usize, noreserve: bool) -> io::Result<Mapping> {
        if len == 0 || !len.is_multiple_of(PAGE_SIZE) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "mapping length must be a non-zero multiple of the page size",
            ));
        }
        let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        if noreserve {
            flags |= libc::MAP_NORESERVE;
        }
        // SAFETY: a fresh anonymous mapping at a kernel-chosen address touches
        // no existing memory.
        // Through the raw path: the `farmem run` shim's `mmap` would make a
        // large mapping far memory.
        let p = unsafe {
            crate::raw_syscall!(
                libc::SYS_mmap,
                0usize,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0usize,
            )
        } as *mut libc::c_void;
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(Mapping { ptr, len })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn contains(&self, addr: usize) -> bool {
        let base = self.ptr.as_ptr() as usize;
        addr >= base && addr < base + self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned; nothing borrows the
        // mapping once its owner is dropped.
        let r = unsafe { crate::raw_syscall!(libc::SYS_munmap, self.ptr.as_ptr(), self.len) };
        debug_assert_eq!(r, 0, "munmap failed: {}", io::Error::last_os_error());
    }
}

/// `madvise(addr, len, advice)`.
///
/// # Safety
/// `[addr, addr+len)` must be memory the caller owns; for `MADV_DONTNEED` its
/// contents are discarded, so no live reference may point into it.
pub unsafe fn madvise(addr: *mut u8, len: usize, advice: libc::c_int) -> io::Result<()> {
    // SAFETY: forwarded to the caller's contract.
    // Raw: the shim's `madvise` treats far memory as the program's.
    cvt(unsafe { crate::raw_syscall!(libc::SYS_madvise, addr, len, advice) } as libc::c_int)
        .map(|_| ())
}

/// `mprotect(addr, len, prot)`.
///
/// # Safety
/// `[addr, addr+len)` must be a mapping the caller owns; removing access makes
/// later accesses fault.
pub unsafe fn mprotect(addr: *mut u8, len: usize, prot: libc::c_int) -> io::Result<()> {
    // SAFETY: forwarded to the caller's contract.
    cvt(unsafe { crate::raw_syscall!(libc::SYS_mprotect, addr, len, prot) } as libc::c_int)
        .map(|_| ())
}

/// Field `name` (in kB) of `/proc/meminfo`, in bytes.
pub fn meminfo(name: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?.strip_prefix(':')?;
        let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kb * 1024)
    })
}
