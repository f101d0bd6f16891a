//! Sealed memory files (`memfd_create`): the one-host page path's chunks.
//! A memory server makes one per chunk and passes its descriptor to the
//! session's client over a Unix socket; the kernel, not a key, decides who
//! may touch the pages: only a process holding the descriptor.

use crate::cvt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The seals every chunk carries: its size cannot change (a server that
/// shrank it would make a client's read past the end fail), and no seal may
/// be added or removed later (a write seal would stop write-back).
pub const CHUNK_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// A new memory file of `len` bytes, close-on-exec, with [`CHUNK_SEALS`],
/// its memory allocated now (`fallocate`) when `allocate`.
///
/// Why allocate: a memory file's page is charged to the memory cgroup of
/// the process that allocates it. Left as holes, a chunk's pages would be
/// allocated by the client's first `pwrite` and charged to the client: a
/// program in a job step limited to less than its footprint (the reason it
/// uses far memory) would be killed for memory its server holds. Allocated
/// by the server, they are the server's, as its capacity already counts
/// them.
pub fn create_sealed(name: &std::ffi::CStr, len: u64, allocate: bool) -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated name and plain flags.
    let raw = cvt(unsafe {
        libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
    })?;
    // SAFETY: memfd_create returned a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: ftruncate on a descriptor this function owns.
    cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), len) })?;
    if allocate {
        // SAFETY: fallocate on a descriptor this function owns.
        cvt(unsafe { libc::fallocate(fd.as_raw_fd(), 0, 0, len) })?;
    }
    // SAFETY: fcntl with an int argument on a descriptor this function owns.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, CHUNK_SEALS) })?;
    Ok(fd)
}

/// Why a descriptor is not a chunk.
#[derive(Debug, thiserror::Error)]
pub enum ChunkFdError {
    #[error("it is not a sealed memory file (F_GET_SEALS: {0})")]
    NotMemfd(io::Error),
    #[error(
        "its size can still change (seals {0:#x}; a chunk is sealed against growing and shrinking)"
    )]
    NotSealed(libc::c_int),
    #[error("it cannot be examined (fstat: {0})")]
    Stat(io::Error),
    #[error("it is {got} bytes long, and a chunk of this session is {want}")]
    WrongSize { got: u64, want: u64 },
}

/// Check that `fd` is a memory file sealed against resizing and exactly
/// `len` bytes long: what a client requires before it reads or writes a
/// page there.
pub fn check_chunk(fd: RawFd, len: u64) -> Result<(), ChunkFdError> {
    // SAFETY: fcntl without pointer arguments; a bad descriptor is EBADF.
    let seals =
        cvt(unsafe { libc::fcntl(fd, libc::F_GET_SEALS) }).map_err(ChunkFdError::NotMemfd)?;
    let need = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
    if seals & need != need {
        return Err(ChunkFdError::NotSealed(seals));
    }
    // SAFETY: `stat` is plain data; zero is valid, and fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat into a live stat buffer.
    cvt(unsafe { libc::fstat(fd, &mut st) }).map_err(ChunkFdError::Stat)?;
    let got = u64::try_from(st.st_size).unwrap_or(0);
    if got != len {
        return Err(ChunkFdError::WrongSize { got, want: len });
    }
    Ok(())
}
