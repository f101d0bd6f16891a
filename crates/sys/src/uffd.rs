//! userfaultfd(2): the ABI (defined here, checked against the C header by a
//! test) and an owned handle with one method per ioctl.
//!
//! farmem uses the uffd in SIGBUS mode: a fault on a missing or
//! write-protected page raises SIGBUS in the faulting thread, which resolves it
//! with `UFFDIO_COPY` / `UFFDIO_WRITEPROTECT` itself. Nothing reads the fd.

use crate::{cvt, PAGE_SIZE};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub const UFFD_API: u64 = 0xAA;
pub const UFFD_FEATURE_PAGEFAULT_FLAG_WP: u64 = 1 << 0;
pub const UFFD_FEATURE_SIGBUS: u64 = 1 << 7;
/// Linux 6.7: writes to write-protected pages are resolved by the kernel,
/// which only clears the page's uffd-wp bit (read back with `PAGEMAP_SCAN`).
pub const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
/// Linux 6.8: `UFFDIO_MOVE`.
pub const UFFD_FEATURE_MOVE: u64 = 1 << 16;
pub const UFFDIO_REGISTER_MODE_MISSING: u64 = 1 << 0;
pub const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
pub const UFFDIO_COPY_MODE_DONTWAKE: u64 = 1 << 0;
pub const UFFDIO_COPY_MODE_WP: u64 = 1 << 1;
pub const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1 << 0;
pub const UFFDIO_MOVE_MODE_DONTWAKE: u64 = 1 << 0;
pub const UFFDIO_WRITEPROTECT_MODE_DONTWAKE: u64 = 1 << 1;

