//! Erasure coding (`FARMEM_REDUNDANCY=ec:K+M`) against real servers and
//! real `kill -9`: six servers at ec:4+2 hold about 1.5 times the data and
//! lose two with every byte right; with a spare server, a lost server's
//! places are rebuilt and two more losses lose nothing; a server that sends
//! bad pages is taken as lost and rebuilt around.

use crate::common::programs::serial;
use crate::common::proxy::{Misbehave, Proxy};
use crate::common::*;
use crate::replicas::{finish, some_moment, start_integrity};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The pages server `addr` holds, from its Stats reply.
fn used_pages(addr: &str) -> u64 {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(&farmem_wire::Frame::Stats.encode(1)).unwrap();
    let mut head = [0u8; farmem_wire::HEADER_LEN];
    s.read_exact(&mut head).unwrap();
    let h = farmem_wire::Header::decode(&head).unwrap();
    let mut payload = vec![0u8; h.len as usize];
    s.read_exact(&mut payload).unwrap();
    match farmem_wire::decode_reply(&h, &payload).unwrap() {
        farmem_wire::Reply::StatsOk(st) => st.used_pages,
        other => panic!("{addr} answered Stats with {other:?}"),
    }
}

fn servers(n: usize) -> Vec<Serve> {
    (0..n).map(|_| Serve::start("512M")).collect()
}

fn addrs(servers: &[Serve]) -> Vec<String> {
    servers.iter().map(|s| s.addr.clone()).collect()
}

