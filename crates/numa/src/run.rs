//! Running a command under a placement: timed, its output lines timestamped,
//! and its memory's nodes sampled while it runs.

use crate::plan::Placement;
use crate::verify;
use crate::NumaError;
use farmem_sys::child;
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus};
use std::time::Duration;

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

/// Like [`run`], stopping the command with SIGTERM after `limit_s` seconds
/// (SIGKILL 5 s later if it is still there). The runner is
/// `farmem_sys::child`'s, as for `farmem bench`.
pub fn run_for(
    cmd: &[String],
    placement: &Placement,
    limit_s: Option<f64>,
) -> Result<Outcome, NumaError> {
    let mut c = Command::new(&cmd[0]);
    c.args(&cmd[1..]);
    let p = placement.clone();
    // SAFETY: the closure makes only raw syscalls (set_mempolicy,
    // sched_setaffinity) and allocates nothing.
    unsafe {
        c.pre_exec(move || p.apply());
    }
    let limits = child::Limits {
        timeout: limit_s.map(Duration::from_secs_f64),
        signal: libc::SIGTERM,
        tick: Duration::from_millis(50),
        capture_stderr: false,
        ..child::Limits::default()
    };
    let mut best = BTreeMap::new();
    let f = child::run(&mut c, &limits, |pid| {
        let m = verify::sample(pid.unsigned_abs());
        if m.values().sum::<u64>() > best.values().sum::<u64>() {
            best = m;
        }
    })
    .map_err(|source| NumaError::Spawn {
        cmd: cmd.join(" "),
        source,
    })?;
    Ok(Outcome {
        wall_s: f.wall_s,
        status: f.status,
        lines: f.stdout,
        by_node: best,
    })
}
