//! What the tests of real programs share (`real_programs.rs` and others):
//! the suite's lock, process groups killed on drop, deadlines, free ports,
//! clients, and reading `--stats`. A test skips (or, under CI, fails) only
//! when its Debian program is not installed.

use super::*;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const PYTHON: &str = "/usr/bin/python3";

/// One heavy test at a time, in the whole system-test binary (the machine
/// has 2 CPUs, and the harness runs tests of every area side by side).
/// Every test that starts `farmem run`, a memory server or a real program,
/// measures time, or touches what the machine shares (swap, zram, cgroups,
/// network namespaces, packages, Slurm, Podman) holds it while it runs.
/// Not reentrant: take it once per test, at its top.
pub static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// True if every program is installed; otherwise prints why the test skips.
pub fn installed(test: &str, programs: &[&str]) -> bool {
    let missing: Vec<&str> = programs
        .iter()
        .copied()
        .filter(|p| !Path::new(p).exists())
        .collect();
    if missing.is_empty() {
        return true;
    }
    skip(
        test,
        &format!(
            "{} not installed (Debian packages: memcached, libmemcached-tools, \
             redis-server, redis-tools, sqlite3, python3-numpy)",
            missing.join(", ")
        ),
    );
    false
}

pub fn client(name: &str) -> String {
    repo()
        .join("tests/clients")
        .join(name)
        .to_str()
        .unwrap()
        .to_string()
}

/// A directory under the system's temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(what: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "farmem-real-{what}-{}-{}",
            std::process::id(),
            now_nanos()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// A free loopback port (bound, read, released: the server binds it next).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The last `n` lines of `s` (a carriage return ends a line too), each cut
/// at 400 characters.
pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s
        .split(['\n', '\r'])
        .filter(|l| !l.trim().is_empty())
        .collect();
    let from = lines.len().saturating_sub(n);
    lines[from..]
        .iter()
        .map(|l| {
            if l.chars().count() > 400 {
                let cut: String = l.chars().take(400).collect();
                format!("{cut}…")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A process in a process group of its own, its stdout and stderr in files.
/// Dropping it kills the whole group (the program under `farmem run`
/// included) with SIGKILL and reaps the leader.
pub struct Proc {
    pub name: String,
    pub child: Child,
    pub status: Option<ExitStatus>,
    pub out: PathBuf,
    pub err: PathBuf,
    pub started: Instant,
}

impl Proc {
    pub fn spawn(name: &str, cmd: Command, dir: &Path) -> Proc {
        Proc::spawn_with_stdin(name, cmd, dir, Stdio::null())
    }

    pub fn spawn_with_stdin(name: &str, mut cmd: Command, dir: &Path, stdin: Stdio) -> Proc {
        let out = dir.join(format!("{name}.stdout"));
        let err = dir.join(format!("{name}.stderr"));
        cmd.stdin(stdin)
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .process_group(0);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"));
        Proc {
            name: name.to_string(),
            child,
            status: None,
            out,
            err,
            started: Instant::now(),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The exit status, if the process ended within `limit`.
    pub fn wait_for(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(s) = self.try_status() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().unwrap();
        }
        self.status
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.err) {
            let mut b = Vec::new();
            let _ = f.read_to_end(&mut b);
            s = String::from_utf8_lossy(&b).into_owned();
        }
        s
    }

    /// What went on, for a failure message: status, and the tails of its
    /// stdout and stderr.
    pub fn report(&mut self) -> String {
        let st = match self.try_status() {
            Some(s) => describe(s),
            None => format!(
                "still running after {:.1} s",
                self.started.elapsed().as_secs_f64()
            ),
        };
        format!(
            "--- {} ({st})\n--- its stdout (tail):\n{}\n--- its stderr (tail):\n{}\n---",
            self.name,
            tail(&self.stdout(), 25),
            tail(&self.stderr(), 40)
        )
    }

    /// Run to completion within `limit` (killed with its group past it).
    pub fn finish(mut self, limit: Duration) -> Finished {
        let status = self.wait_for(limit);
        if status.is_none() {
            self.kill_group();
        }
        let report = self.report();
        let f = Finished {
            status,
            stdout: self.stdout(),
            stderr: self.stderr(),
            report: if status.is_none() {
                format!(
                    "{report}\n(killed: it ran past its limit of {} s)",
                    limit.as_secs()
                )
            } else {
                report
            },
            secs: self.started.elapsed().as_secs_f64(),
        };
        drop(self);
        f
    }

    pub fn kill_group(&mut self) {
        // SAFETY: signalling the process group this guard created.
        unsafe {
            libc::kill(-self.pid(), libc::SIGKILL);
        }
        if self.status.is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
    }

    /// The program `farmem run` started: its child process.
    /// The program farmem runs: its child other than the embedded server.
    pub fn program_pid(&self) -> Option<i32> {
        let me = self.pid();
        for e in std::fs::read_dir("/proc").ok()?.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // pid (comm) state ppid ...: comm may hold spaces and parentheses.
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                continue;
            };
            let ppid = rest
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse::<i32>().ok());
            // farmem's other child is its embedded server, `farmem serve`.
            let comm = stat.split_once(" (").and_then(|(_, r)| r.rsplit_once(')'));
            if ppid == Some(me) && comm.is_none_or(|(c, _)| c != "farmem") {
                return Some(pid);
            }
        }
        None
    }

    /// Send `sig` to the program under `farmem run` (farmem itself passes
    /// the program's status on), then wait up to `limit` for farmem to exit.
    pub fn signal_program(&mut self, sig: i32, limit: Duration) -> Option<ExitStatus> {
        if let Some(s) = self.try_status() {
            return Some(s);
        }
        let pid = self.program_pid().unwrap_or_else(|| {
            panic!(
                "no child process of farmem (pid {}) to signal\n{}",
                self.pid(),
                self.report()
            )
        });
        // SAFETY: signalling a process of the group this guard created.
        unsafe {
            libc::kill(pid, sig);
        }
        self.wait_for(limit)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // The whole group: the program may outlive farmem (or be stuck with
        // its signals blocked), and SIGKILL cannot be blocked.
        self.kill_group();
    }
}

