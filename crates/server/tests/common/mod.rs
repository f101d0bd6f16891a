//! A minimal protocol-v1 client for the server's integration tests.
#![allow(dead_code)] // each test binary uses a different part

use farmem_server::{Server, ServerConfig, ServerHandle};
use farmem_wire::{self as wire, ErrorCode, Frame, Header, Op, HEADER_LEN, PAGE_SIZE};
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
        let mut t = [0u8; wire::TOKEN_LEN];
        t[..8].copy_from_slice(&token.to_le_bytes());
        t[8..].copy_from_slice(&(!token).to_le_bytes());
        self.send(
            Frame::Hello {
                token: &t,
                max_pages,
            },
            &[],
        )
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

    /// A hand-built frame: `op`'s header over `payload` as given (for the
    /// tests that send what the codec would never encode).
    pub fn call(&mut self, op: Op, count: u32, payload: &[u8]) -> Reply {
        self.tag += 1;
        let mut b = Header::new(op, self.tag, count, u32::try_from(payload.len()).unwrap())
            .encode()
            .to_vec();
        b.extend_from_slice(payload);
        self.send_raw(&b);
        self.expect_reply()
    }

    /// `frame`, encoded by the protocol's codec, then `data` (a Write's pages).
    pub fn send(&mut self, frame: Frame<'_>, data: &[Vec<u8>]) -> Reply {
        self.tag += 1;
        let mut b = frame.encode(self.tag).to_vec();
        for d in data {
            b.extend_from_slice(d);
        }
        self.send_raw(&b);
        self.expect_reply()
    }

    /// The reply to the last request: its tag, or tag 0 for an Error the
    /// server sent about a header it could not decode.
    fn expect_reply(&mut self) -> Reply {
        let r = self.reply().expect("connection closed");
        let tag_0_error = r.0.op == Op::Error && r.0.tag == 0;
        assert!(r.0.tag == self.tag || tag_0_error, "{:?}", r.0);
        r
    }

    /// Whether the server has closed this connection.
    pub fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.s.read(&mut b), Ok(0) | Err(_))
    }

    /// Write `pages`, page i holding `data[i]`.
    pub fn write(&mut self, pages: &[u64], data: &[Vec<u8>]) -> Reply {
        self.send(Frame::Write { pages }, data)
    }

    /// Write `pages`, each filled with `fill`.
    pub fn write_fill(&mut self, pages: &[u64], fill: u8) -> Reply {
        let data = vec![vec![fill; PAGE_SIZE]; pages.len()];
        self.write(pages, &data)
    }

    pub fn read(&mut self, pages: &[u64]) -> Reply {
        self.send(Frame::Read { pages }, &[])
    }

    /// Free `[start, start+n)`; returns the pages released.
    pub fn free(&mut self, start: u64, n: u64) -> u32 {
        let (h, p) = self.send(Frame::Free { start, pages: n }, &[]);
        match wire::decode_reply(&h, &p) {
            Ok(wire::Reply::FreeOk { released }) => released,
            other => panic!("Free answered {other:?}"),
        }
    }

    /// (capacity, used, sessions, connections)
    pub fn stats(&mut self) -> [u64; 4] {
        let (h, p) = self.send(Frame::Stats, &[]);
        match wire::decode_reply(&h, &p) {
            Ok(wire::Reply::StatsOk(s)) => {
                [s.capacity_pages, s.used_pages, s.sessions, s.connections]
            }
            other => panic!("Stats answered {other:?}"),
        }
    }
}
