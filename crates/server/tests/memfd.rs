//! The one-host page path against a real server: sealed memory files per
//! chunk, passed only over a Unix socket to a peer of an accepted user,
//! charged before they are made, private to their session, and emptied
//! when the session closes or frees them.

mod common;
use common::*;
use farmem_server::CHUNK_PAGES;
use farmem_wire::{self as wire, ErrorCode, Frame, Op, PAGE_SIZE};
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Command;

fn open(c: &mut UnixClient) {
    let (h, p) = c.send(Frame::MemfdOpen, &[]);
    match wire::decode_reply(&h, &p) {
        Ok(wire::Reply::MemfdOpenOk { chunk_pages }) => assert_eq!(chunk_pages, CHUNK_PAGES),
        other => panic!(
            "MemfdOpen answered {other:?}: {}",
            String::from_utf8_lossy(&p)
        ),
    }
}

fn chunk(c: &mut UnixClient, n: u64) -> Result<(OwnedFd, u64), (Option<ErrorCode>, String)> {
    let ((h, p), fd) = c.send_for_fd(Frame::MemfdChunk { chunk: n }, &[]);
    match wire::decode_reply(&h, &p) {
        Ok(wire::Reply::MemfdChunkOk { chunk, pages }) => {
            assert_eq!(chunk, n);
            Ok((fd.expect("a grant passes a descriptor"), pages))
        }
        _ => {
            assert!(fd.is_none(), "a refusal passed a descriptor");
            Err((
                error_code(&(h, p.clone())),
                String::from_utf8_lossy(&p).into_owned(),
            ))
        }
    }
}

fn read_page(fd: &OwnedFd, page: u64) -> Vec<u8> {
    let mut b = vec![0u8; PAGE_SIZE];
    let n = farmem_sys::fs::pread_full(fd.as_raw_fd(), &mut b, page * PAGE_SIZE as u64).unwrap();
    assert_eq!(n, PAGE_SIZE);
    b
}

fn write_page(fd: &OwnedFd, page: u64, data: &[u8]) {
    farmem_sys::fs::pwrite_full(fd.as_raw_fd(), data, page * PAGE_SIZE as u64).unwrap();
}

/// One test at a time: they count this process's memory files.
static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one() -> std::sync::MutexGuard<'static, ()> {
    ONE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Memory files this process holds (the server runs in it, as threads).
fn memfds_here() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy().starts_with("/memfd:farmem-chunk"))
        .count()
}

#[test]
fn chunks_are_sealed_memory_files_private_to_their_session() {
    let _one = one();
    let h = unix_server(3 * CHUNK_PAGES, |_| {});
    let mut a = unix_session(&h, 1, 2 * CHUNK_PAGES + 10);
    // MemfdChunk needs MemfdOpen first.
    assert_eq!(chunk(&mut a, 0).unwrap_err().0, Some(ErrorCode::Malformed));
    open(&mut a);
    let (fd, pages) = chunk(&mut a, 0).unwrap();
    assert_eq!(pages, CHUNK_PAGES);
    farmem_sys::memfd::check_chunk(fd.as_raw_fd(), CHUNK_PAGES * PAGE_SIZE as u64).unwrap();
    assert_eq!(h.used_pages(), CHUNK_PAGES, "a chunk is charged whole");
    let page = pattern(5, 1);
    write_page(&fd, 5, &page);
    // Granted again: the same file (not charged twice).
    let (again, _) = chunk(&mut a, 0).unwrap();
    assert_eq!(read_page(&again, 5), page);
    assert_eq!(h.used_pages(), CHUNK_PAGES);
    // The last chunk is as long as the session's pages reach.
    let (last, pages) = chunk(&mut a, 2).unwrap();
    assert_eq!(pages, 10);
    farmem_sys::memfd::check_chunk(last.as_raw_fd(), 10 * PAGE_SIZE as u64).unwrap();
    assert_eq!(chunk(&mut a, 3).unwrap_err().0, Some(ErrorCode::OutOfRange));
    // Another session gets its own file: session a's page is not there.
    let mut b = unix_session(&h, 2, CHUNK_PAGES);
    open(&mut b);
    let (fb, _) = chunk(&mut b, 0).unwrap();
    assert!(read_page(&fb, 5).iter().all(|&x| x == 0));
}

