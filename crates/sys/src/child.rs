//! Running a child program to its end under a time limit: the one runner
//! that `farmem bench` (every cell) and `farmem numa` (every placement) use.
//!
//! It collects the child's stdout as lines stamped with when they arrived
//! (a workload's progress lines carry timing), optionally its stderr, and its
//! peak resident memory from `wait4`; it calls back every tick so that the
//! caller can sample the child while it runs (its pages' NUMA nodes).

use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// When and how the runner ends a child that has not ended by itself.
#[derive(Clone, Copy)]
pub struct Limits<'a> {
    /// Stop the child after this long.
    pub timeout: Option<Duration>,
    /// Stop the child as soon as this turns true (the caller's SIGINT flag).
    pub stop: Option<&'a AtomicBool>,
    /// The signal that stops it: SIGKILL for a cell that is thrown away,
    /// SIGTERM for a program that may report what it did so far. A child
    /// still alive 5 s after SIGTERM gets SIGKILL.
    pub signal: libc::c_int,
    /// How often to poll the child and call the tick callback.
    pub tick: Duration,
    /// Collect stderr (else the child inherits ours).
    pub capture_stderr: bool,
}

impl Default for Limits<'_> {
    fn default() -> Self {
        Limits {
            timeout: None,
            stop: None,
            signal: libc::SIGKILL,
            tick: Duration::from_millis(20),
            capture_stderr: true,
        }
    }
}

/// Why the runner ended the child, when it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    TimedOut,
    Stopped,
}

/// A child that has ended.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub wall_s: f64,
    /// Every stdout line with the seconds since the start when it arrived.
    pub stdout: Vec<(f64, String)>,
    /// Its stderr, when captured.
    pub stderr: String,
    /// Peak resident memory, bytes (the kernel's `ru_maxrss`).
    pub max_rss: u64,
    /// Set when the runner ended it.
    pub cut: Option<Cut>,
}

impl Finished {
    /// The first stdout line that starts with `prefix`.
    pub fn line(&self, prefix: &str) -> Option<&str> {
        self.stdout
            .iter()
            .map(|(_, l)| l.as_str())
            .find(|l| l.starts_with(prefix))
    }

    /// All of stdout as one string.
    pub fn stdout_text(&self) -> String {
        let mut s = String::new();
        for (_, l) in &self.stdout {
            s.push_str(l);
            s.push('\n');
        }
        s
    }

    /// The signal that killed it, if one did.
    pub fn signal(&self) -> Option<i32> {
        self.status.signal()
    }
}

/// Spawn `cmd` (stdout piped; stderr piped when `limits.capture_stderr`)
/// and wait for it, ending it as `limits` say. `on_tick` gets the child's
/// pid every tick while it runs. Errors only when it cannot be started or
/// waited for.
pub fn run(
    cmd: &mut Command,
    limits: &Limits<'_>,
    mut on_tick: impl FnMut(libc::pid_t),
) -> io::Result<Finished> {
    cmd.stdout(Stdio::piped());
    if limits.capture_stderr {
        cmd.stderr(Stdio::piped());
    }
    let start = Instant::now();
    let mut child = cmd.spawn()?;
    let out = child.stdout.take().expect("stdout is piped");
    let err = child.stderr.take();
    let so = std::thread::spawn(move || {
        BufReader::new(out)
            .lines()
            .map_while(Result::ok)
            .map(|l| (start.elapsed().as_secs_f64(), l))
            .collect::<Vec<_>>()
    });
    let se = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut e) = err {
            let _ = e.read_to_string(&mut s);
        }
        s
    });
    let pid = libc::pid_t::try_from(child.id()).expect("a pid fits pid_t");
    let mut cut = None;
    let mut signalled_at: Option<Instant> = None;
    let (raw, max_rss) = loop {
        if let Some(done) = crate::process::try_wait_rusage(pid)? {
            break done;
        }
        if cut.is_none() {
            if limits.stop.is_some_and(|s| s.load(Ordering::Acquire)) {
                cut = Some(Cut::Stopped);
            } else if limits.timeout.is_some_and(|t| start.elapsed() >= t) {
                cut = Some(Cut::TimedOut);
            }
            if cut.is_some() {
                // Our own child, not reaped yet: the pid is still its.
                crate::process::send_signal(pid, limits.signal);
                signalled_at = Some(Instant::now());
            }
        } else if signalled_at.is_some_and(|t| t.elapsed() >= Duration::from_secs(5)) {
            crate::process::send_signal(pid, libc::SIGKILL);
            signalled_at = None;
        }
        on_tick(pid);
        std::thread::sleep(limits.tick);
    };
    let wall_s = start.elapsed().as_secs_f64();
    Ok(Finished {
        status: ExitStatus::from_raw(raw),
        wall_s,
        stdout: so.join().unwrap_or_default(),
        stderr: se.join().unwrap_or_default(),
        max_rss,
        cut,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn collects_output_status_and_peak_memory() {
        let f = run(
            &mut sh("echo one; echo two >&2; echo result x=1; exit 3"),
            &Limits::default(),
            |_| {},
        )
        .unwrap();
        assert_eq!(f.status.code(), Some(3));
        assert_eq!(f.line("result "), Some("result x=1"));
        assert_eq!(f.stdout_text(), "one\nresult x=1\n");
        assert_eq!(f.stderr, "two\n");
        assert!(f.max_rss > 0, "a shell has some resident memory");
        assert_eq!(f.cut, None);
    }

    #[test]
    fn a_timeout_kills_the_child_and_says_so() {
        let limits = Limits {
            timeout: Some(Duration::from_millis(200)),
            ..Limits::default()
        };
        let mut ticks = 0;
        let f = run(&mut sh("echo started; exec sleep 30"), &limits, |_| {
            ticks += 1
        })
        .unwrap();
        assert_eq!(f.cut, Some(Cut::TimedOut));
        assert_eq!(f.signal(), Some(libc::SIGKILL));
        assert!(f.wall_s < 10.0, "took {} s", f.wall_s);
        assert!(ticks > 0);
        assert_eq!(f.line("started"), Some("started"));
    }

    #[test]
    fn sigterm_lets_the_program_finish_its_report() {
        let limits = Limits {
            timeout: Some(Duration::from_millis(200)),
            signal: libc::SIGTERM,
            ..Limits::default()
        };
        let f = run(
            &mut sh("trap 'echo partial; exit 0' TERM; while :; do sleep 0.05; done"),
            &limits,
            |_| {},
        )
        .unwrap();
        assert_eq!(f.cut, Some(Cut::TimedOut));
        assert_eq!(f.status.code(), Some(0));
        assert_eq!(f.line("partial"), Some("partial"));
    }

    #[test]
    fn the_stop_flag_ends_it() {
        let stop = AtomicBool::new(true);
        let limits = Limits {
            stop: Some(&stop),
            ..Limits::default()
        };
        let f = run(&mut sh("exec sleep 30"), &limits, |_| {}).unwrap();
        assert_eq!(f.cut, Some(Cut::Stopped));
    }

    #[test]
    fn a_missing_program_is_an_error() {
        let e = run(
            &mut Command::new("/nonexistent/farmem-test"),
            &Limits::default(),
            |_| {},
        )
        .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }
}
