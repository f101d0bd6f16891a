//! `--metrics` against hostile scrapers (issue 38): a client that trickles
//! its request cannot hold the endpoint, a reachable endpoint answers only
//! the bearer token, and the page names no client unless asked to.

mod common;
use common::*;
use farmem_server::{
    metrics_token, MetricsAccess, MetricsEndpoint, Secret, Server, ServerConfig, ServerHandle,
    SCRAPE_DEADLINE,
};
use farmem_wire::PAGE_SIZE;
use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

fn server_with(metrics_on: &str, access: MetricsAccess) -> (ServerHandle, String) {
    let mut cfg = ServerConfig::new(
        "127.0.0.1:0".parse::<std::net::SocketAddr>().unwrap(),
        1024 * PAGE_SIZE as u64,
    );
    cfg.spin_ns = 10_000;
    let server = Server::bind(cfg).unwrap();
    let m = MetricsEndpoint::bind(metrics_on)
        .unwrap()
        .with_access(access);
    let at = m.local_addr().unwrap().to_string();
    m.serve(&server).unwrap();
    (server.spawn().unwrap(), at)
}

/// Send `req` and read the whole reply: its status line and body.
fn ask(at: &str, req: &str) -> (String, String) {
    let mut s = TcpStream::connect(at).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(req.as_bytes()).unwrap();
    let mut r = String::new();
    if let Err(e) = s.read_to_string(&mut r) {
        // A refusal may close before the request was read: a reset.
        return (format!("error: {e}"), String::new());
    }
    let (head, body) = r.split_once("\r\n\r\n").unwrap_or((&r, ""));
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

fn get(at: &str, auth: Option<&str>) -> (String, String) {
    let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    ask(
        at,
        &format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{auth}\r\n"),
    )
}

/// This machine's address on its first interface other than loopback
/// (found by routing, nothing is sent), if it has one.
fn external_ip() -> Option<IpAddr> {
    let u = UdpSocket::bind("0.0.0.0:0").ok()?;
    u.connect("192.0.2.254:9").ok()?;
    let ip = u.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

#[test]
fn a_slow_client_does_not_delay_another_scrape() {
    let (_h, at) = server_with("127.0.0.1:0", MetricsAccess::default());
    // One byte a second, never finishing its request.
    let mut slow = TcpStream::connect(&at).unwrap();
    let started = Instant::now();
    let trickle = std::thread::spawn(move || {
        let mut closed_after = None;
        for b in b"GET /metrics HTTP/1.1\r\nHost: x\r\n".iter().take(8) {
            if slow.write_all(&[*b]).is_err() {
                closed_after = Some(started.elapsed());
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        // The server closed it at its deadline: EOF (or a reset).
        slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 64];
        match slow.read(&mut buf) {
            Ok(0) | Err(_) => closed_after.or(Some(started.elapsed())),
            Ok(_) => None,
        }
    });
    std::thread::sleep(Duration::from_millis(1500));
    // Meanwhile, a scrape is answered at once.
    for _ in 0..3 {
        let t = Instant::now();
        let (status, body) = get(&at, None);
        assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
        assert!(body.contains("farmem_stored_pages"), "{body}");
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    }
    let closed = trickle
        .join()
        .unwrap()
        .expect("the slow client was answered");
    // Its deadline is absolute: two seconds for the whole request, however
    // it trickles (a timeout per read would keep it for hours).
    assert!(
        closed < SCRAPE_DEADLINE + Duration::from_secs(3),
        "{closed:?}"
    );
}

#[test]
fn many_stalled_clients_from_one_address_leave_room_for_others() {
    let (_h, at) = server_with("127.0.0.1:0", MetricsAccess::default());
    // More stalled connections than one address may hold: the extra ones
    // are told 503 at once, and the endpoint still serves.
    let stalled: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(&at).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    let (status, _) = get(&at, None);
    assert!(
        status == "HTTP/1.1 503 Service Unavailable"
            || status.starts_with("error: ")
            || status == "HTTP/1.1 200 OK",
        "{status}"
    );
    assert!(t.elapsed() < Duration::from_secs(3));
    drop(stalled);
    // Once their deadline passed, scrapes are answered again.
    std::thread::sleep(SCRAPE_DEADLINE + Duration::from_millis(500));
    assert_eq!(get(&at, None).0, "HTTP/1.1 200 OK");
}

#[test]
fn a_reachable_endpoint_answers_only_the_bearer_token() {
    let secret = Secret::from_bytes(vec![42; 32], std::path::Path::new("test")).unwrap();
    let token = metrics_token(&secret);
    // An address other machines can reach, where this machine has one
    // (the token check is the endpoint's, whatever the address).
    let ip = external_ip().map_or("127.0.0.1".to_string(), |ip| ip.to_string());
    let (_h, at) = server_with(
        &format!("{ip}:0"),
        MetricsAccess {
            token: Some(token.clone()),
            peers: false,
        },
    );
    let (status, body) = get(&at, None);
    assert_eq!(status, "HTTP/1.1 401 Unauthorized", "{body}");
    assert!(!body.contains("farmem_"), "{body}");
    for wrong in [
        format!("Bearer {}", "0".repeat(64)),
        format!("Basic {token}"),
        format!("Bearer {}", &token[..63]),
        "Bearer".to_string(),
    ] {
        assert_eq!(
            get(&at, Some(&wrong)).0,
            "HTTP/1.1 401 Unauthorized",
            "{wrong}"
        );
    }
    // Any other path needs it too.
    let (status, _) = ask(&at, "GET / HTTP/1.1\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 401 Unauthorized");
    let (status, body) = get(&at, Some(&format!("Bearer {token}")));
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    assert!(body.contains("farmem_uptime_seconds"), "{body}");
    // Header names are case-insensitive.
    let (status, _) = ask(
        &at,
        &format!("GET /metrics HTTP/1.1\r\nauthorization: bearer {token}\r\n\r\n"),
    );
    assert_eq!(status, "HTTP/1.1 200 OK");
}

#[test]
fn sessions_are_shown_without_their_peer_unless_asked() {
    for peers in [false, true] {
        let (h, at) = server_with("127.0.0.1:0", MetricsAccess { token: None, peers });
        let mut c = Client::session(&h, 5, 100);
        c.write_fill(&[1, 2, 3], 1);
        let (status, body) = get(&at, None);
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(
            body.contains("farmem_session_stored_pages{session=\"1\""),
            "{body}"
        );
        assert_eq!(body.contains("peer="), peers, "{body}");
        assert_eq!(body.contains("127.0.0.1:"), peers, "{body}");
    }
}
