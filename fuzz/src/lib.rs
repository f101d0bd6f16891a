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
        Request::MemfdOpen => Frame::MemfdOpen,
        Request::MemfdWhere => Frame::MemfdWhere,
        Request::MemfdChunk { chunk } => Frame::MemfdChunk { chunk },
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
    let mut memfd_open = false;
    let mut model: HashMap<u64, u8> = HashMap::new();
    // At most 40 requests an input: longer ones explore little more and
    // slow every run (the page space is 80 pages).
    let data = &data[..data.len().min(160)];
    let mut i = 0;
    while i + 4 <= data.len() {
        let (op, a, b, fill) = (data[i] % 11, data[i + 1], data[i + 2], data[i + 3]);
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
            6 => {
                // The one-host page path: granted on this Unix socket to a
                // process of the server's own user (this one).
                let Some((h, p)) = c.call(Frame::MemfdOpen, &[]) else {
                    return;
                };
                if said_hello {
                    match wire::decode_reply(&h, &p) {
                        Ok(Reply::MemfdOpenOk { chunk_pages }) => {
                            assert_eq!(chunk_pages, wire::CHUNK_PAGES);
                            memfd_open = true;
                        }
                        other => panic!("MemfdOpen answered {other:?}"),
                    }
                } else {
                    assert_eq!(code(&h, &p), Some(ErrorCode::NoSession));
                }
            }
            7 => {
                // Chunk 0 holds the whole session; any other is beyond it.
                // (The descriptor passed with a grant is dropped by `read`.)
                let chunk = u64::from(a % 3);
                let Some((h, p)) = c.call(Frame::MemfdChunk { chunk }, &[]) else {
                    return;
                };
                match (said_hello, memfd_open, chunk) {
                    (false, _, _) => assert_eq!(code(&h, &p), Some(ErrorCode::NoSession)),
                    (true, false, _) => assert_eq!(code(&h, &p), Some(ErrorCode::Malformed)),
                    (true, true, 0) => match wire::decode_reply(&h, &p) {
                        Ok(Reply::MemfdChunkOk { chunk: 0, pages }) => {
                            assert_eq!(pages, MAX_PAGES)
                        }
                        other => panic!("MemfdChunk 0 answered {other:?}"),
                    },
                    (true, true, _) => assert_eq!(code(&h, &p), Some(ErrorCode::OutOfRange)),
                }
            }
            8 | 9 => {
                // UCX is never offered on a Unix socket: its engine would
                // serve any peer that reaches it.
                let frame = if op == 8 {
                    Frame::UcxOpen
                } else {
                    Frame::UcxChunk {
                        chunk: u64::from(a),
                    }
                };
                let Some((h, p)) = c.call(frame, &[]) else {
                    return;
                };
                let want = match (said_hello, op) {
                    (false, _) => ErrorCode::NoSession,
                    (true, 8) => ErrorCode::Unsupported,
                    (true, _) => ErrorCode::Malformed,
                };
                assert_eq!(code(&h, &p), Some(want), "{frame:?}");
            }
            10 => {
                // A Unix server has no side door (only a TCP server opens
                // one, for clients on its host).
                let Some((h, p)) = c.call(Frame::MemfdWhere, &[]) else {
                    return;
                };
                let want = if said_hello {
                    ErrorCode::Unsupported
                } else {
                    ErrorCode::NoSession
                };
                assert_eq!(code(&h, &p), Some(want));
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

/// A scripted memory server for [`client_replies`]: every reply the client
/// reads comes from the fuzzer's bytes, whatever it asked; what it sends is
/// dropped. A grant may come with a descriptor: a sealed memory file of the
/// right size, one of the wrong size, or an ordinary file.
struct ScriptedServer {
    replies: std::sync::Mutex<std::collections::VecDeque<u8>>,
    fds: u8,
}

impl ScriptedServer {
    fn take(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut r = self.replies.lock().unwrap();
        if r.is_empty() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "no reply"));
        }
        let n = buf.len().min(r.len());
        for b in &mut buf[..n] {
            *b = r.pop_front().unwrap();
        }
        Ok(n)
    }
}

