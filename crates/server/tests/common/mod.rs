//! A minimal protocol-v1 client for the server's integration tests.
#![allow(dead_code)] // each test binary uses a different part

use farmem_server::{Server, ServerConfig, ServerHandle};

#[path = "../../../../tests/support/skip.rs"]
mod skip_support;
use farmem_wire::{self as wire, ErrorCode, Frame, Header, Op, HEADER_LEN, PAGE_SIZE};
#[allow(unused_imports)]
pub use skip_support::skip;
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

/// The shared secret of [`server_with_secret`].
pub fn test_secret() -> farmem_server::Secret {
    farmem_server::Secret::from_bytes(vec![7; 32], std::path::Path::new("test-secret")).unwrap()
}

/// A server on loopback TCP that requires [`test_secret`]; `tweak` adjusts
/// its configuration first.
pub fn server_with_secret(
    capacity_pages: u64,
    tweak: impl FnOnce(&mut ServerConfig),
) -> ServerHandle {
    let mut cfg = ServerConfig::new(
        "127.0.0.1:0".parse::<std::net::SocketAddr>().unwrap(),
        capacity_pages * PAGE_SIZE as u64,
    );
    cfg.spin_ns = 10_000;
    cfg.secret = Some(std::sync::Arc::new(test_secret()));
    tweak(&mut cfg);
    Server::bind(cfg).unwrap().spawn().unwrap()
}

pub type Reply = (Header, Vec<u8>);

/// Ask for UCX chunk `n`: its base and packed key, or the refusal's code
/// and message.
pub fn ucx_chunk(c: &mut Client, n: u64) -> Result<(u64, Vec<u8>), (Option<ErrorCode>, String)> {
    let r = c.send(Frame::UcxChunk { chunk: n }, &[]);
    match wire::decode_reply(&r.0, &r.1) {
        Ok(wire::Reply::UcxChunkOk { base, rkey }) => Ok((base, rkey.to_vec())),
        _ => Err((error_code(&r), String::from_utf8_lossy(&r.1).into_owned())),
    }
}

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
    /// After the handshake: the session key and the frames sent and
    /// received since (every frame is sealed, `farmem_wire::seal`).
    pub seal: Option<(wire::seal::SessionKey, u64, u64)>,
}

