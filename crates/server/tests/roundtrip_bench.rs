//! A quick A/B benchmark of the server's data path: 64-page Read and Write
//! round trips over a Unix socket, one connection and two of one session in
//! parallel. Ignored by default; run it on a quiet machine with
//!
//! ```text
//! cargo test --release -p farmem-server --test roundtrip_bench -- --ignored --nocapture
//! ```
//!
//! It prints the median of each run's median, over 3 runs. Only public API
//! and long-standing `farmem_sys::net` calls, so the same file measures an
//! older server too.

use farmem_server::{Server, ServerAddr, ServerConfig};
use farmem_sys::net::{recv_exact, send_vectored, set_nonblocking, Wait};
use farmem_wire::{self as wire, Frame, Header, Op, HEADER_LEN, PAGE_SIZE};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Instant;

const BATCH: usize = 64;
const STORED: u64 = 4096;
const WARMUP: usize = 300;
const ITERS: usize = 3000;
const RUNS: usize = 3;

const WAIT: Wait = Wait {
    spin_ns: 1_000_000,
    timeout_ns: 10_000_000_000,
};

fn connect(name: &str) -> OwnedFd {
    use std::os::linux::net::SocketAddrExt;
    let sa = std::os::unix::net::SocketAddr::from_abstract_name(name).unwrap();
    let s = std::os::unix::net::UnixStream::connect_addr(&sa).unwrap();
    set_nonblocking(s.as_raw_fd()).unwrap();
    s.into()
}

struct Conn {
    fd: OwnedFd,
    tag: u32,
    hdr: [u8; HEADER_LEN],
    data: Vec<u8>,
}

impl Conn {
    fn new(name: &str) -> Conn {
        let mut c = Conn {
            fd: connect(name),
            tag: 0,
            hdr: [0; HEADER_LEN],
            data: vec![0xC3; BATCH * PAGE_SIZE],
        };
        let hello = Frame::Hello {
            token: &[0x42; wire::TOKEN_LEN],
            max_pages: 1 << 20,
        };
        assert_eq!(c.call(hello, &[], 24), Op::HelloOk);
        c
    }

    /// Send `frame` (its head from the codec, then `data`) and receive a
    /// reply with a `reply_len`-byte payload; returns the reply's op.
    fn call(&mut self, frame: Frame<'_>, data: &[&[u8]], reply_len: usize) -> Op {
        self.tag += 1;
        let head = frame.encode(self.tag);
        let mut parts: Vec<&[u8]> = vec![&head];
        parts.extend_from_slice(data);
        send_vectored(self.fd.as_raw_fd(), &parts, WAIT).unwrap();
        recv_exact(self.fd.as_raw_fd(), &mut self.hdr, WAIT).unwrap();
        let rh = Header::decode(&self.hdr).unwrap();
        assert_eq!(rh.len as usize, reply_len, "{rh:?}");
        recv_exact(self.fd.as_raw_fd(), &mut self.data[..reply_len], WAIT).unwrap();
        rh.op
    }

    fn list(first: u64) -> Vec<u64> {
        (first..first + BATCH as u64).collect()
    }

    fn write(&mut self, first: u64) {
        let list = Conn::list(first);
        let data = std::mem::take(&mut self.data);
        let op = self.call(Frame::Write { pages: &list }, &[&data], 0);
        self.data = data;
        assert_eq!(op, Op::WriteOk);
    }

    fn read(&mut self, first: u64) {
        let list = Conn::list(first);
        let op = self.call(Frame::Read { pages: &list }, &[], BATCH * PAGE_SIZE);
        assert_eq!(op, Op::ReadOk);
    }
}

/// Median round trip in µs of `f(first_page)` over ITERS calls.
fn time(mut f: impl FnMut(u64)) -> f64 {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % (STORED / BATCH as u64)) * BATCH as u64
    };
    for _ in 0..WARMUP {
        f(next());
    }
    let mut t: Vec<f64> = (0..ITERS)
        .map(|_| {
            let p = next();
            let s = Instant::now();
            f(p);
            s.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
#[ignore = "a benchmark: run on a quiet machine with --ignored --nocapture"]
fn read_and_write_round_trips() {
    let name = format!("farmem-bench-{}", std::process::id());
    let cfg = ServerConfig::new(ServerAddr::UnixAbstract(name.clone()), 1 << 30);
    let spin_ns = cfg.spin_ns;
    let server = Server::bind(cfg).unwrap().spawn().unwrap();
    let mut c = Conn::new(&name);
    for first in (0..STORED).step_by(BATCH) {
        c.write(first);
    }
    let osrelease = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    println!(
        "config: unix socket, {BATCH}-page batches over {STORED} stored pages, \
         {ITERS} round trips after {WARMUP} warm-up, server spin {spin_ns} ns, client spin {} ns; \
         machine: {} CPUs, kernel {}",
        WAIT.spin_ns,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        osrelease.trim()
    );
    let (mut rd, mut wr, mut par) = (vec![], vec![], vec![]);
    for run in 0..RUNS {
        let r = time(|p| c.read(p));
        let w = time(|p| c.write(p));
        // Two connections of the session, each on its own thread.
        let p2: Vec<f64> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        let mut c = Conn::new(&name);
                        time(|p| c.read(p))
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let p = p2[0].max(p2[1]);
        println!(
            "run {run}: read64 {r:.1} µs, write64 {w:.1} µs, read64 on 2 parallel connections {p:.1} µs (slower of the two)"
        );
        rd.push(r);
        wr.push(w);
        par.push(p);
    }
    println!(
        "median of {RUNS}: read64 {:.1} µs, write64 {:.1} µs, read64 x2 parallel {:.1} µs",
        median(rd),
        median(wr),
        median(par)
    );
    drop(c);
    server.shutdown().unwrap();
}