impl farmem_runtime::backend::transport::Transport for ScriptedServer {
    fn send(&self, _parts: &[&[u8]], _wait: farmem_sys::net::Wait) -> std::io::Result<()> {
        Ok(())
    }
    fn recv_exact(&self, buf: &mut [u8], _wait: farmem_sys::net::Wait) -> std::io::Result<()> {
        let n = self.take(buf)?;
        if n < buf.len() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "short reply"));
        }
        Ok(())
    }
    fn recv_some(
        &self,
        bufs: &mut [&mut [u8]],
        _wait: farmem_sys::net::Wait,
    ) -> std::io::Result<usize> {
        match bufs.iter_mut().find(|b| !b.is_empty()) {
            Some(b) => self.take(b),
            None => Ok(0),
        }
    }
    fn is_local(&self) -> bool {
        true
    }
    fn same_host(&self) -> bool {
        true
    }
    fn closed(&self) -> bool {
        false
    }
    fn recv_exact_with_fd(
        &self,
        buf: &mut [u8],
        wait: farmem_sys::net::Wait,
    ) -> std::io::Result<Option<std::os::fd::OwnedFd>> {
        self.recv_exact(buf, wait)?;
        let len = wire::CHUNK_PAGES * PAGE_SIZE as u64;
        Ok(match self.fds % 4 {
            0 => None,
            1 => farmem_sys::memfd::create_sealed(c"fuzz-chunk", len, false).ok(),
            2 => farmem_sys::memfd::create_sealed(c"fuzz-short", 4096, false).ok(),
            _ => std::fs::File::open("/dev/null").ok().map(Into::into),
        })
    }
}

/// Bytes as everything a memory server answers (the first two choose the
/// page path and what descriptors it passes): the client's reply handling
/// (the greeting, MemfdOpen, grants, reads, write acknowledgements, Free)
/// never panics, never hangs and never trusts a descriptor it should not;
/// whatever goes wrong is an error naming the server.
pub fn client_replies(data: &[u8]) {
    if data.len() < 2 {
        return;
    }
    let transport = if data[0] & 1 == 0 { "socket" } else { "memfd" };
    let cfg = farmem_runtime::Config::from_str_config(&format!(
        "transport={transport} conns=1 timeout_ms=10 spin_us=0"
    ))
    .unwrap();
    let link = ScriptedServer {
        replies: std::sync::Mutex::new(data[2..].iter().copied().collect()),
        fds: data[1],
    };
    let links: Vec<Box<dyn farmem_runtime::backend::transport::Transport>> = vec![Box::new(link)];
    let Ok(b) = farmem_runtime::backend::RemoteBackend::over_links(
        &cfg,
        vec![("scripted".to_string(), links)],
        64,
    ) else {
        return;
    };
    use farmem_runtime::backend::{Backend, MemoryServers};
    let granted = b.prepare(0, 64);
    let memfd = transport == "memfd";
    // Only a sealed memory file of the chunk's size (choice 1) is ever
    // taken: anything else fails the grant.
    if memfd && data[1] % 4 != 1 {
        assert!(granted.is_err(), "a bad descriptor was accepted");
    }
    let mut buf = vec![0u8; 3 * PAGE_SIZE];
    let _ = b.read(&[0, 1, 2], &mut buf);
    let page = vec![0x33u8; PAGE_SIZE];
    let wrote = b.write(&[3, 4], &[&page, &page]);
    let read = b.read(&[4], &mut buf[..PAGE_SIZE]);
    // Through a granted memory file no server reply is involved: what was
    // written reads back.
    if memfd && granted.is_ok() && wrote.is_ok() && read.is_ok() {
        assert_eq!(&buf[..PAGE_SIZE], &page[..], "a page read back differs");
    }
    let _ = b.free(0, 64);
}
