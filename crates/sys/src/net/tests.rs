use super::*;
use std::os::fd::AsRawFd;

#[test]
fn listening_family_tells_sockets_apart() {
    let dir = std::env::temp_dir().join(format!("farmem-lf-{}", std::process::id()));
    let u = std::os::unix::net::UnixListener::bind(&dir).unwrap();
    assert_eq!(listening_family(u.as_raw_fd()).unwrap(), libc::AF_UNIX);
    let t = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    assert_eq!(listening_family(t.as_raw_fd()).unwrap(), libc::AF_INET);
    let c = std::net::TcpStream::connect(t.local_addr().unwrap()).unwrap();
    let e = listening_family(c.as_raw_fd()).unwrap_err();
    assert!(e.to_string().contains("not listening"), "{e}");
    let f = std::fs::File::open("/dev/null").unwrap();
    let e = listening_family(f.as_raw_fd()).unwrap_err();
    assert!(e.to_string().contains("not a socket"), "{e}");
    std::fs::remove_file(&dir).ok();
}

#[test]
fn socket_buffers_grow_to_the_request() {
    let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
    set_socket_buffers(a.as_raw_fd(), 1 << 20).unwrap();
    let (snd, rcv) = socket_buffers(a.as_raw_fd()).unwrap();
    // Capped by net.core.{w,r}mem_max, which may be lower on other hosts.
    let cap = |f: &str| {
        std::fs::read_to_string(f)
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .unwrap_or(usize::MAX)
    };
    assert!(snd >= (1 << 20).min(cap("/proc/sys/net/core/wmem_max")));
    assert!(rcv >= (1 << 20).min(cap("/proc/sys/net/core/rmem_max")));
}

#[test]
fn raw_vectored_roundtrip() {
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    set_nonblocking(a.as_raw_fd()).unwrap();
    set_nonblocking(b.as_raw_fd()).unwrap();
    let wait = Wait {
        spin_ns: 0,
        timeout_ns: 5_000_000_000,
    };
    let src: Vec<u8> = (0..10_000u32).map(|i| (i & 0xff) as u8).collect();
    let (x, y) = src.split_at(3000);
    // SAFETY: both ranges are live slices for the whole call.
    unsafe { send_vectored_raw(a.as_raw_fd(), &[RawBuf::of(x), RawBuf::of(y)], wait) }.unwrap();
    let mut dst = vec![0u8; 10_000];
    let (p, q) = dst.split_at_mut(7);
    let parts = [
        RawBuf {
            ptr: p.as_mut_ptr(),
            len: p.len(),
        },
        RawBuf {
            ptr: q.as_mut_ptr(),
            len: q.len(),
        },
    ];
    // SAFETY: both ranges are live, writable, and not otherwise used
    // until the call returns.
    unsafe { recv_exact_vectored_raw(b.as_raw_fd(), &parts, wait) }.unwrap();
    assert_eq!(dst, src);
}

#[test]
fn loopback_is_listed() {
    let all = interface_addrs().unwrap();
    assert!(
        all.iter().any(|a| a.loopback && a.addr.is_loopback()),
        "{all:?}"
    );
}

/// A connection to any of this host's own addresses is this host's,
/// loopback or not; a Unix socket is; a file is not a connection.
#[test]
fn a_connection_to_an_own_address_is_local() {
    for a in interface_addrs().unwrap() {
        let Ok(l) = std::net::TcpListener::bind((a.addr, 0)) else {
            continue; // an address that takes no listener (link-local v6)
        };
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        assert!(peer_is_local(c.as_raw_fd()), "{a:?}");
    }
    let (u, _) = std::os::unix::net::UnixStream::pair().unwrap();
    assert!(peer_is_local(u.as_raw_fd()));
    let f = std::fs::File::open("/dev/null").unwrap();
    assert!(!peer_is_local(f.as_raw_fd()));
}
