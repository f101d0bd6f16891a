//! The fuzz targets' bodies, one function each; `src/bin/*.rs` hands them
//! AFL++'s inputs. Each checks against a model and panics on a difference,
//! which AFL++ records as a crash.

use farmem_server::{Server, ServerConfig, ServerHandle};
use farmem_wire::{
    self as wire, ErrorCode, Frame, Header, Op, Reply, Request, HEADER_LEN, PAGE_SIZE, TOKEN_LEN,
};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Any bytes: the header decoder and both payload decoders never panic, and
/// whatever decodes as a request re-encodes to the same bytes.
pub fn wire_decode(data: &[u8]) {
    if data.len() < HEADER_LEN {
        return;
    }
    let mut hb = [0u8; HEADER_LEN];
    hb.copy_from_slice(&data[..HEADER_LEN]);
    let Ok(h) = Header::decode(&hb) else {
        return;
    };
    assert!(wire::payload_len_ok(h.op, h.count, h.len), "{h:?} passed decode");
    let body = &data[HEADER_LEN..];
    let Some(payload) = body.get(..h.len as usize) else {
        return;
    };
    let _ = wire::decode_reply(&h, if h.op == Op::ReadOk { &[] } else { payload });
    let Ok(req) = wire::decode_request(&h, payload) else {
        return;
    };
    let page_list: Vec<u64>;
    let frame = match req {
        Request::Hello { ref token, max_pages } => Frame::Hello { token, max_pages },
        Request::Read { pages } => {
            page_list = wire::pages(pages).collect();
            Frame::Read { pages: &page_list }
        }
        Request::Write { pages, data } => {
            assert_eq!(data.len(), h.count as usize * PAGE_SIZE);
            page_list = wire::pages(pages).collect();
            Frame::Write { pages: &page_list }
        }
        Request::Free { start, pages } => Frame::Free { start, pages },
        Request::Stats => Frame::Stats,
        Request::Auth { ref nonce } => Frame::Auth { nonce },
        Request::AuthProof { ref proof } => Frame::AuthProof { proof },
        Request::UcxOpen => Frame::UcxOpen,
        Request::UcxChunk { chunk } => Frame::UcxChunk { chunk },
    };
    let head = frame.encode(h.tag);
    assert_eq!(&head[..], &data[..head.len()], "re-encoded {frame:?}");
}

/// Pages of the model session (page numbers from 0 to this, some beyond the
/// session's range of `MAX_PAGES`).
const PAGE_SPACE: u64 = 80;
const MAX_PAGES: u64 = 64;

fn server() -> &'static ServerHandle {
    static S: OnceLock<ServerHandle> = OnceLock::new();
    S.get_or_init(|| {
        // A Unix socket and a spinning server thread: a round trip in a few
        // microseconds, so AFL++ runs thousands of inputs a second.
        let name = format!("farmem-fuzz-{}", std::process::id());
        let mut cfg = ServerConfig::new(
            format!("unix:@{name}").parse::<farmem_wire::ServerAddr>().unwrap(),
            1 << 30,
        );
        cfg.spin_ns = 200_000;
        Server::bind(cfg).unwrap().spawn().unwrap()
    })
}

struct Conn {
    s: UnixStream,
    tag: u32,
}

impl Conn {
    fn call(&mut self, frame: Frame<'_>, data: &[u8]) -> Option<(Header, Vec<u8>)> {
        self.tag += 1;
        let mut b = frame.encode(self.tag).to_vec();
        b.extend_from_slice(data);
        self.s.write_all(&b).ok()?;
        let mut hb = [0u8; HEADER_LEN];
        self.s.read_exact(&mut hb).ok()?;
        let h = Header::decode(&hb).expect("the server sends valid headers");
        let mut p = vec![0u8; h.len as usize];
        self.s.read_exact(&mut p).ok()?;
        Some((h, p))
    }
}

fn code(h: &Header, p: &[u8]) -> Option<ErrorCode> {
    match wire::decode_reply(h, p) {
        Ok(Reply::Error { code, .. }) => code,
        _ => None,
    }
}

