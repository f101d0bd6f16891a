//! The systems a cell runs on. The kernel baselines are types that set a
//! kernel facility up through its files and system calls (no shell
//! commands) and tear it down on drop, so that an error or Ctrl-C mid-run
//! leaves no cgroup, swap area or data file behind.

use crate::BenchError;
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum System {
    Local,
    Farmem,
    Swap,
    Zram,
    SsdMmap,
}

impl std::str::FromStr for System {
    type Err = String;
    fn from_str(s: &str) -> Result<System, String> {
        Ok(match s {
            "local" => System::Local,
            "farmem" => System::Farmem,
            "swap" => System::Swap,
            "zram" => System::Zram,
            "ssd-mmap" => System::SsdMmap,
            _ => {
                return Err(format!(
                    "{s:?} is not a system; use local, farmem, swap, zram, ssd-mmap"
                ))
            }
        })
    }
}

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Local => "local",
            System::Farmem => "farmem",
            System::Swap => "swap",
            System::Zram => "zram",
            System::SsdMmap => "ssd-mmap",
        }
    }
}

/// A memory cgroup (v1, or v2 where only that exists), removed on drop.
pub struct Cgroup {
    dir: PathBuf,
    /// Its `cgroup.procs`, ready for a child to write itself into between
    /// fork and exec (where nothing may allocate).
    pub procs: CString,
}

impl Cgroup {
    pub fn new(limit: u64) -> Result<Cgroup, BenchError> {
        let name = format!("farmem-bench-{}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let (dir, limit_file) = if v1.join("memory.limit_in_bytes").exists() {
            (v1.join(&name), "memory.limit_in_bytes")
        } else if std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
            .is_ok_and(|c| c.contains("memory"))
        {
            (Path::new("/sys/fs/cgroup").join(&name), "memory.max")
        } else {
            return Err(BenchError::Unavailable(
                "no cgroup memory controller (v1 at /sys/fs/cgroup/memory, or v2)".into(),
            ));
        };
        std::fs::create_dir_all(&dir).map_err(BenchError::setup(format!(
            "creating {} (needs root)",
            dir.display()
        )))?;
        let cg = Cgroup {
            procs: CString::new(dir.join("cgroup.procs").display().to_string())
                .expect("a path built from an id has no NUL"),
            dir,
        };
        std::fs::write(cg.dir.join(limit_file), limit.to_string())
            .map_err(BenchError::setup("setting the cgroup memory limit"))?;
        Ok(cg)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Members have exited (the runner waited for them); an empty group
        // can go, once the kernel has finished with it.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("farmem bench: could not remove {}", self.dir.display());
    }
}

/// The kernel's swap header (`union swap_header` in linux/swap.h) for an
/// area of `bytes`, as mkswap writes it: version 1, the last usable page,
/// no bad pages, and the magic at the end of the first page.
pub fn swap_header(bytes: u64) -> Result<Vec<u8>, BenchError> {
    let page = farmem_sys::PAGE_SIZE;
    let pages = bytes / page as u64;
    if pages < 10 {
        return Err(BenchError::Invalid(format!(
            "a swap area of {bytes} bytes is too small (10 pages at least)"
        )));
    }
    let last_page = u32::try_from(pages - 1).map_err(|_| {
        BenchError::Invalid(format!("a swap area of {bytes} bytes is beyond 16 TiB"))
    })?;
    let mut h = vec![0u8; page];
    h[1024..1028].copy_from_slice(&1u32.to_ne_bytes());
    h[1028..1032].copy_from_slice(&last_page.to_ne_bytes());
    h[page - 10..].copy_from_slice(b"SWAPSPACE2");
    Ok(h)
}

fn write_header(path: &Path, bytes: u64) -> Result<(), BenchError> {
    let what = || format!("writing a swap header to {}", path.display());
    let mut f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(BenchError::setup(what()))?;
    f.write_all(&swap_header(bytes)?)
        .and_then(|()| f.sync_all())
        .map_err(BenchError::setup(what()))
}

