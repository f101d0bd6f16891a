//! Running a command under a placement: timed, its output lines timestamped,
//! and its memory's nodes sampled while it runs.

use crate::plan::Placement;
use crate::verify;
use crate::NumaError;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Instant;

#[derive(Debug)]
pub struct Outcome {
    pub wall_s: f64,
    pub status: ExitStatus,
    /// Every stdout line with the seconds since start when it arrived.
    pub lines: Vec<(f64, String)>,
    /// The largest memory footprint seen, by node (sampled every 50 ms).
    pub by_node: BTreeMap<usize, u64>,
}

/// Run `cmd` under `placement`. The placement is applied in the child between
/// fork and exec, so it covers everything the program allocates.
pub fn run(cmd: &[String], placement: &Placement) -> Result<Outcome, NumaError> {
    run_for(cmd, placement, None)
}

/// Like [`run`], stopping the command with SIGTERM after `limit_s` seconds.
pub fn run_for(
    cmd: &[String],
    placement: &Placement,
    limit_s: Option<f64>,
) -> Result<Outcome, NumaError> {
    let mut c = Command::new(&cmd[0]);
    c.args(&cmd[1..]).stdout(Stdio::piped());
    let p = placement.clone();
    // SAFETY: the closure makes only raw syscalls (set_mempolicy,
    // sched_setaffinity) and allocates nothing.
    unsafe {
        c.pre_exec(move || p.apply());
    }
    let start = Instant::now();
    let mut child = c.spawn().map_err(|source| NumaError::Spawn {
        cmd: cmd.join(" "),
        source,
    })?;
    let pid = child.id();
    let out = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        BufReader::new(out)
            .lines()
            .map_while(Result::ok)
            .map(|l| (start.elapsed().as_secs_f64(), l))
            .collect::<Vec<_>>()
    });
    let mut best = BTreeMap::new();
    let status = loop {
        if let Some(st) = child.try_wait().map_err(|source| NumaError::Spawn {
            cmd: cmd.join(" "),
            source,
        })? {
            break st;
        }
        if limit_s.is_some_and(|l| start.elapsed().as_secs_f64() >= l) {
            // Our own child, not reaped yet: the pid is still its.
            farmem_sys::process::terminate(pid as libc::pid_t);
        }
        let m = verify::sample(pid);
        if m.values().sum::<u64>() > best.values().sum::<u64>() {
            best = m;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let wall_s = start.elapsed().as_secs_f64();
    let lines = reader.join().unwrap_or_default();
    Ok(Outcome {
        wall_s,
        status,
        lines,
        by_node: best,
    })
}
