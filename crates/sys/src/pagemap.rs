//! `PAGEMAP_SCAN` (Linux 6.7) on `/proc/self/pagemap`: which pages of a range
//! are present, and which were written since they were last write-protected
//! (with `UFFD_FEATURE_WP_ASYNC`), optionally write-protecting them again in
//! the same walk. Debian 12's headers predate it, so the ABI is defined here
//! and checked against the running kernel by `tests/abi.rs`.

use crate::cvt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub const PAGE_IS_WPALLOWED: u64 = 1 << 0;
pub const PAGE_IS_WRITTEN: u64 = 1 << 1;
pub const PAGE_IS_PRESENT: u64 = 1 << 3;
/// Write-protect the matching pages during the walk.
pub const PM_SCAN_WP_MATCHING: u64 = 1 << 0;
/// Fail unless the range is registered with `UFFD_FEATURE_WP_ASYNC`.
pub const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;

/// `struct page_region`: pages `[start, end)` with `categories`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PageRegion {
    pub start: u64,
    pub end: u64,
    pub categories: u64,
}

/// `struct pm_scan_arg`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct PmScanArg {
    pub size: u64,
    pub flags: u64,
    pub start: u64,
    pub end: u64,
    pub walk_end: u64,
    pub vec: u64,
    pub vec_len: u64,
    pub max_pages: u64,
    pub category_inverted: u64,
    pub category_mask: u64,
    pub category_anyof_mask: u64,
    pub return_mask: u64,
}

/// `_IOWR('f', 16, struct pm_scan_arg)`.
pub const PAGEMAP_SCAN: u64 =
    (3 << 30) | ((std::mem::size_of::<PmScanArg>() as u64) << 16) | ((b'f' as u64) << 8) | 16;

/// An open `/proc/self/pagemap`.
pub struct Pagemap {
    fd: OwnedFd,
}

impl Pagemap {
    pub fn open() -> io::Result<Pagemap> {
        // SAFETY: the path is NUL-terminated.
        let fd = cvt(unsafe {
            libc::open(
                c"/proc/self/pagemap".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: fd was just opened and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Pagemap { fd })
    }

    /// The regions of `[start, start+len)` whose categories include all of
    /// `required`, reported with `report` categories, into `out`; `flags` as
    /// `PM_SCAN_*`. Returns how many regions were filled.
    pub fn scan(
        &self,
        start: usize,
        len: usize,
        required: u64,
        report: u64,
        flags: u64,
        out: &mut [PageRegion],
    ) -> io::Result<usize> {
        let mut arg = PmScanArg {
            size: std::mem::size_of::<PmScanArg>() as u64,
            flags,
            start: start as u64,
            end: (start + len) as u64,
            vec: out.as_mut_ptr() as u64,
            vec_len: out.len() as u64,
            category_mask: required,
            return_mask: report,
            ..Default::default()
        };
        // SAFETY: `arg` is a live pm_scan_arg whose vec points to `out`,
        // writable for vec_len regions.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), PAGEMAP_SCAN as _, &mut arg) };
        cvt(r).map(|n| n.unsigned_abs() as usize) // n >= 0: a region count
    }
}