/// A swap area turned on for a run and off (and cleaned) on drop.
pub struct SwapArea {
    path: PathBuf,
    zram: bool,
    on: bool,
}

impl SwapArea {
    /// A swap file of `size` bytes in /var/tmp (on the machine's disk).
    pub fn file(size: u64) -> Result<SwapArea, BenchError> {
        let path = PathBuf::from(format!("/var/tmp/farmem-bench-{}.swap", std::process::id()));
        let mut area = SwapArea {
            path,
            zram: false,
            on: false,
        };
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&area.path)
            .map_err(BenchError::setup(format!(
                "creating {}",
                area.path.display()
            )))?;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(BenchError::setup("making the swap file private"))?;
        farmem_sys::fs::allocate(&f, size).map_err(BenchError::setup(format!(
            "allocating {size} bytes for {}",
            area.path.display()
        )))?;
        drop(f);
        write_header(&area.path, size)?;
        area.swap_on()?;
        Ok(area)
    }

    /// /dev/zram0 sized to `size` bytes (the zram module must be loaded
    /// and the device unused).
    pub fn zram(size: u64) -> Result<SwapArea, BenchError> {
        let dev = Path::new("/sys/block/zram0");
        if !dev.exists() {
            return Err(BenchError::Unavailable(
                "no /dev/zram0 (the zram module is not loaded)".into(),
            ));
        }
        if std::fs::read_to_string(dev.join("disksize")).map_or(true, |s| s.trim() != "0") {
            return Err(BenchError::Unavailable(
                "/dev/zram0 is already in use".into(),
            ));
        }
        let mut area = SwapArea {
            path: "/dev/zram0".into(),
            zram: true,
            on: false,
        };
        std::fs::write(dev.join("disksize"), size.to_string())
            .map_err(BenchError::setup("sizing /dev/zram0 (needs root)"))?;
        write_header(&area.path, size)?;
        area.swap_on()?;
        Ok(area)
    }

    fn swap_on(&mut self) -> Result<(), BenchError> {
        farmem_sys::fs::swap_on(&self.path).map_err(BenchError::setup(format!(
            "swapon {} (needs root)",
            self.path.display()
        )))?;
        self.on = true;
        Ok(())
    }
}

impl Drop for SwapArea {
    fn drop(&mut self) {
        if self.on {
            if let Err(e) = farmem_sys::fs::swap_off(&self.path) {
                eprintln!("farmem bench: swapoff {}: {e}", self.path.display());
            }
        }
        if self.zram {
            let _ = std::fs::write("/sys/block/zram0/reset", "1");
        } else {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The data file a built-in workload maps its arrays from (ssd-mmap),
/// removed on drop. The workload creates it.
pub struct DataFile(pub PathBuf);

impl DataFile {
    pub fn new() -> DataFile {
        DataFile(PathBuf::from(format!(
            "/var/tmp/farmem-bench-{}.data",
            std::process::id()
        )))
    }
}

impl Default for DataFile {
    fn default() -> Self {
        DataFile::new()
    }
}

impl Drop for DataFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The header's fields where the kernel's `union swap_header` has them.
    #[test]
    fn swap_header_matches_the_kernel_layout() {
        let h = swap_header(64 << 20).unwrap();
        assert_eq!(h.len(), 4096);
        assert_eq!(&h[4086..], b"SWAPSPACE2");
        assert_eq!(u32::from_ne_bytes(h[1024..1028].try_into().unwrap()), 1);
        assert_eq!(
            u32::from_ne_bytes(h[1028..1032].try_into().unwrap()),
            (64 << 20) / 4096 - 1
        );
        assert!(h[..1024].iter().all(|&b| b == 0), "boot bits are zero");
        assert!(swap_header(4096 * 9).is_err());
    }

    #[test]
    fn system_names_round_trip() {
        for s in [
            System::Local,
            System::Farmem,
            System::Swap,
            System::Zram,
            System::SsdMmap,
        ] {
            assert_eq!(s.name().parse::<System>(), Ok(s));
        }
        assert!("ram"
            .parse::<System>()
            .unwrap_err()
            .contains("local, farmem"));
    }
}