pub struct Finished {
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    pub report: String,
    pub secs: f64,
}

impl Finished {
    pub fn ok(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }
}

pub fn describe(s: ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(sig)) => format!(
            "killed by signal {sig} ({}){}",
            signal_name(sig),
            if s.core_dumped() { ", core dumped" } else { "" }
        ),
        _ => format!("{s}"),
    }
}

pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGABRT => "SIGABRT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGKILL => "SIGKILL",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGINT => "SIGINT",
        _ => "?",
    }
}

/// `farmem run --local LOCAL --stats -- CMD...`
pub fn farmem_run(local: &str, cmd: &[&str]) -> Command {
    let shim = target_dir().join("libfarmem_preload.so");
    assert!(
        shim.exists(),
        "{} is missing: run `cargo build --release` (the whole workspace) first",
        shim.display()
    );
    let mut c = farmem();
    c.args(["run", "--local", local, "--stats", "--"]).args(cmd);
    c
}

/// Run a client (or load generator) to completion within `limit`; panics
/// with its output and the server's report unless it exits 0.
pub fn run_client(
    dir: &Path,
    name: &str,
    cmd: Command,
    limit: Duration,
    server: &mut Proc,
) -> Finished {
    let f = run_client_quiet(dir, name, cmd, limit, server);
    eprintln!(
        "{name}: {:.1} s:\n  {}",
        f.secs,
        tail(&f.stdout, 6).replace('\n', "\n  ")
    );
    f
}

pub fn run_client_quiet(
    dir: &Path,
    name: &str,
    cmd: Command,
    limit: Duration,
    server: &mut Proc,
) -> Finished {
    let f = Proc::spawn(name, cmd, dir).finish(limit);
    if !f.ok() {
        // A client fails first when the server dies under it: give a dying
        // server a moment, so that the report says how it ended.
        server.wait_for(Duration::from_secs(3));
        panic!(
            "{name} failed after {:.1} s\n{}\n{}",
            f.secs,
            f.report,
            server.report()
        );
    }
    f
}

pub fn python(args: &[&str]) -> Command {
    let mut c = Command::new(PYTHON);
    c.arg("-B").args(args);
    c
}

/// Wait until `port` accepts connections; panics (with the server's
/// report) if the server exits first or `limit` passes.
pub fn wait_port(server: &mut Proc, port: u16, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        if server.try_status().is_some() {
            panic!(
                "the server exited before listening on port {port}\n{}",
                server.report()
            );
        }
        if Instant::now() >= deadline {
            panic!(
                "the server did not listen on port {port} within {} s\n{}",
                limit.as_secs(),
                server.report()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The far-memory statistics that `--stats` prints at exit.
#[derive(Debug)]
pub struct Stats {
    pub faults: u64,
    pub fetched: u64,
    pub evicted: u64,
}

pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mul) = match s.chars().last()? {
        'K' => (&s[..s.len() - 1], 1u64 << 10),
        'M' => (&s[..s.len() - 1], 1 << 20),
        'G' => (&s[..s.len() - 1], 1 << 30),
        'T' => (&s[..s.len() - 1], 1 << 40),
        'B' => (&s[..s.len() - 1], 1),
        _ => (s, 1),
    };
    // A size a tool printed: finite and far below 2^64.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Some((num.parse::<f64>().ok()? * mul as f64) as u64)
}

pub fn stats(stderr: &str) -> Option<Stats> {
    let table = &stderr[stderr.rfind("farmem stats")?..];
    let field = |name: &str| -> Option<&str> {
        let l = table.lines().find(|l| l.trim_start().starts_with(name))?;
        Some(l.trim_start()[name.len()..].trim())
    };
    Some(Stats {
        faults: field("faults (missing / first write)")?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?,
        fetched: parse_size(field("fetched from backend")?)?,
        // "N (M while a fetch was on the wire)"
        evicted: field("evicted pages")?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?,
    })
}

/// The run printed its statistics and its pages went to and came back from
/// the memory server: far memory was really used.
pub fn assert_far_memory_used(what: &str, f_stderr: &str, report: &str) {
    let s = stats(f_stderr).unwrap_or_else(|| {
        panic!("{what}: no `farmem stats` table on stderr (--stats) at exit\n{report}")
    });
    assert!(
        s.faults > 0 && s.evicted > 0 && s.fetched > 0,
        "{what}: far memory was not used (faults {}, pages evicted {}, bytes fetched {})\n{report}",
        s.faults,
        s.evicted,
        s.fetched
    );
    eprintln!(
        "{what}: far memory used: {} faults, {} pages evicted, {} MiB fetched back",
        s.faults,
        s.evicted,
        s.fetched >> 20
    );
}

/// No line of farmem's own errors on stderr.
pub fn assert_no_farmem_error(what: &str, stderr: &str, report: &str) {
    let bad: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("farmem:"))
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: farmem reported errors: {bad:?}\n{report}"
    );
}
