//! `farmem doctor`: what this user, on this machine, can use, and why not
//! where not. Every check tries the real thing (opens a userfaultfd, makes a
//! memory file, discards a scratch page, loads UCX) rather than guessing
//! from versions or uid; what needs privilege says so, with what to do.

use anyhow::Result;
use farmem_sys::uffd::{Uffd, UFFD_FEATURE_PAGEFAULT_FLAG_WP, UFFD_FEATURE_SIGBUS};
use std::path::Path;

#[derive(clap::Args)]
pub struct Args {}

/// How one check came out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Works as well as it can.
    Ok,
    /// Works, with less (slower, or a part of farmem unavailable).
    Limited,
    /// Far memory cannot work here.
    No,
}

struct Check {
    what: &'static str,
    verdict: Verdict,
    why: String,
}

fn check(what: &'static str, verdict: Verdict, why: impl Into<String>) -> Check {
    Check {
        what,
        verdict,
        why: why.into(),
    }
}

fn userfaultfd() -> Check {
    let what = "userfaultfd";
    match Uffd::new(UFFD_FEATURE_SIGBUS | UFFD_FEATURE_PAGEFAULT_FLAG_WP) {
        Ok(u) if u.user_mode_only() => check(
            what,
            Verdict::Ok,
            "user-mode faults only, which is all farmem needs: it serves the kernel's \
             accesses to far memory (system calls, process_vm_readv) by making the pages \
             present first. Faults of every kind need root, vm.unprivileged_userfaultfd=1 \
             or access to /dev/userfaultfd, and gain nothing here.",
        ),
        Ok(_) => check(
            what,
            Verdict::Ok,
            "every fault (root, vm.unprivileged_userfaultfd=1, or /dev/userfaultfd)",
        ),
        Err(e) => {
            let why = farmem_sys::uffd::explain(&e);
            check(what, Verdict::No, why)
        }
    }
}

fn unmap_batching() -> Check {
    let what = "batched unmap";
    match farmem_sys::mem::discard_batches() {
        Ok(true) => check(
            what,
            Verdict::Ok,
            "process_madvise on this process: one TLB shootdown per eviction batch",
        ),
        Ok(false) => check(
            what,
            Verdict::Limited,
            "process_madvise cannot advise this process (Linux before 6.15, or a \
             seccomp filter): one madvise and one TLB shootdown per run of evicted pages, \
             slower on scattered evictions with several threads",
        ),
        Err(e) => check(what, Verdict::No, format!("cannot discard pages: {e}")),
    }
}

fn memory_files() -> Check {
    let what = "memory files";
    match farmem_sys::memfd::create_sealed(c"farmem-doctor", farmem_sys::PAGE_SIZE as u64, false) {
        Ok(_) => check(
            what,
            Verdict::Ok,
            "sealed memory files: pages of servers on this host move with one copy, \
             no server CPU",
        ),
        Err(e) => check(
            what,
            Verdict::Limited,
            format!("memfd_create failed ({e}): servers on this host are reached over sockets"),
        ),
    }
}

fn ucx() -> Check {
    let what = "UCX";
    match farmem_sys::ucx::available() {
        Ok(()) => check(
            what,
            Verdict::Ok,
            format!(
                "UCX {} loads: one-sided pages (RDMA on InfiniBand or RoCE) from servers \
                 that offer them",
                farmem_sys::ucx::version().unwrap_or_default()
            ),
        ),
        Err(e) => check(
            what,
            Verdict::Limited,
            format!("{e}: servers on other hosts are reached over TCP (install libucx0 for RDMA)"),
        ),
    }
}

fn statistics() -> Check {
    let what = "farmem stat";
    match farmem_runtime::publish::dir(true) {
        Ok(d) => check(
            what,
            Verdict::Ok,
            format!("programs publish their counters in {}", d.display()),
        ),
        Err(e) => check(
            what,
            Verdict::Limited,
            format!("{e}: programs run, but farmem stat cannot see them"),
        ),
    }
}

fn secret() -> Check {
    let what = "secret";
    let default = std::env::var_os("HOME")
        .map(|h| Path::new(&h).join(".config/farmem/secret"))
        .filter(|p| p.exists());
    match std::env::var_os("FARMEM_SECRET_FILE")
        .map(std::path::PathBuf::from)
        .or(default)
    {
        Some(p) => check(
            what,
            Verdict::Ok,
            format!(
                "{}: TCP connections to servers are authenticated and every frame sealed",
                p.display()
            ),
        ),
        None => check(
            what,
            Verdict::Limited,
            "none: servers on other hosts are reached without authentication; \
             `farmem secret init` writes one (servers on this host need none)",
        ),
    }
}

fn baselines(root: bool) -> Check {
    let what = "kernel baselines";
    if root {
        return check(
            what,
            Verdict::Ok,
            "farmem bench can turn on swap and zram and set cgroup memory limits",
        );
    }
    check(
        what,
        Verdict::Limited,
        "farmem bench's swap, zram and cgroup-limit baselines need root (swapon, \
         /dev/zram0, a memory cgroup); as this user they are reported as not run, and \
         farmem itself is measured as usual",
    )
}

fn numa() -> Check {
    let what = "NUMA";
    let nodes = std::fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| {
                    let n = e.file_name();
                    let n = n.to_string_lossy();
                    n.starts_with("node") && n[4..].parse::<u32>().is_ok()
                })
                .count()
        })
        .unwrap_or(0);
    match nodes {
        0 => check(
            what,
            Verdict::Limited,
            "no NUMA information in /sys: farmem numa cannot place memory",
        ),
        1 => check(
            what,
            Verdict::Ok,
            "one node: farmem numa runs, with nothing to compare placements across",
        ),
        n => check(
            what,
            Verdict::Ok,
            format!(
                "{n} nodes: farmem numa places its own threads and pages (no privilege \
                 needed); moving other users' pages would need CAP_SYS_NICE"
            ),
        ),
    }
}

pub fn run(_a: Args) -> Result<()> {
    let uid = farmem_sys::process::geteuid();
    let root = uid == 0;
    println!(
        "farmem doctor: uid {uid}{}, Linux {}",
        if root { " (root)" } else { "" },
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
    );
    let checks = [
        userfaultfd(),
        unmap_batching(),
        memory_files(),
        ucx(),
        statistics(),
        secret(),
        baselines(root),
        numa(),
    ];
    for c in &checks {
        let mark = match c.verdict {
            Verdict::Ok => "ok",
            Verdict::Limited => "limited",
            Verdict::No => "NO",
        };
        println!("  {mark:<8} {:<17} {}", c.what, c.why);
    }
    if checks.iter().any(|c| c.verdict == Verdict::No) {
        anyhow::bail!("far memory cannot work here as this user: see the NO lines above");
    }
    println!("far memory works here as this user.");
    Ok(())
}
