//! Real programs from Debian, written by nobody here, under `farmem run` with
//! a local budget about a quarter of their footprint (or less), and their
//! results checked by clients of our own (tests/clients/, Python standard
//! library only):
//!
//! - memcached with 1 GiB of items on a 256M budget, every byte read back
//!   with multi-gets, then memcslap; SIGTERM ends it cleanly;
//! - redis-server (which links jemalloc) with 512 MiB of values on 128M,
//!   redis-benchmark, SAVE, and a restart from the dump, checked again;
//! - Python: sendmsg/recvmsg_into, socket.sendfile, readinto, os.getrandom
//!   and numpy's tofile/fromfile/memmap with buffers of 96-128 MiB on 32M;
//! - sqlite3 with a 256 MiB page cache (one malloc'd buffer, `-pagecache`)
//!   on a 32M budget: a 150 MiB table built, checked by queries that check
//!   themselves, then checked again from disk by a second process.
//!
//! Every process is started in a process group of its own and killed with
//! its group (SIGKILL) when its guard drops, also when an assertion fails;
//! every wait has a deadline. A test skips, with a message, only when its
//! Debian program is not installed. The tests take a lock so that two never
//! run at once, whatever `--test-threads` says.

mod common;
use common::*;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const PYTHON: &str = "/usr/bin/python3";

