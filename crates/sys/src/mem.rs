//! Anonymous and shared-file mappings, and `madvise`.

use crate::{cvt_long, PAGE_SIZE};
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

/// A mapping (anonymous and private, or of a file and shared), unmapped on
/// drop.
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
        let p = map_anonymous(len, flags)?;
        let ptr =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(Mapping { ptr, len })
    }

    /// The first `len` bytes of `file`, shared: readable, and writable with
    /// `write` (the file must be opened so). Stores reach every other
    /// mapping of the file at once: how a program publishes its counters.
    pub fn shared_file(file: &std::fs::File, len: usize, write: bool) -> io::Result<Mapping> {
        use std::os::fd::AsRawFd;
        let len = len.max(1).next_multiple_of(PAGE_SIZE);
        let prot = if write {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh shared mapping of an open descriptor at a
        // kernel-chosen address touches no existing memory. Raw: the
        // `farmem run` shim's `mmap` must not see farmem's own mappings.
        let p = unsafe {
            crate::raw_syscall!(
                libc::SYS_mmap,
                0usize,
                len,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
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

    /// `len` bytes (rounded up to the page size of `pages`), readable and
    /// writable, backed by the page size asked for:
    /// - `Small`: 4 KiB pages (transparent huge pages refused, MADV_NOHUGEPAGE);
    /// - `Thp`: transparent huge pages asked for (MADV_HUGEPAGE), the start
    ///   aligned to 2 MiB so that every 2 MiB of the buffer can be one;
    /// - `Huge`: reserved huge pages (MAP_HUGETLB), which need
    ///   `vm.nr_hugepages`; ENOMEM when there are none.
    pub fn with_pages(len: usize, pages: Pages) -> io::Result<Mapping> {
        const HUGE: usize = 2 << 20;
        let len = len.max(1).next_multiple_of(if pages == Pages::Small {
            PAGE_SIZE
        } else {
            HUGE
        });
        let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        if pages == Pages::Huge {
            flags |= libc::MAP_HUGETLB;
        }
        // A THP mapping is over-allocated by 2 MiB so it can start aligned.
        let map_len = if pages == Pages::Thp { len + HUGE } else { len };
        let p = map_anonymous(map_len, flags)?;
        let mut start = p as usize;
        if pages == Pages::Thp {
            let aligned = start.next_multiple_of(HUGE);
            let head = aligned - start;
            let tail = map_len - head - len;
            // SAFETY: trimming the unaligned head and the tail of the mapping
            // just made, which nothing else knows of.
            unsafe {
                if head > 0 {
                    unmap(start, head);
                }
                if tail > 0 {
                    unmap(aligned + len, tail);
                }
            }
            start = aligned;
        }
        let advice = match pages {
            Pages::Small => libc::MADV_NOHUGEPAGE,
            Pages::Thp => libc::MADV_HUGEPAGE,
            Pages::Huge => 0,
        };
        let ptr =
            NonNull::new(start as *mut u8).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        let m = Mapping { ptr, len };
        if advice != 0 {
            // SAFETY: advice on the mapping just made; a kernel without THP
            // refusing it leaves plain pages, which is what the hint asks at worst.
            let _ = unsafe { madvise(m.as_ptr(), len, advice) };
        }
        Ok(m)
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

/// `mmap` of `len` bytes of fresh anonymous read-write memory with `flags`,
/// through the raw path: the `farmem run` shim's `mmap` would make a large
/// mapping far memory.
fn map_anonymous(len: usize, flags: libc::c_int) -> io::Result<*mut libc::c_void> {
    // SAFETY: a fresh anonymous mapping at a kernel-chosen address touches
    // no existing memory.
    unsafe { map_anonymous_at(0, len, flags) }
}

/// Raw `mmap` of anonymous read-write memory at `addr` (0: anywhere).
/// Raw: the shim's `mmap` must not see farmem's own mappings.
///
/// # Safety
/// With `MAP_FIXED` in `flags`, whatever was mapped at `[addr, addr+len)`
/// is gone: the caller must own it and no live reference may point into it.
unsafe fn map_anonymous_at(
    addr: usize,
    len: usize,
    flags: libc::c_int,
) -> io::Result<*mut libc::c_void> {
    // SAFETY: forwarded to the caller's contract.
    let p = unsafe {
        crate::raw_syscall!(
            libc::SYS_mmap,
            addr,
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
    Ok(p)
}

/// The page size a [`Mapping::with_pages`] is backed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pages {
    Small,
    Thp,
    Huge,
}

/// `munmap`, where failing is a broken invariant: the range is the
/// caller's, and an unmap that fails would leave it mapped while its owner
/// believes it gone (and a later mapping could not reuse it).
///
/// # Safety
/// `[start, start+len)` must be a mapped range nothing else uses.
pub(crate) unsafe fn unmap(start: usize, len: usize) {
    // SAFETY: per the caller's contract.
    let r = unsafe { crate::raw_syscall!(libc::SYS_munmap, start, len) };
    if r != 0 {
        let e = io::Error::last_os_error();
        let msg = format!("farmem: munmap of {len} bytes at {start:#x} failed: {e}\n");
        crate::fatal(msg.as_bytes());
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly the mapping this owns; nothing borrows
        // it once its owner is dropped.
        unsafe { unmap(self.ptr.as_ptr() as usize, self.len) };
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
    cvt_long(unsafe { crate::raw_syscall!(libc::SYS_madvise, addr, len, advice) }).map(|_| ())
}

/// `mincore(addr, len, vec)`: bit 0 of `vec[i]` says whether page `i` of
/// `[addr, addr+len)` is resident (for private anonymous memory: mapped).
/// `vec` must hold a byte per page. Touches nothing, so it cannot fault.
pub fn resident(addr: usize, len: usize, vec: &mut [u8]) -> io::Result<()> {
    if vec.len() < len.div_ceil(PAGE_SIZE) {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: the kernel writes one byte per page of the range into `vec`,
    // which is long enough; the range itself is only looked up.
    cvt_long(unsafe { crate::raw_syscall!(libc::SYS_mincore, addr, len, vec.as_mut_ptr()) })
        .map(|_| ())
}

/// `PIDFD_SELF_THREAD_GROUP` (Linux 6.15): the calling process, with no
/// file descriptor to hold. A held pidfd would name the parent in a forked
/// child, and a program may close or reuse any descriptor number.
const PIDFD_SELF: libc::c_int = -10001;

/// Set once `process_madvise` on this process has failed in a way that
/// says it never will work here (an older kernel, or a seccomp filter).
static NO_PROCESS_MADVISE: AtomicBool = AtomicBool::new(false);

/// Discard the pages of every range in `ranges` (`MADV_DONTNEED`), in one
/// `process_madvise` call where the kernel allows it: one TLB flush for the
/// whole batch (Linux 6.16+) instead of one per range. A flush reaches every
/// CPU that runs one of the process's threads, and in a VM each of those is
/// an exit: measured here with a second thread running, scattered pages cost
/// 13 µs each one `madvise` at a time, 0.9 µs each 64 to a call (0.6 µs
/// against 1.5 µs with one thread). Where `process_madvise` cannot advise
/// this process (before Linux 6.15, or filtered), the ranges are discarded
/// one `madvise` each, and `process_madvise` is not tried again.
///
/// Returns how many system calls it made: each flushes the TLBs once.
///
/// # Safety
/// As for [`madvise`] with `MADV_DONTNEED`, for every range: memory the
/// caller owns, with no live reference into it.
pub unsafe fn discard(ranges: &[libc::iovec]) -> io::Result<usize> {
    let mut calls = 0;
    // The kernel takes at most IOV_MAX (1024) ranges a call.
    for chunk in ranges.chunks(1024) {
        let mut done = 0;
        if !NO_PROCESS_MADVISE.load(Ordering::Relaxed) {
            // SAFETY: forwarded to the caller's contract; the iovecs are
            // read by the kernel during the call only.
            let r = cvt_long(unsafe {
                crate::raw_syscall!(
                    libc::SYS_process_madvise,
                    PIDFD_SELF,
                    chunk.as_ptr(),
                    chunk.len(),
                    libc::MADV_DONTNEED,
                    0
                )
            });
            match r {
                Ok(bytes) => {
                    calls += 1;
                    // Ranges wholly advised are done; a short count stops
                    // inside one, which is discarded again below (nothing
                    // can fault it back in: the caller owns it).
                    let mut left = bytes;
                    while done < chunk.len() && left >= chunk[done].iov_len {
                        left -= chunk[done].iov_len;
                        done += 1;
                    }
                }
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EBADF | libc::EINVAL | libc::ENOSYS | libc::EPERM)
                    ) =>
                {
                    NO_PROCESS_MADVISE.store(true, Ordering::Relaxed);
                }
                Err(e) => return Err(e),
            }
        }
        for r in &chunk[done..] {
            calls += 1;
            // SAFETY: forwarded to the caller's contract.
            unsafe { madvise(r.iov_base.cast(), r.iov_len, libc::MADV_DONTNEED) }?;
        }
    }
    Ok(calls)
}

/// Whether [`discard`] batches on this machine: it tries a scratch page.
pub fn discard_batches() -> io::Result<bool> {
    let scratch = Mapping::anonymous(PAGE_SIZE, false)?;
    let range = [libc::iovec {
        iov_base: scratch.as_ptr().cast(),
        iov_len: PAGE_SIZE,
    }];
    // SAFETY: the scratch page is ours and nothing refers into it.
    unsafe { discard(&range) }?;
    Ok(!NO_PROCESS_MADVISE.load(Ordering::Relaxed))
}

/// `mprotect(addr, len, prot)`.
///
/// # Safety
/// `[addr, addr+len)` must be a mapping the caller owns; removing access makes
/// later accesses fault.
pub unsafe fn mprotect(addr: *mut u8, len: usize, prot: libc::c_int) -> io::Result<()> {
    // SAFETY: forwarded to the caller's contract.
    cvt_long(unsafe { crate::raw_syscall!(libc::SYS_mprotect, addr, len, prot) }).map(|_| ())
}

/// Replace `[addr, addr+len)` with fresh anonymous, private, read-write,
/// zero-filled memory (`MAP_FIXED | MAP_NORESERVE`): what farmem's arena is
/// made of, so a piece of it lent to the kernel can be taken back.
///
/// # Safety
/// `[addr, addr+len)` must be address space the caller owns; whatever was
/// mapped there is gone, so no live reference may point into it.
pub unsafe fn remap_anonymous(addr: usize, len: usize) -> io::Result<()> {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE;
    // SAFETY: forwarded to the caller's contract.
    unsafe { map_anonymous_at(addr, len, flags) }.map(|_| ())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_modes_round_and_align() {
        let m = Mapping::with_pages(5000, Pages::Small).unwrap();
        assert_eq!(m.len(), 2 * PAGE_SIZE);
        // SAFETY: the mapping is ours and writable.
        unsafe { m.as_ptr().write_bytes(7, m.len()) };
        let t = Mapping::with_pages(3 << 20, Pages::Thp).unwrap();
        assert_eq!(t.len(), 4 << 20);
        assert_eq!(
            t.as_ptr() as usize % (2 << 20),
            0,
            "THP buffers start 2 MiB-aligned"
        );
        // SAFETY: as above.
        unsafe { t.as_ptr().write_bytes(1, t.len()) };
    }
}

/// Whether `[addr, addr + len)` lies inside one mapping of this process
/// (one line of `/proc/self/maps`): memory a peer's shared-memory key
/// mapped here, checked before anything is copied to or from it.
pub fn within_one_mapping(addr: usize, len: usize) -> io::Result<bool> {
    let Some(end) = addr.checked_add(len) else {
        return Ok(false);
    };
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    Ok(maps.lines().any(|l| {
        let range = l.split_whitespace().next().unwrap_or("");
        let mut ends = range
            .split('-')
            .map(|h| usize::from_str_radix(h, 16).unwrap_or(0));
        matches!((ends.next(), ends.next()), (Some(a), Some(b)) if a <= addr && end <= b)
    }))
}

#[cfg(test)]
mod mapping_tests {
    use super::*;

    #[test]
    fn a_range_is_inside_one_mapping_or_not() {
        let m = Mapping::anonymous(4 * PAGE_SIZE, true).unwrap();
        let a = m.as_ptr() as usize;
        assert!(within_one_mapping(a, 4 * PAGE_SIZE).unwrap());
        assert!(within_one_mapping(a + PAGE_SIZE, PAGE_SIZE).unwrap());
        assert!(!within_one_mapping(usize::MAX - 10, 100).unwrap());
        assert!(
            !within_one_mapping(8, PAGE_SIZE).unwrap(),
            "page zero is never mapped"
        );
    }
}