/// hold_far (SIZE_MB at a 1M budget) over `servers` at ec:4+2 with `env`:
/// once the region is written, `at_hold` runs (it may look at or kill
/// servers); then every byte is checked, half the pages rewritten and
/// checked again. The program's output, stdout and stderr.
fn hold_at_ec_4_2(
    servers: &[String],
    size_mb: u32,
    env: &[(&str, &str)],
    at_hold: impl FnOnce(),
) -> (std::process::ExitStatus, String, String) {
    let mut child = Command::new(build_c("hold_far"))
        .arg(size_mb.to_string())
        .env("FARMEM_LOCAL", "1M")
        .env("FARMEM_SERVERS", servers.join(","))
        .env("FARMEM_REDUNDANCY", "ec:4+2")
        .env("FARMEM_STATS", "1")
        .env("FARMEM_TIMEOUT_MS", "1000")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    if line.starts_with("written pages=") {
        at_hold();
    }
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(b"go\n");
    drop(stdin);
    let mut rest = line;
    out.read_to_string(&mut rest).unwrap();
    let o = child.wait_with_output().unwrap();
    (
        o.status,
        rest,
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Six servers at ec:4+2: a 64 MiB region written and held; the servers
/// together hold 1.5 times it (the issue allows 1.6); two of them killed;
/// then every byte is checked, half the pages rewritten (rows with two
/// places lost) and checked again.
#[test]
fn six_servers_at_ec_4_2_hold_one_and_a_half_times_the_data_and_lose_two() {
    let _g = serial();
    let mut servers = servers(6);
    let list = addrs(&servers);
    let mut ratio = 0.0;
    // A server counts the pages stored over sockets; over memory files it
    // counts whole granted chunks (64 MiB each, sparse).
    let (status, out, err) = hold_at_ec_4_2(&list, 64, &[("FARMEM_TRANSPORT", "socket")], || {
        // Every page but the 256 the budget keeps is on the servers, with
        // its row's parity.
        let held: u64 = list.iter().map(|a| used_pages(a)).sum();
        ratio = held as f64 / 16384.0;
        servers[1].kill();
        servers[4].kill();
    });
    assert!(out.starts_with("written pages=16384"), "{out}\n{err}");
    assert!(
        (1.45..=1.6).contains(&ratio),
        "the servers hold {ratio:.3}x the 16384 pages written"
    );
    assert!(
        status.success() && out.contains("mismatches=0"),
        "{out}\n{err}"
    );
    for a in [&list[1], &list[4]] {
        assert!(
            err.contains(&format!("memory server {a} is down"))
                && err.contains("decoded from their rows' other pages"),
            "{err}"
        );
    }
    assert!(
        err.contains("erasure coding") && err.contains("ec:4+2"),
        "{err}"
    );
}

/// The same over UCX (its shared-memory test path on one host): the
/// parity pages' chunks are granted where first written, and two servers
/// lost at the hold lose nothing.
#[test]
fn at_ec_4_2_over_ucx_two_servers_lost_lose_nothing() {
    if farmem_sys::ucx::available().is_err() {
        return skip(
            "at_ec_4_2_over_ucx_two_servers_lost_lose_nothing",
            "UCX is not installed",
        );
    }
    let _g = serial();
    let dir = std::env::temp_dir().join(format!("farmem-ec-ucx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("secret");
    new_secret(&secret);
    let mut servers: Vec<Serve> = (0..6)
        .map(|_| Serve::start_with_secret("512M", &secret, &[]))
        .collect();
    let list = addrs(&servers);
    let env = [
        ("FARMEM_TRANSPORT", "ucx"),
        ("FARMEM_SECRET_FILE", secret.to_str().unwrap()),
    ];
    let (status, out, err) = hold_at_ec_4_2(&list, 32, &env, || {
        servers[0].kill();
        servers[5].kill();
    });
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        status.success() && out.contains("mismatches=0") && err.contains("ucx"),
        "{out}\n{err}"
    );
}

/// Two servers of six killed at random moments while the OpenMP integrity
/// program runs at 8x: ALL OK.
#[test]
fn two_servers_killed_mid_run_lose_no_byte_at_ec_4_2() {
    let _g = serial();
    let mut servers = servers(6);
    let (child, _) = start_integrity(&addrs(&servers), "ec:4+2");
    std::thread::sleep(some_moment(800));
    servers[0].kill();
    std::thread::sleep(some_moment(800));
    servers[3].kill();
    let out = finish(child);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("mismatches=0"),
        "{stdout}\n{stderr}"
    );
}

/// Seven servers at ec:4+2 (one spare for each row): one killed, its
/// places rebuilt on the others while the program runs, then two more
/// killed. Without the rebuild, the third loss would stop the program.
#[test]
fn after_a_rebuild_two_more_servers_killed_lose_no_byte() {
    let _g = serial();
    let mut servers = servers(7);
    let (mut child, board) = start_integrity(&addrs(&servers), "ec:4+2");
    std::thread::sleep(some_moment(600));
    servers[2].kill();
    let reader = farmem_runtime::publish::Reader::open(&board).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let repaired = loop {
        let r = reader.sample().repair;
        if r.passes > 0 && !r.running {
            break r;
        }
        assert!(Instant::now() < deadline, "no repair within 60 s: {r:?}");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(
        child.try_wait().unwrap().is_none(),
        "integrity_omp ended before the rebuild was done, so the later losses test nothing"
    );
    assert_eq!(repaired.pages_short, 0, "{repaired:?}");
    assert!(repaired.pages_repaired > 0, "{repaired:?}");
    servers[5].kill();
    servers[6].kill();
    let out = finish(child);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("mismatches=0"),
        "{stdout}\n{stderr}"
    );
}

/// A server behind a proxy that flips a bit in one page it sends: the
/// page (or the place of a row that a write-back reads) fails its check,
/// the server is taken as lost, its places are rebuilt on the spare, and
/// the program ends with every byte right.
#[test]
fn a_corrupting_server_in_a_coded_session_is_rebuilt_around() {
    let _g = serial();
    let servers = servers(7);
    let Proxy {
        addr: proxy,
        fired: flipped,
    } = Proxy::start(&servers[6].addr, Misbehave::FlipBit, 40);
    let mut list = addrs(&servers[..6]);
    list.push(proxy.clone());
    let o = Command::new(build_c("integrity_omp"))
        .arg("32")
        .env("FARMEM_LOCAL", "4M")
        .env("FARMEM_SERVERS", list.join(","))
        .env("FARMEM_REDUNDANCY", "ec:4+2")
        .env("FARMEM_STATS", "1")
        // The proxy corrupts pages on the socket; one-sided pages bypass it.
        .env("FARMEM_TRANSPORT", "socket")
        .env("OMP_NUM_THREADS", "2")
        .output()
        .unwrap();
    assert_eq!(flipped.load(Ordering::SeqCst), 1, "the proxy flipped a bit");
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && out.contains("mismatches=0"),
        "{out}\n{err}"
    );
    assert!(
        err.contains(&format!(
            "memory server {proxy} returned a page with the wrong contents"
        )) && err.contains("every page has all its copies again"),
        "{err}"
    );
}

/// Settings that cannot work say what is wrong and what to do.
#[test]
fn bad_erasure_settings_are_refused_with_the_fix() {
    let _g = serial();
    let servers = servers(3);
    let list = addrs(&servers).join(",");
    for (value, says) in [
        (
            "ec:4+2",
            "puts each row's 6 pages on as many servers, and 3 are given",
        ),
        ("ec:1+2", "K: must be in 2..=12"),
        ("ec:4+9", "M: must be in 1..=4"),
        ("ec:4", "expected replicas:N"),
        ("raid6", "expected replicas:N"),
    ] {
        let o = Command::new(build_c("integrity_omp"))
            .arg("8")
            .env("FARMEM_LOCAL", "4M")
            .env("FARMEM_SERVERS", &list)
            .env("FARMEM_REDUNDANCY", value)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{value} was taken");
        assert!(
            err.contains("FARMEM_REDUNDANCY") && err.contains(says),
            "{value}: {err}"
        );
    }
    let o = Command::new(build_c("integrity_omp"))
        .arg("8")
        .env("FARMEM_LOCAL", "4M")
        .env("FARMEM_SERVERS", &list)
        .env("FARMEM_REDUNDANCY", "ec:2+1")
        .env("FARMEM_REPLICAS", "2")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("set one of them"),
        "{err}"
    );
}