/// One heavy test at a time (the machine has 2 CPUs).
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// True if every program is installed; otherwise prints why the test skips.
fn installed(test: &str, programs: &[&str]) -> bool {
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

fn client(name: &str) -> String {
    repo()
        .join("tests/clients")
        .join(name)
        .to_str()
        .unwrap()
        .to_string()
}

/// A directory under the system's temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "farmem-real-{what}-{}-{}",
            std::process::id(),
            now_nanos()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// A free loopback port (bound, read, released: the server binds it next).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The last `n` lines of `s` (a carriage return ends a line too), each cut
/// at 400 characters.
fn tail(s: &str, n: usize) -> String {
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
struct Proc {
    name: String,
    child: Child,
    status: Option<ExitStatus>,
    out: PathBuf,
    err: PathBuf,
    started: Instant,
}

impl Proc {
    fn spawn(name: &str, cmd: Command, dir: &Path) -> Proc {
        Proc::spawn_with_stdin(name, cmd, dir, Stdio::null())
    }

    fn spawn_with_stdin(name: &str, mut cmd: Command, dir: &Path, stdin: Stdio) -> Proc {
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

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The exit status, if the process ended within `limit`.
    fn wait_for(&mut self, limit: Duration) -> Option<ExitStatus> {
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

    fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().unwrap();
        }
        self.status
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    fn stderr(&self) -> String {
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
    fn report(&mut self) -> String {
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
    fn finish(mut self, limit: Duration) -> Finished {
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

    fn kill_group(&mut self) {
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
    fn program_pid(&self) -> Option<i32> {
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
    fn signal_program(&mut self, sig: i32, limit: Duration) -> Option<ExitStatus> {
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

struct Finished {
    status: Option<ExitStatus>,
    stdout: String,
    stderr: String,
    report: String,
    secs: f64,
}

impl Finished {
    fn ok(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }
}

fn describe(s: ExitStatus) -> String {
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

fn signal_name(sig: i32) -> &'static str {
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
fn farmem_run(local: &str, cmd: &[&str]) -> Command {
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
fn run_client(
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

fn run_client_quiet(
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

fn python(args: &[&str]) -> Command {
    let mut c = Command::new(PYTHON);
    c.arg("-B").args(args);
    c
}

/// Wait until `port` accepts connections; panics (with the server's
/// report) if the server exits first or `limit` passes.
fn wait_port(server: &mut Proc, port: u16, limit: Duration) {
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
struct Stats {
    faults: u64,
    fetched: u64,
    evicted: u64,
}

fn parse_size(s: &str) -> Option<u64> {
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

fn stats(stderr: &str) -> Option<Stats> {
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
        evicted: field("evicted pages")?.parse().ok()?,
    })
}

/// The run printed its statistics and its pages went to and came back from
/// the memory server: far memory was really used.
fn assert_far_memory_used(what: &str, f_stderr: &str, report: &str) {
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
fn assert_no_farmem_error(what: &str, stderr: &str, report: &str) {
    let bad: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("farmem:"))
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: farmem reported errors: {bad:?}\n{report}"
    );
}

fn memcached_stats(
    dir: &Path,
    port: u16,
    server: &mut Proc,
) -> std::collections::HashMap<String, u64> {
    let f = run_client_quiet(
        dir,
        "memcache-stats",
        python(&[
            &client("memcache_check.py"),
            "--port",
            &port.to_string(),
            "stats",
        ]),
        Duration::from_secs(30),
        server,
    );
    f.stdout
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

#[test]
fn memcached_1g_of_items_on_256m_with_memcslap() {
    let _one = serial();
    if !installed(
        "memcached_1g_of_items_on_256m_with_memcslap",
        &["/usr/bin/memcached", "/usr/bin/memcslap", PYTHON],
    ) {
        return;
    }
    let t0 = Instant::now();
    let dir = TempDir::new("memcached");
    let port = free_port();
    let ps = port.to_string();
    // -m 2048: 1 GiB of 64-128 KiB items fills ~1.15 GiB of slab pages
    // (1 MiB mallocs, each far); memcached takes them as it needs them, and
    // the headroom keeps it from evicting. -v logs its write errors.
    let mut mc = Proc::spawn(
        "farmem-run-memcached",
        farmem_run(
            "256M",
            &[
                "/usr/bin/memcached",
                "-u",
                "root",
                "-l",
                "127.0.0.1",
                "-p",
                &ps,
                "-U",
                "0",
                "-t",
                "2",
                "-m",
                "2048",
                "-v",
            ],
        ),
        dir.path(),
    );
    wait_port(&mut mc, port, Duration::from_secs(30));

    let f = run_client(
        dir.path(),
        "memcache-load-verify",
        python(&[
            &client("memcache_check.py"),
            "--port",
            &ps,
            "--timeout",
            "30",
            "load-verify",
            "--total-mib",
            "1024",
            "--batch",
            "20",
        ]),
        Duration::from_secs(120),
        &mut mc,
    );
    assert!(f.stdout.contains("memcache check OK"), "{}", f.report);
    let before = memcached_stats(dir.path(), port, &mut mc);

    // memcslap exits 0 even when it cannot connect: its output and the
    // server's counters are checked too.
    let n = 5000u64;
    for test in ["set", "get", "mget"] {
        let mut c = Command::new("/usr/bin/memcslap");
        c.arg(format!("--servers=127.0.0.1:{port}"))
            .arg("--concurrency=4")
            .arg(format!("--execute-number={n}"))
            .arg(format!("--test={test}"));
        let f = run_client(
            dir.path(),
            &format!("memcslap-{test}"),
            c,
            Duration::from_secs(45),
            &mut mc,
        );
        let all = format!("{}\n{}", f.stdout, f.stderr);
        let lower = all.to_lowercase();
        assert!(
            !lower.contains("error") && !lower.contains("fail"),
            "memcslap --test={test} reported errors:\n{}\n{}",
            f.report,
            mc.report()
        );
        let done = regex::Regex::new(&format!(r"Time to {test}\s+(\d+) keys by\s+4 threads"))
            .unwrap()
            .captures(&all)
            .and_then(|c| c[1].parse::<u64>().ok());
        assert!(
            done == Some(4 * n),
            "memcslap --test={test}: expected {} keys done by 4 threads, got {done:?}:\n{}\n{}",
            4 * n,
            f.report,
            mc.report()
        );
    }
    let after = memcached_stats(dir.path(), port, &mut mc);
    let d = |k: &str| {
        let a = after.get(k).copied().unwrap_or(0);
        a.saturating_sub(before.get(k).copied().unwrap_or(0))
    };
    assert!(
        d("get_hits") >= 8 * n && after.get("get_misses") == Some(&0) && d("cmd_set") >= 6 * n,
        "memcslap's gets must all hit: get_hits +{}, get_misses {:?}, cmd_set +{}\n{}",
        d("get_hits"),
        after.get("get_misses"),
        d("cmd_set"),
        mc.report()
    );
    assert_eq!(
        after.get("evictions"),
        Some(&0),
        "memcached evicted items\n{}",
        mc.report()
    );

    // memcached 1.6 handles SIGTERM: it stops its loop and exits 0 (older
    // versions die of the signal, which farmem passes on). Either is clean;
    // any other signal (SIGSEGV, SIGBUS, SIGABRT) or status is not.
    let st = mc.signal_program(libc::SIGTERM, Duration::from_secs(30));
    let report = mc.report();
    let st =
        st.unwrap_or_else(|| panic!("memcached did not exit within 30 s of SIGTERM\n{report}"));
    assert!(
        st.code() == Some(0) || st.signal() == Some(libc::SIGTERM),
        "memcached after SIGTERM: {}, want exit 0 or SIGTERM\n{report}",
        describe(st)
    );
    let err = mc.stderr();
    assert_no_farmem_error("memcached", &err, &report);
    assert_far_memory_used("memcached", &err, &report);
    eprintln!("memcached test: {:.1} s", t0.elapsed().as_secs_f64());
}

fn start_redis(dir: &Path, name: &str, port: u16) -> Proc {
    let ps = port.to_string();
    let mut r = Proc::spawn(
        name,
        farmem_run(
            "128M",
            &[
                "/usr/bin/redis-server",
                "--port",
                &ps,
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                dir.to_str().unwrap(),
                "--dbfilename",
                "dump.rdb",
            ],
        ),
        dir,
    );
    wait_port(&mut r, port, Duration::from_secs(30));
    // PING until +PONG: a restarted server answers -LOADING while it reads
    // its dump.
    run_client(
        dir,
        &format!("{name}-wait"),
        python(&[
            &client("redis_check.py"),
            "--port",
            &ps,
            "wait",
            "--seconds",
            "60",
        ]),
        Duration::from_secs(70),
        &mut r,
    );
    r
}

#[test]
fn redis_512m_on_128m_benchmark_save_and_restart() {
    let _one = serial();
    if !installed(
        "redis_512m_on_128m_benchmark_save_and_restart",
        &["/usr/bin/redis-server", "/usr/bin/redis-benchmark", PYTHON],
    ) {
        return;
    }
    let t0 = Instant::now();
    let dir = TempDir::new("redis");
    let port = free_port();
    let ps = port.to_string();
    let keys = ["--keys", "8192", "--size", "65472"]; // 8192 x (64 KiB - 64) = 511.5 MiB
    let mut r = start_redis(dir.path(), "farmem-run-redis", port);

    let mut args = vec![
        client("redis_check.py"),
        "--port".into(),
        ps.clone(),
        "load".into(),
    ];
    args.extend(keys.iter().map(|s| s.to_string()));
    let argv: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    run_client(
        dir.path(),
        "redis-load",
        python(&argv),
        Duration::from_secs(120),
        &mut r,
    );
    let verify_argv = |p: &str| -> Vec<String> {
        let mut v = vec![
            client("redis_check.py"),
            "--port".into(),
            p.to_string(),
            "verify".into(),
        ];
        v.extend(keys.iter().map(|s| s.to_string()));
        v
    };
    let v = verify_argv(&ps);
    let f = run_client(
        dir.path(),
        "redis-verify",
        python(&v.iter().map(|s| s.as_str()).collect::<Vec<_>>()),
        Duration::from_secs(120),
        &mut r,
    );
    assert!(f.stdout.contains("redis check OK"), "{}", f.report);

    let mut c = Command::new("/usr/bin/redis-benchmark");
    c.args([
        "-h",
        "127.0.0.1",
        "-p",
        &ps,
        "-n",
        "20000",
        "-q",
        "-t",
        "set,get,lpush,lpop",
        "-d",
        "1024",
    ]);
    let f = run_client(
        dir.path(),
        "redis-benchmark",
        c,
        Duration::from_secs(90),
        &mut r,
    );
    let all = format!("{}\n{}", f.stdout, f.stderr);
    for t in ["SET", "GET", "LPUSH", "LPOP"] {
        assert!(
            all.contains(&format!("{t}: ")) && all.contains("requests per second"),
            "redis-benchmark did not report {t}:\n{}\n{}",
            f.report,
            r.report()
        );
    }
    assert!(
        !all.contains("ERR") && !all.to_lowercase().contains("error"),
        "redis-benchmark reported errors:\n{}\n{}",
        f.report,
        r.report()
    );

    // SAVE writes the values from far memory to the dump; SHUTDOWN NOSAVE
    // exits 0 through exit(), so the statistics get printed.
    run_client(
        dir.path(),
        "redis-save-shutdown",
        python(&[
            &client("redis_check.py"),
            "--port",
            &ps,
            "--timeout",
            "90",
            "save-shutdown",
        ]),
        Duration::from_secs(120),
        &mut r,
    );
    let st = r.wait_for(Duration::from_secs(30));
    let report = r.report();
    let st =
        st.unwrap_or_else(|| panic!("redis-server did not exit within 30 s of SHUTDOWN\n{report}"));
    assert_eq!(
        st.code(),
        Some(0),
        "redis-server after SHUTDOWN NOSAVE: {}\n{report}",
        describe(st)
    );
    let err = r.stderr();
    assert_no_farmem_error("redis-server", &err, &report);
    assert_far_memory_used("redis-server", &err, &report);
    drop(r);
    let dump = dir.path().join("dump.rdb");
    let len = std::fs::metadata(&dump).map(|m| m.len()).unwrap_or(0);
    assert!(len > 1 << 20, "dump.rdb is {len} bytes after SAVE");

    // A second server loads the dump into far memory; every value again.
    let port2 = free_port();
    let ps2 = port2.to_string();
    let mut r2 = start_redis(dir.path(), "farmem-run-redis-restarted", port2);
    let v = verify_argv(&ps2);
    let f = run_client(
        dir.path(),
        "redis-verify-after-restart",
        python(&v.iter().map(|s| s.as_str()).collect::<Vec<_>>()),
        Duration::from_secs(120),
        &mut r2,
    );
    assert!(f.stdout.contains("redis check OK"), "{}", f.report);
    // redis-server shuts down on SIGTERM and exits 0.
    let st = r2.signal_program(libc::SIGTERM, Duration::from_secs(30));
    let report = r2.report();
    let st =
        st.unwrap_or_else(|| panic!("redis-server did not exit within 30 s of SIGTERM\n{report}"));
    assert!(
        st.code() == Some(0) || st.signal() == Some(libc::SIGTERM),
        "restarted redis-server after SIGTERM: {}\n{report}",
        describe(st)
    );
    let err = r2.stderr();
    assert_no_farmem_error("restarted redis-server", &err, &report);
    assert_far_memory_used("restarted redis-server", &err, &report);
    eprintln!("redis test: {:.1} s", t0.elapsed().as_secs_f64());
}

#[test]
fn python_socket_file_getrandom_numpy_io_on_32m() {
    let _one = serial();
    if !installed("python_socket_file_getrandom_numpy_io_on_32m", &[PYTHON]) {
        return;
    }
    let numpy = Command::new(PYTHON)
        .args(["-c", "import numpy"])
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !numpy {
        skip(
            "python_socket_file_getrandom_numpy_io_on_32m",
            "python3-numpy is not installed",
        );
        return;
    }
    let dir = TempDir::new("python");
    let script = client("python_io.py");
    let mut cmd = farmem_run("32M", &[PYTHON, "-B", &script, "--require-far"]);
    cmd.env("TMPDIR", dir.path());
    let f = Proc::spawn("farmem-run-python-io", cmd, dir.path()).finish(Duration::from_secs(150));
    eprintln!("python io: {:.1} s\n{}", f.secs, tail(&f.stdout, 30));
    let summary = f
        .stdout
        .lines()
        .find(|l| l.starts_with("python io FAILED"))
        .unwrap_or("");
    assert!(
        f.ok() && f.stdout.contains("python io OK"),
        "python io under farmem run failed: {summary}\n{}",
        f.report
    );
    assert_no_farmem_error("python io", &f.stderr, &f.report);
    assert_far_memory_used("python io", &f.stderr, &f.report);
}

const SQLITE_ROWS: u64 = 150_000;

/// Builds a ~150 MiB table in one transaction, so that all of it sits dirty
/// in the page cache (far) until COMMIT writes it out; then queries that
/// check themselves: each result line ends in `|1`.
const SQLITE_BUILD: &str = "
PRAGMA page_size = 4096;
PRAGMA cache_size = -262144;
PRAGMA journal_mode = OFF;
PRAGMA synchronous = OFF;
CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER NOT NULL, v INTEGER NOT NULL, pad TEXT NOT NULL);
BEGIN;
WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i + 1 < 150000)
INSERT INTO t SELECT i, (i * 7919) % 150000, (i * i) % 1000003,
  printf('%08d', i) || printf('%.*c', 900 + i % 37, char(65 + i % 26)) FROM s;
COMMIT;
SELECT 'rows', count(*), count(*) = 150000 FROM t;
SELECT 'sum k', sum(k), sum(k) = 150000 * 149999 / 2 FROM t;
SELECT 'sum v: table scan = computed', (SELECT sum(v) FROM t),
  (SELECT sum(v) FROM t) = (WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i + 1 < 150000)
                            SELECT sum((i * i) % 1000003) FROM s);
SELECT 'group by pad (a 150 MiB sort)', count(*), count(*) = 150000 AND sum(sv) = (SELECT sum(v) FROM t)
  FROM (SELECT pad, sum(v) AS sv FROM t GROUP BY pad);
CREATE INDEX t_k ON t(k);
";

/// Checks run after the build and again, cold, by a second process.
const SQLITE_CHECK: &str = "
PRAGMA cache_size = -262144;
SELECT 'rows', count(*), count(*) = 150000 FROM t;
SELECT 'sum k', sum(k), sum(k) = 150000 * 149999 / 2 FROM t;
SELECT 'payload of every row', count(*), count(*) = 0 FROM t
  WHERE pad != printf('%08d', id) || printf('%.*c', 900 + id % 37, char(65 + id % 26));
WITH RECURSIVE q(j) AS (SELECT 0 UNION ALL SELECT j + 97 FROM q WHERE j + 97 < 150000)
SELECT 'index lookup every 97th k', count(*), count(*) = (150000 + 96) / 97
  AND sum(t.id IS NOT NULL AND (t.id * 7919) % 150000 = q.j) = count(*)
  FROM q LEFT JOIN t ON t.k = q.j;
PRAGMA integrity_check;
";

/// Runs sqlite3 under farmem with a page cache of 65536 slots of 4400
/// bytes (one 275 MiB malloc, far) and checks its output.
fn sqlite_run(dir: &Path, name: &str, sql: &str, want_checks: usize) -> f64 {
    let db = dir.join("t.db");
    let sql_file = dir.join(format!("{name}.sql"));
    std::fs::write(&sql_file, sql).unwrap();
    let mut cmd = farmem_run(
        "32M",
        &[
            "/usr/bin/sqlite3",
            "-bail",
            "-pagecache",
            "4400",
            "65536",
            "-stats",
            db.to_str().unwrap(),
        ],
    );
    cmd.env("TMPDIR", dir);
    let stdin = Stdio::from(std::fs::File::open(&sql_file).unwrap());
    let f = Proc::spawn_with_stdin(name, cmd, dir, stdin).finish(Duration::from_secs(90));
    assert!(
        f.ok(),
        "sqlite3 ({name}) under farmem run failed\n{}",
        f.report
    );
    // -stats prints `Name: value` lines, never with a `|`; the checks' lines
    // have them, and integrity_check says `ok`.
    let results: Vec<&str> = f
        .stdout
        .lines()
        .filter(|l| l.contains('|') || *l == "ok")
        .collect();
    let checks: Vec<&&str> = results.iter().filter(|l| l.contains('|')).collect();
    assert!(
        checks.len() == want_checks && checks.iter().all(|l| l.ends_with("|1")),
        "sqlite3 ({name}): every check must end in |1 ({want_checks} of them): {results:?}\n{}",
        f.report
    );
    if sql.contains("integrity_check") {
        assert!(
            results.contains(&"ok"),
            "sqlite3 ({name}): PRAGMA integrity_check did not say ok: {results:?}\n{}",
            f.report
        );
    }
    // The page cache really held the table, in the slots of the one far
    // buffer: -stats prints `Name: value (max M) unit` after each statement.
    let max_of = |name: &str| -> u64 {
        f.stdout
            .lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| {
                l.split("(max ")
                    .nth(1)?
                    .split(')')
                    .next()?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .max()
            .unwrap_or(0)
    };
    let pages = max_of("Number of Pcache Pages Used:");
    let overflow = max_of("Number of Pcache Overflow Bytes:");
    assert!(
        pages * 4096 > 128 << 20 && overflow < 4 << 20,
        "sqlite3 ({name}): the -pagecache buffer held only {pages} pages \
         ({overflow} bytes of pages overflowed to the heap)\n{}",
        f.report
    );
    eprintln!(
        "sqlite3 {name}: {:.1} s, {results:?}, page cache up to {pages} pages ({} MiB)",
        f.secs,
        (pages * 4096) >> 20
    );
    assert_no_farmem_error(name, &f.stderr, &f.report);
    assert_far_memory_used(name, &f.stderr, &f.report);
    f.secs
}

#[test]
fn sqlite3_256m_page_cache_on_32m() {
    let _one = serial();
    if !installed("sqlite3_256m_page_cache_on_32m", &["/usr/bin/sqlite3"]) {
        return;
    }
    let dir = TempDir::new("sqlite");
    let build = format!("{SQLITE_BUILD}{SQLITE_CHECK}");
    sqlite_run(dir.path(), "sqlite-build", &build, 8);
    let db_len = std::fs::metadata(dir.path().join("t.db")).unwrap().len();
    assert!(
        db_len > SQLITE_ROWS * 900,
        "the database is only {db_len} bytes"
    );
    sqlite_run(dir.path(), "sqlite-check-cold", SQLITE_CHECK, 4);
}