const fn iowr(nr: u64, size: usize) -> u64 {
    // _IOC(_IOC_READ|_IOC_WRITE, 0xAA, nr, size) on x86_64.
    (3 << 30) | ((size as u64) << 16) | (0xAA << 8) | nr
}
const fn ior(nr: u64, size: usize) -> u64 {
    (2 << 30) | ((size as u64) << 16) | (0xAA << 8) | nr
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioApi {
    pub api: u64,
    pub features: u64,
    pub ioctls: u64,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioRange {
    pub start: u64,
    pub len: u64,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioRegister {
    pub range: UffdioRange,
    pub mode: u64,
    pub ioctls: u64,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioCopy {
    pub dst: u64,
    pub src: u64,
    pub len: u64,
    pub mode: u64,
    pub copy: i64,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioWriteprotect {
    pub range: UffdioRange,
    pub mode: u64,
}

/// `struct uffdio_move` (Linux 6.8; not in Debian 12's headers).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioMove {
    pub dst: u64,
    pub src: u64,
    pub len: u64,
    pub mode: u64,
    pub moved: i64,
}

pub const UFFDIO_MOVE: u64 = iowr(0x05, std::mem::size_of::<UffdioMove>());
pub const UFFDIO_API: u64 = iowr(0x3F, std::mem::size_of::<UffdioApi>());
pub const UFFDIO_REGISTER: u64 = iowr(0x00, std::mem::size_of::<UffdioRegister>());
pub const UFFDIO_UNREGISTER: u64 = ior(0x01, std::mem::size_of::<UffdioRange>());
pub const UFFDIO_COPY: u64 = iowr(0x03, std::mem::size_of::<UffdioCopy>());
pub const UFFDIO_WRITEPROTECT: u64 = iowr(0x06, std::mem::size_of::<UffdioWriteprotect>());

/// `ioctl(USERFAULTFD_IOC_NEW)` on `/dev/userfaultfd`, for kernels where the
/// syscall is restricted but the device is allowed.
const USERFAULTFD_IOC_NEW: u64 = 0xAA00;

/// `userfaultfd(2)` flag (Linux 5.11): handle faults from user mode only.
/// Any user may open such a userfaultfd, whatever
/// `vm.unprivileged_userfaultfd` says (`userfaultfd_syscall_allowed`).
pub const UFFD_USER_MODE_ONLY: libc::c_int = 1;

/// An owned userfaultfd; closing it unregisters every range.
#[derive(Debug)]
pub struct Uffd {
    fd: OwnedFd,
    features: u64,
    user_mode_only: bool,
}

/// Outcome of `UFFDIO_COPY`: how many bytes were installed before any error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyOutcome {
    /// The whole range was installed.
    Done,
    /// Some page in the range was already present (`EEXIST`); `copied` bytes
    /// from the start were installed by this call.
    Exists { copied: usize },
}

/// Why opening a userfaultfd failed, for the user: `e` from [`Uffd::new`],
/// and what to do. One wording for the runtime's error and `farmem doctor`.
pub fn explain(e: &io::Error) -> String {
    match e.raw_os_error() {
        // Uffd::new has already tried user-mode faults only, which the
        // kernel gives any user since 5.11: only a filter refuses that.
        Some(libc::EPERM) if crate::process::seccomp_filtered() == Some(true) => format!(
            "{e}: a seccomp filter on this process (Seccomp: 2 in /proc/self/status) refuses the \
             userfaultfd system call, as Docker's and Podman's default profiles do. Run the \
             container with a profile that allows it: `--security-opt seccomp=PROFILE`, with \
             PROFILE made by contrib/containers/seccomp-allow-farmem from the default one \
             (README, \"In a container\")"
        ),
        Some(libc::EPERM) => format!(
            "{e}, even for user-mode faults, which any user may have since Linux 5.11: a \
             security module (SELinux, AppArmor) or a sandbox refuses the userfaultfd system call"
        ),
        Some(libc::ENOSYS) => format!(
            "{e}: this kernel has no userfaultfd; farmem needs CONFIG_USERFAULTFD and Linux 5.11 \
             or later"
        ),
        _ if e.kind() == io::ErrorKind::Unsupported => format!(
            "{e}: farmem needs userfaultfd write protection on anonymous memory (Linux 5.11 or \
             later on x86-64)"
        ),
        _ => format!("{e} (farmem needs Linux 5.11 or later with userfaultfd write protection)"),
    }
}

impl Uffd {
    /// Open a userfaultfd and negotiate `features`: one that handles every
    /// fault where this process may have it (root, the sysctl, or access to
    /// `/dev/userfaultfd`), else one for user-mode faults only, which any
    /// user may open. In SIGBUS mode the two behave alike: a kernel-mode
    /// access to a missing page fails with `EFAULT` either way, and farmem
    /// serves those by making the pages present first.
    pub fn new(features: u64) -> io::Result<Uffd> {
        let flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
        let mut user_mode_only = false;
        let raw = match Self::open_syscall(flags) {
            Ok(raw) => raw,
            Err(sys_err) => match Self::open_dev(flags) {
                Ok(raw) => raw,
                Err(_) if sys_err.raw_os_error() == Some(libc::EPERM) => {
                    user_mode_only = true;
                    Self::open_syscall(flags | UFFD_USER_MODE_ONLY)?
                }
                Err(_) => return Err(sys_err),
            },
        };
        // SAFETY: raw is a freshly created fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut api = UffdioApi {
            api: UFFD_API,
            features,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_API takes a pointer to a live UffdioApi.
        cvt(unsafe { libc::ioctl(fd.as_raw_fd(), UFFDIO_API as _, &mut api) })?;
        if api.features & features != features {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "kernel lacks userfaultfd features {:#x}",
                    features & !api.features
                ),
            ));
        }
        Ok(Uffd {
            fd,
            features,
            user_mode_only,
        })
    }

    fn open_syscall(flags: libc::c_int) -> io::Result<RawFd> {
        // SAFETY: userfaultfd(2) takes only flags.
        let raw = unsafe { crate::raw_syscall!(libc::SYS_userfaultfd, flags) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // The kernel returns an int (an fd) widened to a long: it fits.
        #[allow(clippy::cast_possible_truncation)]
        Ok(raw as RawFd)
    }

    fn open_dev(flags: libc::c_int) -> io::Result<RawFd> {
        let path = c"/dev/userfaultfd";
        // SAFETY: path is NUL-terminated.
        let dev = cvt(unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) })?;
        // SAFETY: dev is an fd we just opened and own.
        let dev = unsafe { OwnedFd::from_raw_fd(dev) };
        // SAFETY: USERFAULTFD_IOC_NEW takes the flags by value.
        cvt(unsafe { libc::ioctl(dev.as_raw_fd(), USERFAULTFD_IOC_NEW as _, flags) })
    }

    pub fn features(&self) -> u64 {
        self.features
    }

    /// Whether this userfaultfd handles user-mode faults only (opened so
    /// because this process may not have more).
    pub fn user_mode_only(&self) -> bool {
        self.user_mode_only
    }

    /// Register `[start, start+len)` for missing and write-protect faults.
    pub fn register(&self, start: usize, len: usize, mode: u64) -> io::Result<()> {
        let mut reg = UffdioRegister {
            range: UffdioRange {
                start: start as u64,
                len: len as u64,
            },
            mode,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_REGISTER takes a pointer to a live UffdioRegister; the
        // range is validated by the kernel.
        cvt(unsafe { libc::ioctl(self.fd.as_raw_fd(), UFFDIO_REGISTER as _, &mut reg) })?;
        Ok(())
    }

    /// Atomically install `len` bytes from `src` at `dst` (a missing range).
    /// `write_protect` installs the pages write-protected, so the first write
    /// raises a fault (that is how farmem tells clean pages from dirty ones).
    ///
    /// # Safety
    /// `src` must be readable for `len` bytes; `dst` must lie in a range
    /// registered with this uffd.
    pub unsafe fn copy(
        &self,
        dst: usize,
        src: *const u8,
        len: usize,
        write_protect: bool,
    ) -> io::Result<CopyOutcome> {
        debug_assert!(dst.is_multiple_of(PAGE_SIZE) && len.is_multiple_of(PAGE_SIZE));
        let mut done = 0usize;
        // Bytes per ioctl: all at once, or one page at a time once the range
        // turned out to span two VMAs (see ENOENT below).
        let mut chunk = len;
        while done < len {
            let mut c = UffdioCopy {
                dst: (dst + done) as u64,
                // SAFETY (pointer arithmetic): done < len, within src's extent.
                src: src as u64 + done as u64,
                len: chunk.min(len - done) as u64,
                mode: UFFDIO_COPY_MODE_DONTWAKE
                    | if write_protect {
                        UFFDIO_COPY_MODE_WP
                    } else {
                        0
                    },
                copy: 0,
            };
            // SAFETY: `c` is a live UffdioCopy; the caller guarantees src/dst.
            let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), UFFDIO_COPY as _, &mut c) };
            if r == 0 {
                done += crate::usize_from(c.len);
                continue;
            }
            let err = io::Error::last_os_error();
            if c.copy > 0 {
                done += crate::usize_from(c.copy.unsigned_abs());
            }
            match err.raw_os_error() {
                // Partial copy interrupted or asked to retry: go on from `done`.
                Some(libc::EAGAIN) | Some(libc::EINTR) => continue,
                Some(libc::EEXIST) => return Ok(CopyOutcome::Exists { copied: done }),
                // One ioctl must stay inside one VMA. A program can split the
                // registered range (madvise(MADV_HUGEPAGE) on part of it does),
                // and the kernel then answers ENOENT for a range across the
                // split: go on one page at a time.
                Some(libc::ENOENT) if chunk > PAGE_SIZE => chunk = PAGE_SIZE,
                _ => return Err(err),
            }
        }
        Ok(CopyOutcome::Done)
    }

    /// Set (`protect`) or clear write protection on a range of present pages.
    pub fn write_protect(&self, start: usize, len: usize, protect: bool) -> io::Result<()> {
        let mut wp = UffdioWriteprotect {
            range: UffdioRange {
                start: start as u64,
                len: len as u64,
            },
            mode: if protect {
                UFFDIO_WRITEPROTECT_MODE_WP
            } else {
                // Nobody sleeps on this uffd (SIGBUS mode): skip the wake-up.
                UFFDIO_WRITEPROTECT_MODE_DONTWAKE
            },
        };
        loop {
            // SAFETY: `wp` is a live UffdioWriteprotect.
            let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), UFFDIO_WRITEPROTECT as _, &mut wp) };
            match cvt(r) {
                Ok(_) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// What one [`Uffd::move_pages`] call moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    /// Bytes moved, from the start of the range.
    pub bytes: usize,
    /// The kernel reported fewer bytes than it moved; `bytes` was read from
    /// the page tables instead.
    pub misreported: bool,
}

