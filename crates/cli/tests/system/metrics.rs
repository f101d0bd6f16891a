//! `farmem serve --metrics`: a real server scraped while a real program
//! pages through it; the address rules and the errors.

use crate::common::programs::serial;
use crate::common::*;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};

/// `farmem serve` with `args`; its address and its metrics address, from
/// the banner lines.
fn serve(args: &[&str]) -> (Child, String, String) {
    let mut child = farmem()
        .args(["serve", "--listen", "127.0.0.1:0", "--capacity", "256M"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let (mut l1, mut l2) = (String::new(), String::new());
    out.read_line(&mut l1).unwrap();
    out.read_line(&mut l2).unwrap();
    let metrics = l2
        .trim()
        .strip_prefix("farmem serve: metrics on http://")
        .and_then(|r| r.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("no metrics line: {l2:?}"))
        .to_string();
    // Keep reading its stdout so that it never blocks on a full pipe.
    std::thread::spawn(move || for _ in out.lines() {});
    (child, banner_addr(&l1), metrics)
}

fn scrape(at: &str) -> HashMap<String, f64> {
    let mut s = TcpStream::connect(at).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {at}\r\n\r\n").unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
    assert!(r.contains("Content-Type: text/plain; version=0.0.4"), "{r}");
    r.split_once("\r\n\r\n")
        .unwrap()
        .1
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

#[test]
fn a_server_is_scraped_while_a_program_pages_through_it() {
    let _g = serial();
    let (mut server, addr, metrics) = serve(&["--metrics", "127.0.0.1:0"]);
    let exe = build_plain(
        "gcc",
        "tests/programs/page_loop.c",
        "page_loop",
        &["-Wextra"],
    );
    let mut prog = farmem()
        .args(["run", "--local", "16M", "--"])
        .arg(exe)
        .arg("2")
        .env("FARMEM_SERVERS", &addr)
        .env("FARMEM_TRANSPORT", "socket")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let during = scrape(&metrics);
    assert!(prog.wait().unwrap().success());
    let after = scrape(&metrics);
    let reads = |m: &HashMap<String, f64>| m["farmem_requests_total{op=\"read\"}"];
    // The 64 MiB array is written out (16K pages) and read back at random.
    assert!(during["farmem_stored_pages"] >= 1000.0, "{during:?}");
    assert!(during["farmem_sessions"] >= 1.0, "{during:?}");
    assert!(reads(&during) > 0.0 && reads(&after) > reads(&during));
    assert!(after["farmem_sent_bytes_total"] >= reads(&after) * 4096.0);
    assert_eq!(after["farmem_sessions"], 0.0, "the program's session ended");
    assert_eq!(after["farmem_stored_pages"], 0.0);
    let _ = server.kill();
    let _ = server.wait();
}

#[test]
fn a_client_without_the_secret_is_counted_as_refused() {
    let _g = serial();
    let dir = std::env::temp_dir().join(format!("farmem-metrics-secret-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("secret");
    new_secret(&secret);
    let (mut server, addr, metrics) =
        serve(&["--secret-file", secret.to_str().unwrap(), "--metrics", "0"]);
    // A Hello with no handshake first: refused.
    hello_without_secret(&addr);
    let m = scrape(&metrics);
    assert_eq!(m["farmem_refusals_total{reason=\"auth\"}"], 1.0, "{m:?}");
    assert_eq!(m["farmem_errors_total{kind=\"auth_required\"}"], 1.0);
    assert_eq!(m["farmem_sessions"], 0.0);
    let _ = server.kill();
    let _ = server.wait();
    std::fs::remove_dir_all(&dir).unwrap();
}

fn refused(args: &[&str]) -> String {
    let o = farmem()
        .args(["serve", "--listen", "127.0.0.1:0", "--capacity", "64M"])
        .args(args)
        .output()
        .unwrap();
    assert!(!o.status.success(), "{args:?} was not refused");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn bad_metrics_addresses_are_refused_by_name() {
    // Reachable from other machines, without a secret: refused.
    let e = refused(&["--metrics", "0.0.0.0:0"]);
    assert!(e.contains("refusing to serve metrics on 0.0.0.0:0"), "{e}");
    // A port in use.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let e = refused(&["--metrics", &port]);
    assert!(
        e.contains(&format!("cannot serve metrics on 127.0.0.1:{port}"))
            && e.contains("port in use"),
        "{e}"
    );
    for bad in ["unix:/tmp/x", "nonsense", "70000"] {
        let e = refused(&["--metrics", bad]);
        assert!(e.contains("--metrics"), "{bad}: {e}");
    }
}

/// GET /metrics with an `Authorization` header `auth`: the status line.
fn status_with(at: &str, auth: Option<&str>) -> String {
    let mut s = TcpStream::connect(at).unwrap();
    let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {at}\r\n{auth}\r\n").unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    r.lines().next().unwrap_or("").to_string()
}

#[test]
fn a_reachable_metrics_address_answers_only_the_printed_token() {
    // This machine's address other than loopback (routing finds it;
    // nothing is sent).
    let ip = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|u| u.connect("192.0.2.254:9").and_then(|()| u.local_addr()))
        .map(|a| a.ip())
        .ok()
        .filter(|ip| !ip.is_loopback() && !ip.is_unspecified());
    let Some(ip) = ip else {
        skip(
            "a_reachable_metrics_address_answers_only_the_printed_token",
            "this machine has no address other than loopback",
        );
        return;
    };
    let _g = serial();
    let dir = std::env::temp_dir().join(format!("farmem-metrics-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("secret");
    new_secret(&secret);
    let secret = secret.to_str().unwrap();
    let o = farmem()
        .args(["serve", "--print-metrics-token", "--secret-file", secret])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let token = String::from_utf8(o.stdout).unwrap().trim().to_string();
    assert_eq!(token.len(), 64, "{token}");
    let (mut server, _, metrics) =
        serve(&["--secret-file", secret, "--metrics", &format!("{ip}:0")]);
    assert_eq!(status_with(&metrics, None), "HTTP/1.1 401 Unauthorized");
    let wrong = format!("Bearer {}", "f".repeat(64));
    assert_eq!(
        status_with(&metrics, Some(&wrong)),
        "HTTP/1.1 401 Unauthorized"
    );
    let right = format!("Bearer {token}");
    assert_eq!(status_with(&metrics, Some(&right)), "HTTP/1.1 200 OK");
    let _ = server.kill();
    let _ = server.wait();
    // Without a secret there is no token to print.
    let o = farmem()
        .args(["serve", "--print-metrics-token", "--secret-file"])
        .arg(dir.join("none"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    std::fs::remove_dir_all(&dir).unwrap();
}