/// Bytes as a sequence of requests on one connection of a real server,
/// every reply checked against a model of the session's pages.
pub fn server_requests(data: &[u8]) {
    static SESSION: AtomicU64 = AtomicU64::new(1);
    let farmem_wire::ServerAddr::UnixAbstract(name) = server().addr() else {
        unreachable!("the fuzz server listens on an abstract Unix socket")
    };
    let sa = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let s = UnixStream::connect_addr(&sa).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut c = Conn { s, tag: 0 };
    // A fresh token per input: sessions never carry over between inputs.
    let id = SESSION.fetch_add(1, Ordering::Relaxed) ^ u64::from(std::process::id()) << 40;
    let mut token = [0u8; TOKEN_LEN];
    token[..8].copy_from_slice(&id.to_le_bytes());
    let mut said_hello = false;
    let mut model: HashMap<u64, u8> = HashMap::new();
    // At most 40 requests an input: longer ones explore little more and
    // slow every run (the page space is 80 pages).
    let data = &data[..data.len().min(160)];
    let mut i = 0;
    while i + 4 <= data.len() {
        let (op, a, b, fill) = (data[i] % 6, data[i + 1], data[i + 2], data[i + 3]);
        i += 4;
        let pages: Vec<u64> = (0..u64::from(b % 5) + 1)
            .map(|k| (u64::from(a) + k * 3) % PAGE_SPACE)
            .collect();
        let in_range = pages.iter().all(|&p| p < MAX_PAGES);
        match op {
            0 => {
                let Some((h, p)) = c.call(
                    Frame::Hello {
                        token: &token,
                        max_pages: MAX_PAGES,
                    },
                    &[],
                ) else {
                    return;
                };
                if said_hello {
                    assert_eq!(code(&h, &p), Some(ErrorCode::Malformed), "second Hello");
                } else {
                    assert_eq!(h.op, Op::HelloOk);
                    said_hello = true;
                }
            }
            1 => {
                let bytes: Vec<u8> = pages
                    .iter()
                    .flat_map(|&pg| std::iter::repeat_n(fill ^ pg as u8, PAGE_SIZE))
                    .collect();
                let Some((h, p)) = c.call(Frame::Write { pages: &pages }, &bytes) else {
                    return;
                };
                match (said_hello, in_range) {
                    (false, _) => assert_eq!(code(&h, &p), Some(ErrorCode::NoSession)),
                    (true, false) => assert_eq!(code(&h, &p), Some(ErrorCode::OutOfRange)),
                    (true, true) => {
                        assert_eq!(h.op, Op::WriteOk, "{:?}", code(&h, &p));
                        for &pg in &pages {
                            model.insert(pg, fill ^ pg as u8);
                        }
                    }
                }
            }
            2 => {
                let Some((h, p)) = c.call(Frame::Read { pages: &pages }, &[]) else {
                    return;
                };
                let known = pages.iter().all(|pg| model.contains_key(pg));
                match (said_hello, in_range, known) {
                    (false, _, _) => assert_eq!(code(&h, &p), Some(ErrorCode::NoSession)),
                    (true, false, _) => assert_eq!(code(&h, &p), Some(ErrorCode::OutOfRange)),
                    (true, true, false) => assert_eq!(code(&h, &p), Some(ErrorCode::NotFound)),
                    (true, true, true) => {
                        assert_eq!(h.op, Op::ReadOk);
                        for (k, pg) in pages.iter().enumerate() {
                            let page = &p[k * PAGE_SIZE..(k + 1) * PAGE_SIZE];
                            assert!(page.iter().all(|&x| x == model[pg]), "page {pg} differs");
                        }
                    }
                }
            }
            3 => {
                let (start, n) = (u64::from(a % 70), u64::from(b % 20));
                let Some((h, p)) = c.call(Frame::Free { start, pages: n }, &[]) else {
                    return;
                };
                match (said_hello, start + n <= MAX_PAGES) {
                    (false, _) => assert_eq!(code(&h, &p), Some(ErrorCode::NoSession)),
                    (true, false) => assert_eq!(code(&h, &p), Some(ErrorCode::OutOfRange)),
                    (true, true) => {
                        let before = model.len();
                        model.retain(|&pg, _| pg < start || pg >= start + n);
                        assert_eq!(h.op, Op::FreeOk);
                        assert_eq!(h.count as usize, before - model.len(), "pages released");
                    }
                }
            }
            4 => {
                let Some((h, _)) = c.call(Frame::Stats, &[]) else {
                    return;
                };
                assert_eq!(h.op, Op::StatsOk);
            }
            _ => {
                // Not the protocol at all: an Error reply, then the server
                // closes this connection (and only this one).
                let mut raw = Header::new(Op::Read, 99, 1, 8).encode();
                raw[0] ^= fill | 1;
                if c.s.write_all(&raw).is_err() {
                    return;
                }
                let mut hb = [0u8; HEADER_LEN];
                if c.s.read_exact(&mut hb).is_ok() {
                    let h = Header::decode(&hb).expect("valid header");
                    assert_eq!(h.op, Op::Error);
                    assert_eq!(ErrorCode::from_u32(h.status), Some(ErrorCode::BadMagic));
                }
                return;
            }
        }
    }
}

/// Bytes as steps for the region allocator, checked against its model.
pub fn regions(data: &[u8]) {
    if data.len() < 2 {
        return;
    }
    let limit = usize::from(u16::from_le_bytes([data[0], data[1]])) + 1;
    // At most 64 steps an input: the model re-derives everything each step
    // (quadratic), and longer inputs reach nothing shorter ones do not.
    let steps = &data[2..data.len().min(2 + 3 * 64)];
    let ops = farmem_runtime::regions::model::ops_from_bytes(steps);
    farmem_runtime::regions::model::check(&ops, limit);
}