impl Uffd {
    /// `UFFDIO_MOVE`: move the present pages of `[src, src+len)` to `dst`, a
    /// range registered with this uffd, atomically against writers (the
    /// source becomes unmapped; the destination's page table entries must be
    /// empty). Returns what moved, from the start: fewer than `len` bytes
    /// where the kernel stopped early (a page it could not take, such as one
    /// shared since a `fork`). Nobody waiting on the uffd is woken: in
    /// SIGBUS mode nobody waits.
    ///
    /// Whenever the kernel reports less than `len`, the count is taken from
    /// the page tables: Linux 6.18's batched moves can move more than they
    /// report. Its `move_pages()` keeps the `-EAGAIN` of a retried page
    /// (a page table entry that changed under it: the program touching the
    /// page, another thread write-protecting it) in `err`, so the next
    /// batch, which moves, is not counted; the retry then finds its
    /// destination full and fails with `EEXIST`. Example: a 64-page move
    /// whose first page another thread write-protects on and off returns
    /// `EEXIST` with all 64 pages at `dst` (up to 4% of such calls on
    /// 6.18.44; `tests/abi.rs`). Trusting that answer, a caller would read
    /// the moved pages at their old, now empty, addresses.
    ///
    /// # Safety
    /// Both ranges must be private anonymous memory of this process that no
    /// Rust reference points into; the source's content leaves it. The
    /// destination's pages must be empty and stay so unless this call fills
    /// them (the count read back relies on it).
    pub unsafe fn move_pages(&self, dst: usize, src: usize, len: usize) -> io::Result<Moved> {
        let mut m = UffdioMove {
            dst: dst as u64,
            src: src as u64,
            len: len as u64,
            mode: UFFDIO_MOVE_MODE_DONTWAKE,
            moved: 0,
        };
        // SAFETY: `m` is a live UffdioMove; the caller guarantees the ranges.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), UFFDIO_MOVE as _, &mut m) };
        if r == 0 {
            return Ok(Moved {
                bytes: usize::try_from(m.moved).unwrap_or(0),
                misreported: false,
            });
        }
        let err = io::Error::last_os_error();
        // On a partial move the kernel answers EAGAIN and leaves the bytes
        // moved in `moved` (a negative errno when nothing moved).
        let reported = match usize::try_from(m.moved) {
            Ok(moved) if err.raw_os_error() == Some(libc::EAGAIN) => moved,
            _ => 0,
        };
        // Where the page tables cannot be read, the kernel's count is all there is.
        let bytes = moved_prefix(dst, src, len).unwrap_or(0).max(reported);
        if bytes == 0 {
            return Err(err);
        }
        Ok(Moved {
            bytes,
            misreported: bytes > reported,
        })
    }
}

/// Bytes from the start of a move's ranges whose pages left `src` and are
/// at `dst`: page by page, the destination mapped and the source not.
/// (A page swapped out meanwhile reads as not mapped: its move, if the
/// kernel hid it, is missed as it was before this check.)
fn moved_prefix(dst: usize, src: usize, len: usize) -> io::Result<usize> {
    const STEP: usize = 256;
    let (mut at_dst, mut at_src) = ([0u8; STEP], [0u8; STEP]);
    let pages = len / PAGE_SIZE;
    let mut done = 0;
    while done < pages {
        let n = (pages - done).min(STEP);
        crate::mem::resident(dst + done * PAGE_SIZE, n * PAGE_SIZE, &mut at_dst)?;
        crate::mem::resident(src + done * PAGE_SIZE, n * PAGE_SIZE, &mut at_src)?;
        if let Some(i) = (0..n).find(|&i| at_dst[i] & 1 == 0 || at_src[i] & 1 != 0) {
            return Ok((done + i) * PAGE_SIZE);
        }
        done += n;
    }
    Ok(len)
}

impl AsRawFd for Uffd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