impl Client {
    pub fn connect(h: &ServerHandle) -> Client {
        let s = TcpStream::connect(h.addr().to_string()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_nodelay(true).unwrap();
        Client {
            s,
            tag: 1,
            seal: None,
        }
    }

    /// Connect and say Hello for session `token` of `max_pages` pages.
    pub fn session(h: &ServerHandle, token: u64, max_pages: u64) -> Client {
        let mut c = Client::connect(h);
        let r = c.hello(token, max_pages);
        assert_eq!(r.0.op, Op::HelloOk, "{}", String::from_utf8_lossy(&r.1));
        c
    }

    /// Connect, pass the handshake with [`test_secret`], and say Hello.
    pub fn authenticated_session(h: &ServerHandle, token: u64, max_pages: u64) -> Client {
        let mut c = Client::connect(h);
        let k = test_secret();
        let cn = [3u8; wire::auth::NONCE_LEN];
        let (hd, p) = c.send(Frame::Auth { nonce: &cn }, &[]);
        let Ok(wire::Reply::AuthChallenge { nonce: sn, .. }) = wire::decode_reply(&hd, &p) else {
            panic!("Auth answered {hd:?}");
        };
        let proof = k.client_proof(&cn, &sn);
        assert_eq!(
            c.send(Frame::AuthProof { proof: &proof }, &[]).0.op,
            Op::AuthOk
        );
        c.seal = Some((k.session_key(&cn, &sn), 0, 0));
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

    /// One reply; None if the server closed the connection. A sealed
    /// reply's tag is checked (and a bad one fails the test).
    pub fn reply(&mut self) -> Option<Reply> {
        let mut hb = [0u8; HEADER_LEN];
        self.s.read_exact(&mut hb).ok()?;
        let h = Header::decode(&hb).expect("server sent a valid header");
        let mut p = vec![0u8; h.len as usize];
        if let Some((key, _, received)) = &mut self.seal {
            let covered = wire::seal::covered_len(&h);
            self.s.read_exact(&mut p[..covered]).ok()?;
            let mut tag = [0u8; wire::seal::TAG_LEN];
            self.s.read_exact(&mut tag).ok()?;
            let mut m = key.frame_mac(wire::seal::Direction::ToClient, *received);
            m.update(&hb);
            m.update(&p[..covered]);
            assert!(m.verify(&tag), "reply {received} fails its seal: {h:?}");
            *received += 1;
            self.s.read_exact(&mut p[covered..]).ok()?;
        } else {
            self.s.read_exact(&mut p).ok()?;
        }
        Some((h, p))
    }

    /// Seal `frame` as the next one sent, if the connection is sealed.
    pub fn seal(&mut self, frame: &mut Vec<u8>) {
        if let Some((key, sent, _)) = &mut self.seal {
            key.seal_frame(wire::seal::Direction::ToServer, *sent, frame)
                .unwrap();
            *sent += 1;
        }
    }

    /// A hand-built frame: `op`'s header over `payload` as given (for the
    /// tests that send what the codec would never encode).
    pub fn call(&mut self, op: Op, count: u32, payload: &[u8]) -> Reply {
        self.tag += 1;
        let mut b = Header::new(op, self.tag, count, u32::try_from(payload.len()).unwrap())
            .encode()
            .to_vec();
        b.extend_from_slice(payload);
        self.seal(&mut b);
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
        self.seal(&mut b);
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

/// A server on an abstract Unix socket of its own; `tweak` adjusts its
/// configuration first.
pub fn unix_server(capacity_pages: u64, tweak: impl FnOnce(&mut ServerConfig)) -> ServerHandle {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("unix:@farmem-test-{}-{n}", std::process::id());
    let mut cfg = ServerConfig::new(
        name.parse::<farmem_server::ServerAddr>().unwrap(),
        capacity_pages * PAGE_SIZE as u64,
    );
    cfg.spin_ns = 10_000;
    tweak(&mut cfg);
    Server::bind(cfg).unwrap().spawn().unwrap()
}

/// A client on a server's Unix socket, which can take the descriptors the
/// server passes.
pub struct UnixClient {
    pub s: std::os::unix::net::UnixStream,
    tag: u32,
}

/// A client on the abstract Unix socket `name`, before Hello.
pub fn unix_connect(name: &str) -> UnixClient {
    use std::os::linux::net::SocketAddrExt;
    let sa = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let s = std::os::unix::net::UnixStream::connect_addr(&sa).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    UnixClient { s, tag: 1 }
}

/// Connect to `h` (a Unix server) and say Hello for session `token`.
pub fn unix_session(h: &ServerHandle, token: u64, max_pages: u64) -> UnixClient {
    let farmem_server::ServerAddr::UnixAbstract(name) = h.addr() else {
        panic!("not an abstract Unix server: {}", h.addr());
    };
    let mut c = unix_connect(&name);
    let mut t = [0u8; wire::TOKEN_LEN];
    t[..8].copy_from_slice(&token.to_le_bytes());
    let r = c.send(
        Frame::Hello {
            token: &t,
            max_pages,
        },
        &[],
    );
    assert_eq!(r.0.op, Op::HelloOk, "{}", String::from_utf8_lossy(&r.1));
    c
}

impl UnixClient {
    /// `frame`, then `data`; the reply.
    pub fn send(&mut self, frame: Frame<'_>, data: &[Vec<u8>]) -> Reply {
        self.send_for_fd(frame, data).0
    }

    /// `frame`, then `data`; the reply and the descriptor passed with it.
    pub fn send_for_fd(
        &mut self,
        frame: Frame<'_>,
        data: &[Vec<u8>],
    ) -> (Reply, Option<std::os::fd::OwnedFd>) {
        use std::os::fd::AsRawFd;
        self.tag += 1;
        let mut b = frame.encode(self.tag).to_vec();
        for d in data {
            b.extend_from_slice(d);
        }
        self.s.write_all(&b).unwrap();
        let wait = farmem_sys::net::Wait {
            spin_ns: 0,
            timeout_ns: 20_000_000_000,
        };
        let mut hb = [0u8; HEADER_LEN];
        let fd = farmem_sys::net::recv_exact_with_fd(self.s.as_raw_fd(), &mut hb, wait).unwrap();
        let h = Header::decode(&hb).expect("server sent a valid header");
        let mut p = vec![0u8; h.len as usize];
        self.s.read_exact(&mut p).unwrap();
        assert_eq!(h.tag, self.tag, "{h:?}");
        ((h, p), fd)
    }
}
