//! A minimal protocol-v1 client for the server's integration tests.
#![allow(dead_code)] // each test binary uses a different part

use farmem_server::{Server, ServerConfig, ServerHandle};
use farmem_wire::{self as wire, ErrorCode, Header, Op, HEADER_LEN, PAGE_SIZE};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub fn server(capacity_pages: u64) -> ServerHandle {
    let mut cfg = ServerConfig::new(
        "127.0.0.1:0".parse::<std::net::SocketAddr>().unwrap(),
        capacity_pages * PAGE_SIZE as u64,
    );
    cfg.spin_ns = 10_000;
    Server::bind(cfg).unwrap().spawn().unwrap()
}

pub type Reply = (Header, Vec<u8>);

pub fn error_code(r: &Reply) -> Option<ErrorCode> {
    (r.0.op == Op::Error).then(|| ErrorCode::from_u32(r.0.status).unwrap())
}

/// The bytes a test stores in `page` at `round`: every 8-byte word differs,
/// so a page swapped, torn or zeroed is caught.
pub fn pattern(page: u64, round: u64) -> Vec<u8> {
    (0..PAGE_SIZE as u64 / 8)
        .flat_map(|w| (page << 24 ^ round << 12 ^ w ^ 0x5A5A).to_le_bytes())
        .collect()
}

pub struct Client {
    pub s: TcpStream,
    tag: u32,
}

impl Client {
    pub fn connect(h: &ServerHandle) -> Client {
        let s = TcpStream::connect(h.addr().to_string()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_nodelay(true).unwrap();
        Client { s, tag: 1 }
    }

    /// Connect and say Hello for session `token` of `max_pages` pages.
    pub fn session(h: &ServerHandle, token: u64, max_pages: u64) -> Client {
        let mut c = Client::connect(h);
        let r = c.hello(token, max_pages);
        assert_eq!(r.0.op, Op::HelloOk, "{}", String::from_utf8_lossy(&r.1));
        c
    }

    pub fn hello(&mut self, token: u64, max_pages: u64) -> Reply {
        let mut p = [token.to_le_bytes(), (!token).to_le_bytes()].concat();
        p.extend_from_slice(&max_pages.to_le_bytes());
        self.call(Op::Hello, 0, &p)
    }

    pub fn send_raw(&mut self, b: &[u8]) {
        self.s.write_all(b).unwrap();
    }

    /// One reply; None if the server closed the connection.
    pub fn reply(&mut self) -> Option<Reply> {
        let mut hb = [0u8; HEADER_LEN];
        self.s.read_exact(&mut hb).ok()?;
        let h = Header::decode(&hb).expect("server sent a valid header");
        let mut p = vec![0u8; h.len as usize];
        self.s.read_exact(&mut p).ok()?;
        Some((h, p))
    }

    pub fn call(&mut self, op: Op, count: u32, payload: &[u8]) -> Reply {
        self.tag += 1;
        let mut b = Header::new(op, self.tag, count, payload.len() as u32)
            .encode()
            .to_vec();
        b.extend_from_slice(payload);
        self.send_raw(&b);
        let r = self.reply().expect("connection closed");
        assert_eq!(r.0.tag, self.tag);
        r
    }

    /// Write `pages`, page i holding `data[i]`.
    pub fn write(&mut self, pages: &[u64], data: &[Vec<u8>]) -> Reply {
        let mut p: Vec<u8> = pages.iter().flat_map(|p| p.to_le_bytes()).collect();
        for d in data {
            p.extend_from_slice(d);
        }
        self.call(Op::Write, pages.len() as u32, &p)
    }

    /// Write `pages`, each filled with `fill`.
    pub fn write_fill(&mut self, pages: &[u64], fill: u8) -> Reply {
        let data = vec![vec![fill; PAGE_SIZE]; pages.len()];
        self.write(pages, &data)
    }

    pub fn read(&mut self, pages: &[u64]) -> Reply {
        let p: Vec<u8> = pages.iter().flat_map(|p| p.to_le_bytes()).collect();
        self.call(Op::Read, pages.len() as u32, &p)
    }

    /// Free `[start, start+n)`; returns the pages released.
    pub fn free(&mut self, start: u64, n: u64) -> u32 {
        let p = [start.to_le_bytes(), n.to_le_bytes()].concat();
        let (h, _) = self.call(Op::Free, 0, &p);
        assert_eq!(h.op, Op::FreeOk);
        h.count
    }

    /// (capacity, used, sessions, connections)
    pub fn stats(&mut self) -> [u64; 4] {
        let (h, p) = self.call(Op::Stats, 0, &[]);
        assert_eq!(h.op, Op::StatsOk);
        wire::decode_stats_ok(&p).unwrap()
    }
}
