//! Pages in a file on a local SSD.

use super::{Backend, BackendError};
use crate::config::FileDirect;
use farmem_sys::PAGE_SIZE;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;

/// Pages in a file (an SSD), page `p` at offset `p * 4096`.
pub struct FileBackend {
    path: PathBuf,
    fd: OwnedFd,
    pub direct: bool,
}

impl FileBackend {
    pub fn open(path: &std::path::Path, mode: FileDirect) -> Result<FileBackend, BackendError> {
        use std::os::unix::fs::OpenOptionsExt;
        let err = |source| BackendError::File {
            path: path.to_path_buf(),
            source,
        };
        let open = |direct: bool| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .custom_flags(if direct { libc::O_DIRECT } else { 0 })
                .open(path)
        };
        let (file, direct) = match mode {
            FileDirect::On => (open(true).map_err(err)?, true),
            FileDirect::Off => (open(false).map_err(err)?, false),
            // tmpfs and some filesystems refuse O_DIRECT: fall back to buffered.
            FileDirect::Auto => match open(true) {
                Ok(f) => (f, true),
                Err(_) => (open(false).map_err(err)?, false),
            },
        };
        Ok(FileBackend {
            path: path.to_path_buf(),
            fd: file.into(),
            direct,
        })
    }
}

impl Backend for FileBackend {
    fn read(&self, pages: &[u64], buf: &mut [u8]) -> Result<(), BackendError> {
        // Read each run of consecutive pages with one pread.
        for run in crate::runs(pages.len(), |j| pages[j] == pages[j - 1] + 1) {
            let (i, j) = (run.start, run.end);
            let dst = &mut buf[i * PAGE_SIZE..j * PAGE_SIZE];
            let got =
                farmem_sys::fs::pread_full(self.fd.as_raw_fd(), dst, pages[i] * PAGE_SIZE as u64)
                    .map_err(|source| BackendError::File {
                    path: self.path.clone(),
                    source,
                })?;
            if got != dst.len() {
                return Err(BackendError::File {
                    path: self.path.clone(),
                    source: io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the file is shorter than the pages written to it (was it truncated?)",
                    ),
                });
            }
        }
        Ok(())
    }

    fn write(&self, pages: &[u64], data: &[&[u8]]) -> Result<(), BackendError> {
        for (p, d) in pages.iter().zip(data) {
            farmem_sys::fs::pwrite_full(self.fd.as_raw_fd(), d, p * PAGE_SIZE as u64).map_err(
                |source| BackendError::File {
                    path: self.path.clone(),
                    source,
                },
            )?;
        }
        Ok(())
    }

    fn free(&self, start: u64, n: u64) -> Result<(), BackendError> {
        // Punch a hole so the SSD space comes back; not all filesystems can.
        let _ = farmem_sys::fs::punch_hole(
            self.fd.as_raw_fd(),
            start * PAGE_SIZE as u64,
            n * PAGE_SIZE as u64,
        );
        Ok(())
    }

    fn describe(&self) -> String {
        format!(
            "file {} ({} I/O)",
            self.path.display(),
            if self.direct { "direct" } else { "buffered" }
        )
    }

    fn holder(&self, _page: u64) -> String {
        self.path.display().to_string()
    }

    fn transport(&self) -> &'static str {
        "local file"
    }
}
