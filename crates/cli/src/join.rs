//! `farmem join PID ADDR...`: add memory servers to a running program's
//! session. The program (one of this user's, with two or more copies of
//! its pages) connects to each, and its next repair pass gives each its
//! share of the copies. The request and the answer pass through this
//! user's private statistics directory, so only this user can ask.

use anyhow::{bail, Context, Result};
use farmem_runtime::publish;
use farmem_wire::ServerAddr;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// The running program (`farmem stat` lists them).
    pid: u32,
    /// Memory servers to add: HOST:PORT, unix:/PATH or unix:@NAME.
    #[arg(required = true, value_name = "ADDR")]
    servers: Vec<ServerAddr>,
    /// How long to wait for the program's answer, in seconds.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    timeout: u64,
}

pub fn run(a: Args) -> Result<()> {
    let dir = publish::dir(false).context("this user's farmem programs")?;
    let board = publish::path_of(&dir, a.pid);
    let reader = publish::Reader::open(&board).with_context(|| {
        format!(
            "process {} is not a running farmem program of this user (no {}); `farmem stat` lists them",
            a.pid,
            board.display()
        )
    })?;
    if !reader.alive() {
        bail!("process {} has ended", a.pid);
    }
    let sample = reader.sample();
    if sample.replicas < 2 {
        bail!(
            "process {} keeps one copy of each page (FARMEM_REPLICAS=1): servers join only a session with two or three copies, which can move copies to them",
            a.pid
        );
    }
    let (ask, answer) = publish::join_paths(&dir, a.pid);
    let _ = std::fs::remove_file(&answer);
    let tmp = ask.with_extension("join.new");
    let lines: String = a.servers.iter().map(|s| format!("{s}\n")).collect();
    std::fs::write(&tmp, lines).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &ask).with_context(|| format!("writing {}", ask.display()))?;
    // The program looks four times a second; connecting takes a moment.
    let deadline = Instant::now() + Duration::from_secs(a.timeout);
    let text = loop {
        if let Ok(t) = std::fs::read_to_string(&answer) {
            let _ = std::fs::remove_file(&answer);
            break t;
        }
        if Instant::now() > deadline || !reader.alive() {
            let _ = std::fs::remove_file(&ask);
            bail!(
                "process {} did not answer within {} s (has it ended, or does it keep one copy?)",
                a.pid,
                a.timeout
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut failed = 0;
    for line in text.lines() {
        match line.strip_prefix("ok ") {
            Some(addr) => println!("{addr} joined process {}'s session", a.pid),
            None => {
                failed += 1;
                eprintln!(
                    "farmem join: {}",
                    line.strip_prefix("error ").unwrap_or(line)
                );
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {} servers did not join", a.servers.len());
    }
    Ok(())
}
