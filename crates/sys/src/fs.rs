//! Files and swap areas: what `farmem bench` needs to set up its kernel
//! baselines without shelling out to fallocate, swapon and swapoff.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
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
