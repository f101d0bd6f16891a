//! NUMA placement: memory policy and CPU affinity, by raw syscalls (usable
//! between fork and exec).

use crate::cvt_long;
use std::io;

pub const MPOL_DEFAULT: i32 = 0;
pub const MPOL_PREFERRED: i32 = 1;
pub const MPOL_BIND: i32 = 2;
pub const MPOL_INTERLEAVE: i32 = 3;
pub const MPOL_LOCAL: i32 = 4;

/// Most nodes a mask may name.
pub const MAX_NODES: usize = 1024;

/// `set_mempolicy(mode, nodes)` for the calling thread (and what it forks or
/// execs). An empty `nodes` passes no mask (for MPOL_DEFAULT, MPOL_LOCAL).
pub fn set_mempolicy(mode: i32, nodes: &[usize]) -> io::Result<()> {
    let mut mask = [0u64; MAX_NODES / 64];
    for &n in nodes {
        if n >= MAX_NODES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "node number too large",
            ));
        }
        mask[n / 64] |= 1 << (n % 64);
    }
    let (ptr, maxnode) = if nodes.is_empty() {
        (std::ptr::null(), 0)
    } else {
        (mask.as_ptr(), MAX_NODES + 1)
    };
    // SAFETY: mask is a live array of MAX_NODES bits (or no mask at all).
    let r = unsafe { crate::raw_syscall!(libc::SYS_set_mempolicy, mode, ptr, maxnode) };
    cvt_long(r).map(|_| ())
}

/// `sched_setaffinity(0, cpus)` for the calling thread.
pub fn set_affinity(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET only write inside it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "CPU number too large",
            ));
        }
        // SAFETY: c < CPU_SETSIZE.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: set is a live cpu_set_t of the size passed.
    let r = unsafe {
        crate::raw_syscall!(
            libc::SYS_sched_setaffinity,
            0,
            std::mem::size_of::<libc::cpu_set_t>(),
            &set as *const libc::cpu_set_t,
        )
    };
    cvt_long(r).map(|_| ())
}

/// The node holding each page of `pages` (addresses), via `move_pages` with
/// no target nodes (a query). A negative value is an errno (e.g. -ENOENT:
/// not yet faulted in).
pub fn page_nodes(pages: &[usize]) -> io::Result<Vec<i32>> {
    let ptrs: Vec<*const libc::c_void> = pages.iter().map(|&p| p as *const libc::c_void).collect();
    let mut status = vec![0i32; pages.len()];
    // SAFETY: ptrs and status hold pages.len() entries; nodes NULL = query.
    let r = unsafe {
        crate::raw_syscall!(
            libc::SYS_move_pages,
            0,
            pages.len(),
            ptrs.as_ptr(),
            std::ptr::null::<i32>(),
            status.as_mut_ptr(),
            0,
        )
    };
    cvt_long(r).map(|_| status)
}