#[test]
fn quota_and_capacity_are_charged_before_any_file_is_made() {
    let _one = one();
    let h = unix_server(1 << 28, |cfg| cfg.session_quota_pages = CHUNK_PAGES + 1);
    let mut a = unix_session(&h, 1, 4 * CHUNK_PAGES);
    open(&mut a);
    let _first = chunk(&mut a, 0).unwrap();
    let files = memfds_here();
    let used = h.used_pages();
    let (code, msg) = chunk(&mut a, 1).unwrap_err();
    assert_eq!(code, Some(ErrorCode::Capacity));
    assert!(msg.contains("--session-quota"), "{msg}");
    // (At most as many: an earlier test's server may still be closing its
    // sessions' files.)
    assert!(memfds_here() <= files, "a refused chunk made a file");
    assert_eq!(h.used_pages(), used, "a refused chunk was charged");
    // Capacity: a server of one chunk refuses a second session's.
    let h = unix_server(CHUNK_PAGES, |_| {});
    let mut a = unix_session(&h, 1, CHUNK_PAGES);
    let mut b = unix_session(&h, 2, CHUNK_PAGES);
    open(&mut a);
    open(&mut b);
    let _ = chunk(&mut a, 0).unwrap();
    let (code, msg) = chunk(&mut b, 0).unwrap_err();
    assert_eq!(code, Some(ErrorCode::Capacity));
    assert!(msg.contains("--capacity"), "{msg}");
}

/// Bytes of memory the file `fd` holds (`st_blocks`, 512-byte units).
fn allocated(fd: &OwnedFd) -> u64 {
    let meta = std::fs::File::from(fd.try_clone().unwrap())
        .metadata()
        .unwrap();
    std::os::unix::fs::MetadataExt::blocks(&meta) * 512
}

