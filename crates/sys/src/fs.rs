//! Files and swap areas: page I/O at offsets (the file backend), and what
//! `farmem bench` needs to set up its kernel baselines without shelling out
//! to fallocate, swapon and swapoff.

use crate::{cvt, cvt_long};
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn c_path(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
}

/// Give `file` `len` bytes of real blocks (no holes: swapon refuses a
/// sparse file).
pub fn allocate(file: &File, len: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "length beyond off_t"))?;
    // SAFETY: fallocate on a descriptor the caller owns.
    crate::cvt(unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) }).map(drop)
}

/// Start swapping to `path`, a file or block device with a swap header.
pub fn swap_on(path: &Path) -> io::Result<()> {
    let p = c_path(path)?;
    // SAFETY: a NUL-terminated path that outlives the call.
    crate::cvt(unsafe { libc::swapon(p.as_ptr(), 0) }).map(drop)
}

/// Stop swapping to `path` (its pages come back into memory first).
pub fn swap_off(path: &Path) -> io::Result<()> {
    let p = c_path(path)?;
    // SAFETY: a NUL-terminated path that outlives the call.
    crate::cvt(unsafe { libc::swapoff(p.as_ptr()) }).map(drop)
}

/// `pread(2)` by raw syscall, retried on EINTR; returns bytes read (short at EOF).
pub fn pread_full(fd: RawFd, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: pointer/length describe the live slice buf[got..].
        let r = unsafe {
            crate::raw_syscall!(
                libc::SYS_pread64,
                fd,
                buf[got..].as_mut_ptr() as usize,
                buf.len() - got,
                offset + got as u64,
            )
        };
        match cvt_long(r) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Allocate `[offset, offset+len)` of file `fd` (`fallocate`, mode 0):
/// holes there get memory or blocks, charged to this process.
pub fn allocate_range(fd: RawFd, offset: u64, len: u64) -> io::Result<()> {
    let off =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: fallocate takes plain integers.
    cvt(unsafe { libc::fallocate(fd, 0, off, len) }).map(|_| ())
}

/// Give `[offset, offset+len)` of file `fd` back to the filesystem
/// (`fallocate` PUNCH_HOLE, size kept); not every filesystem can.
pub fn punch_hole(fd: RawFd, offset: u64, len: u64) -> io::Result<()> {
    let off =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: fallocate takes plain integers.
    cvt(unsafe {
        libc::fallocate(
            fd,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            off,
            len,
        )
    })
    .map(|_| ())
}

/// `pwritev(2)` by raw syscall: `parts` (at most [`crate::net::MAX_IOV`])
/// written one after another from `offset` on; a short write finishes
/// with [`pwrite_full`] per part.
pub fn pwritev_full(fd: RawFd, parts: &[&[u8]], offset: u64) -> io::Result<()> {
    assert!(parts.len() <= crate::net::MAX_IOV, "too many iovecs");
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; crate::net::MAX_IOV];
    for (v, p) in iov.iter_mut().zip(parts) {
        v.iov_base = p.as_ptr().cast_mut().cast();
        v.iov_len = p.len();
    }
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let done = loop {
        // SAFETY: the iovecs describe live slices borrowed for the call;
        // on x86_64 the offset's high half (the last argument) is unused.
        let r = unsafe {
            crate::raw_syscall!(
                libc::SYS_pwritev,
                fd,
                iov.as_ptr() as usize,
                parts.len(),
                offset,
                0usize,
            )
        };
        match cvt_long(r) {
            Ok(n) => break n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    };
    if done == total {
        return Ok(());
    }
    // Short: write what is left part by part.
    let mut at = 0usize;
    for p in parts {
        let end = at + p.len();
        if end > done {
            let skip = done.saturating_sub(at);
            pwrite_full(fd, &p[skip..], offset + (at + skip) as u64)?;
        }
        at = end;
    }
    Ok(())
}

/// `pwrite(2)` by raw syscall, retried until everything is written.
pub fn pwrite_full(fd: RawFd, buf: &[u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: pointer/length describe the live slice buf[done..].
        let r = unsafe {
            crate::raw_syscall!(
                libc::SYS_pwrite64,
                fd,
                buf[done..].as_ptr() as usize,
                buf.len() - done,
                offset + done as u64,
            )
        };
        match cvt_long(r) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "pwrite wrote nothing",
                ))
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
