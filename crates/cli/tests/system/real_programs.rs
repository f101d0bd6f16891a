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

use crate::common::programs::*;
use crate::common::*;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