/// A Free empties its pages and a session's close its chunks, although
/// this client still holds the descriptor. The client here is in the
/// server's own memory cgroup, so the server leaves pages as holes until
/// they are written (a server in another cgroup allocates them: the unit
/// test in `memfd.rs` and the Slurm test).
#[test]
fn free_and_session_close_give_the_memory_back() {
    let _one = one();
    let h = unix_server(CHUNK_PAGES, |_| {});
    let mut a = unix_session(&h, 1, CHUNK_PAGES);
    open(&mut a);
    let (fd, _) = chunk(&mut a, 0).unwrap();
    assert_eq!(
        allocated(&fd),
        0,
        "a chunk for a client of the same cgroup was allocated"
    );
    write_page(&fd, 1, &pattern(1, 1));
    write_page(&fd, 2, &pattern(2, 1));
    let r = a.send(Frame::Free { start: 1, pages: 1 }, &[]);
    assert_eq!(r.0.op, Op::FreeOk);
    assert!(
        read_page(&fd, 1).iter().all(|&x| x == 0),
        "a freed page kept its bytes"
    );
    assert_eq!(
        allocated(&fd),
        PAGE_SIZE as u64,
        "a freed page kept its memory"
    );
    assert_eq!(read_page(&fd, 2), pattern(2, 1));
    // The session closes: its chunk is emptied although this client still
    // holds the descriptor, and its charge is given back.
    drop(a);
    for _ in 0..100 {
        if h.used_pages() == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(h.used_pages(), 0);
    assert!(
        read_page(&fd, 2).iter().all(|&x| x == 0),
        "a closed session's page kept its bytes"
    );
    assert_eq!(
        allocated(&fd),
        0,
        "a closed session's chunk kept its memory"
    );
}

#[test]
fn tcp_peers_get_no_memory_files() {
    let _one = one();
    let h = server(CHUNK_PAGES);
    let mut c = Client::session(&h, 1, CHUNK_PAGES);
    let r = c.send(Frame::MemfdOpen, &[]);
    assert_eq!(error_code(&r), Some(ErrorCode::Unsupported));
    assert!(String::from_utf8_lossy(&r.1).contains("Unix socket"));
}

/// Hello then MemfdOpen on the abstract socket `name`, from a Python
/// client running as user `nobody`; the reply's op and message.
fn memfd_open_as_nobody(name: &str) -> Option<String> {
    let script = format!(
        r#"
import socket, struct
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect("\0{name}")
def frame(op, tag, payload):
    return struct.pack("<IHHIIII", 0x4d454d46, 1, op, tag, 0, len(payload), 0) + payload
def reply():
    h = b""
    while len(h) < 24:
        h += s.recv(24 - len(h))
    magic, ver, op, tag, count, n, status = struct.unpack("<IHHIIII", h)
    p = b""
    while len(p) < n:
        p += s.recv(n - len(p))
    return op, p
s.sendall(frame(1, 1, b"\x05" * 16 + struct.pack("<Q", 16)))
assert reply()[0] == 0x81
s.sendall(frame(10, 2, b""))
op, p = reply()
print(hex(op), p.decode(errors="replace"))
"#
    );
    if Command::new("runuser").arg("--help").output().is_err() {
        return None;
    }
    let o = Command::new("runuser")
        .args(["-u", "nobody", "--", "python3", "-c", &script])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    Some(String::from_utf8_lossy(&o.stdout).into_owned())
}

#[test]
fn another_user_gets_no_memory_files_unless_named() {
    let _one = one();
    if farmem_sys::process::geteuid() != 0 {
        skip(
            "another_user_gets_no_memory_files_unless_named",
            "it runs a client as `nobody` with runuser, which needs root",
        );
        return;
    }
    let h = unix_server(CHUNK_PAGES, |_| {});
    let farmem_server::ServerAddr::UnixAbstract(name) = h.addr() else {
        unreachable!()
    };
    let Some(out) = memfd_open_as_nobody(&name) else {
        skip(
            "another_user_gets_no_memory_files_unless_named",
            "runuser is missing",
        );
        return;
    };
    assert!(
        out.starts_with("0xff") && out.contains("uid 65534") && out.contains("--memfd-uid"),
        "{out}"
    );
    // Named with --memfd-uid, that user may.
    let h = unix_server(CHUNK_PAGES, |cfg| cfg.memfd_uids = vec![65534]);
    let farmem_server::ServerAddr::UnixAbstract(name) = h.addr() else {
        unreachable!()
    };
    let out = memfd_open_as_nobody(&name).unwrap();
    assert!(out.starts_with("0x8a"), "{out}");
}

/// A server on TCP tells a session (after the handshake) where its side
/// door is; there a client of an open session takes memory files, and a
/// token of no open session opens nothing.
#[test]
fn a_tcp_server_hands_out_memory_files_at_its_side_door_to_open_sessions_only() {
    let _one = one();
    let h = server_with_secret(2 * CHUNK_PAGES, |_| {});
    let mut c = Client::authenticated_session(&h, 9, CHUNK_PAGES);
    let r = c.send(Frame::MemfdWhere, &[]);
    let name = match wire::decode_reply(&r.0, &r.1) {
        Ok(wire::Reply::MemfdWhereOk { name }) => String::from_utf8(name.to_vec()).unwrap(),
        other => panic!("MemfdWhere answered {other:?}"),
    };
    assert!(
        name.starts_with("farmem-side-") && name.len() == 12 + 32,
        "{name}"
    );
    // The token of no open session: refused, and no session is opened.
    let mut d = unix_connect(&name);
    let stranger = [0x55u8; wire::TOKEN_LEN];
    let r = d.send(
        Frame::Hello {
            token: &stranger,
            max_pages: CHUNK_PAGES,
        },
        &[],
    );
    assert_eq!(error_code(&r), Some(ErrorCode::NoSession));
    assert!(String::from_utf8_lossy(&r.1).contains("side door"));
    assert_eq!(c.stats()[2], 1, "the side door opened a session");
    // The session's own token (as `authenticated_session` made it).
    let mut t = [0u8; wire::TOKEN_LEN];
    t[..8].copy_from_slice(&9u64.to_le_bytes());
    t[8..].copy_from_slice(&(!9u64).to_le_bytes());
    let mut d = unix_connect(&name);
    let r = d.send(
        Frame::Hello {
            token: &t,
            max_pages: CHUNK_PAGES,
        },
        &[],
    );
    assert_eq!(r.0.op, Op::HelloOk, "{}", String::from_utf8_lossy(&r.1));
    assert_eq!(d.send(Frame::MemfdOpen, &[]).0.op, Op::MemfdOpenOk);
    let ((h2, _), fd) = d.send_for_fd(Frame::MemfdChunk { chunk: 0 }, &[]);
    assert_eq!(h2.op, Op::MemfdChunkOk);
    assert!(fd.is_some(), "no descriptor at the side door");
    // A Unix server has no side door.
    let u = unix_server(CHUNK_PAGES, |_| {});
    let mut e = unix_session(&u, 3, CHUNK_PAGES);
    let r = e.send(Frame::MemfdWhere, &[]);
    assert_eq!(error_code(&r), Some(ErrorCode::Unsupported));
}

/// The metrics count a session's memory-file chunks in its own pages, as
/// they count them in the server's total.
#[test]
fn a_sessions_chunks_show_in_its_metrics() {
    use std::io::{Read, Write};
    let _one = one();
    let mut cfg = farmem_server::ServerConfig::new(
        format!("unix:@farmem-test-metrics-{}", std::process::id())
            .parse::<farmem_server::ServerAddr>()
            .unwrap(),
        2 * CHUNK_PAGES * PAGE_SIZE as u64,
    );
    cfg.spin_ns = 10_000;
    let server = farmem_server::Server::bind(cfg).unwrap();
    let m = farmem_server::MetricsEndpoint::bind("127.0.0.1:0").unwrap();
    let at = m.local_addr().unwrap().to_string();
    m.serve(&server).unwrap();
    let h = server.spawn().unwrap();
    let mut a = unix_session(&h, 1, CHUNK_PAGES);
    open(&mut a);
    let (_fd, pages) = chunk(&mut a, 0).unwrap();
    let mut s = std::net::TcpStream::connect(&at).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {at}\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    let sample = |name: &str| -> Option<u64> {
        body.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit_once(' '))
            .and_then(|(_, v)| v.parse().ok())
    };
    assert_eq!(sample("farmem_stored_pages "), Some(pages), "{body}");
    assert_eq!(
        sample("farmem_session_stored_pages{session=\"1\"}"),
        Some(pages),
        "{body}"
    );
}
