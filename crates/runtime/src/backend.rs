//! Where far pages live: one small trait, two stores.
//!
//! Both are called from the SIGBUS handler, so their fast paths allocate
//! nothing and make only raw syscalls.

use crate::config::{Config, FileDirect};
use farmem_sys::net::{recv_exact, send_vectored, set_nonblocking, Wait, MAX_IOV};
use farmem_sys::PAGE_SIZE;
use farmem_wire::{self as wire, ErrorCode, Header, Op, HEADER_LEN};
use std::io;
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use thiserror::Error;

/// Most pages in one backend call.
pub const MAX_PAGES_PER_CALL: usize = crate::config::MAX_BATCH as usize;

#[derive(Debug, Error)]
pub enum BackendError {
    #[error("memory server {server}: {source}")]
    Io { server: String, source: io::Error },
    #[error("memory server {server} refused: {message} ({code:?})")]
    Refused {
        server: String,
        code: Option<ErrorCode>,
        message: String,
    },
    #[error("memory server {server} sent a bad reply: {why}")]
    Protocol { server: String, why: String },
    #[error(
        "cannot connect to memory server {server}: {source} (is `farmem serve` running there?)"
    )]
    Connect { server: String, source: io::Error },
    #[error("far-memory file {path}: {source}")]
    File { path: PathBuf, source: io::Error },
}

/// A page store. `pages` are far page numbers; `read` fills `buf` with
/// `pages.len()` pages in order; `write` sends one page-sized slice per page.
pub trait Backend: Send + Sync {
    fn read(&self, pages: &[u64], buf: &mut [u8]) -> Result<(), BackendError>;
    fn write(&self, pages: &[u64], data: &[&[u8]]) -> Result<(), BackendError>;
    /// Release pages `[start, start+n)`.
    fn free(&self, start: u64, n: u64) -> Result<(), BackendError>;
    /// One line for messages: what and where.
    fn describe(&self) -> String;
    /// Which server (by name) holds `page`; for error messages.
    fn holder(&self, page: u64) -> String;
}

struct Conn {
    busy: AtomicBool,
    fd: RawFd,
    tag: AtomicU32,
}

struct Server {
    name: String,
    conns: Vec<Conn>,
}

/// Pages striped over `farmem serve` memory servers.
pub struct RemoteBackend {
    servers: Vec<Server>,
    stripe: u64,
    wait: Wait,
}

impl Drop for RemoteBackend {
    fn drop(&mut self) {
        for s in &self.servers {
            for c in &s.conns {
                // SAFETY: the fd was created by `connect` and is owned here.
                drop(unsafe { OwnedFd::from_raw_fd(c.fd) });
            }
        }
    }
}

/// The wire form of the page numbers `pages[i]` for `i` in `idx`.
fn page_list(pages: &[u64], idx: &[usize]) -> [u8; MAX_PAGES_PER_CALL * 8] {
    let mut list = [0u8; MAX_PAGES_PER_CALL * 8];
    for (k, &i) in idx.iter().enumerate() {
        list[k * 8..k * 8 + 8].copy_from_slice(&pages[i].to_le_bytes());
    }
    list
}

/// Open one connection to `name`: `host:port` over TCP, or `unix:/path` /
/// `unix:@name` for a server on this machine.
fn connect_one(name: &str, timeout_ms: u64) -> Result<RawFd, BackendError> {
    let err = |source| BackendError::Connect {
        server: name.to_string(),
        source,
    };
    if let Some(path) = name.strip_prefix("unix:") {
        let s = match path.strip_prefix('@') {
            Some(abs) => {
                use std::os::linux::net::SocketAddrExt;
                let sa = std::os::unix::net::SocketAddr::from_abstract_name(abs).map_err(err)?;
                std::os::unix::net::UnixStream::connect_addr(&sa)
            }
            None => std::os::unix::net::UnixStream::connect(path),
        }
        .map_err(err)?;
        return Ok(s.into_raw_fd());
    }
    let addrs: Vec<_> = name.to_socket_addrs().map_err(err)?.collect();
    let timeout = std::time::Duration::from_millis(timeout_ms.min(5000));
    let mut last = None;
    for a in &addrs {
        match TcpStream::connect_timeout(a, timeout) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s.into_raw_fd());
            }
            Err(e) => last = Some(e),
        }
    }
    Err(err(last.unwrap_or_else(|| {
        io::Error::other("the name resolves to no address")
    })))
}

fn random_token() -> [u8; wire::TOKEN_LEN] {
    let mut t = [0u8; wire::TOKEN_LEN];
    // SAFETY: the pointer/length describe `t`.
    let r = unsafe { libc::getrandom(t.as_mut_ptr().cast(), t.len(), 0) };
    if r != t.len() as isize {
        // Fall back to time and pid: the token only separates sessions.
        let seed = farmem_sys::now_ns() ^ ((std::process::id() as u64) << 32);
        t[..8].copy_from_slice(&seed.to_le_bytes());
    }
    t
}

impl RemoteBackend {
    /// Connect `cfg.conns` connections to each server and open one session
    /// (a fresh random token) spanning `max_pages` pages.
    pub fn connect(
        cfg: &Config,
        servers: &[String],
        max_pages: u64,
    ) -> Result<RemoteBackend, BackendError> {
        let token = random_token();
        let wait = Wait {
            spin_ns: cfg.spin_us * 1000,
            timeout_ns: cfg.timeout_ms * 1_000_000,
        };
        let mut out = Vec::new();
        for name in servers {
            let mut conns = Vec::new();
            for _ in 0..cfg.conns {
                let fd = connect_one(name, cfg.timeout_ms)?;
                let conn = Conn {
                    busy: AtomicBool::new(false),
                    fd,
                    tag: AtomicU32::new(1),
                };
                // The Hello handshake on this connection (an error here
                // leaks the fd; initialisation then fails anyway).
                let server = Server {
                    name: name.clone(),
                    conns: vec![conn],
                };
                let io_err = |source| BackendError::Io {
                    server: name.clone(),
                    source,
                };
                set_nonblocking(fd).map_err(io_err)?;
                let mut hello = Vec::with_capacity(HEADER_LEN + 24);
                hello.extend_from_slice(
                    &Header::new(Op::Hello, 0, 0, (wire::TOKEN_LEN + 8) as u32).encode(),
                );
                hello.extend_from_slice(&token);
                hello.extend_from_slice(&max_pages.to_le_bytes());
                send_vectored(fd, &[&hello], wait).map_err(io_err)?;
                let mut payload = [0u8; 24];
                expect_reply(&server, fd, Op::HelloOk, 0, &mut payload, wait)?;
                let Server { conns: mut c, .. } = server;
                conns.push(c.remove(0));
            }
            out.push(Server {
                name: name.clone(),
                conns,
            });
        }
        Ok(RemoteBackend {
            servers: out,
            stripe: cfg.stripe_pages,
            wait,
        })
    }

    fn server_of(&self, page: u64) -> usize {
        ((page / self.stripe) % self.servers.len() as u64) as usize
    }

    /// Take a free connection to server `s` (spinning while all are busy).
    fn acquire(&self, s: usize) -> &Conn {
        let conns = &self.servers[s].conns;
        let start = farmem_sys::gettid() as usize;
        let mut spins = 0u32;
        loop {
            for i in 0..conns.len() {
                let c = &conns[(start + i) % conns.len()];
                if c.busy
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return c;
                }
            }
            spins += 1;
            if spins.is_multiple_of(32) {
                farmem_sys::sched_yield();
            } else {
                farmem_sys::cpu_relax();
            }
        }
    }

    /// Read the pages of `pages` held by server `s` (at positions `idx`) into `buf`.
    fn read_from(
        &self,
        s: usize,
        pages: &[u64],
        idx: &[usize],
        buf: &mut [u8],
    ) -> Result<(), BackendError> {
        let server = &self.servers[s];
        let conn = self.acquire(s);
        let r = (|| {
            let tag = conn.tag.fetch_add(1, Ordering::Relaxed);
            let n = idx.len();
            let list = page_list(pages, idx);
            let hdr = Header::new(Op::Read, tag, n as u32, (n * 8) as u32).encode();
            send_vectored(conn.fd, &[&hdr, &list[..n * 8]], self.wait).map_err(|source| {
                BackendError::Io {
                    server: server.name.clone(),
                    source,
                }
            })?;
            let io_err = |source| BackendError::Io {
                server: server.name.clone(),
                source,
            };
            // Common case: the whole batch, in order: receive header and
            // pages with one scattered recvmsg, straight into place.
            let contiguous = idx.iter().enumerate().all(|(k, &i)| i == idx[0] + k);
            if contiguous {
                let start = idx[0] * PAGE_SIZE;
                let dst = &mut buf[start..start + n * PAGE_SIZE];
                recv_reply(server, conn.fd, Op::ReadOk, tag, dst, self.wait)?;
            } else {
                let h = read_header(server, conn.fd, self.wait)?;
                let len = (n * PAGE_SIZE) as u32;
                check_reply(server, conn.fd, &h, Op::ReadOk, tag, len, self.wait)?;
                for &i in idx {
                    let dst = &mut buf[i * PAGE_SIZE..(i + 1) * PAGE_SIZE];
                    recv_exact(conn.fd, dst, self.wait).map_err(io_err)?;
                }
            }
            Ok(())
        })();
        conn.busy.store(false, Ordering::Release);
        r
    }

    fn write_to(
        &self,
        s: usize,
        pages: &[u64],
        data: &[&[u8]],
        idx: &[usize],
    ) -> Result<(), BackendError> {
        let server = &self.servers[s];
        let conn = self.acquire(s);
        let r = (|| {
            let tag = conn.tag.fetch_add(1, Ordering::Relaxed);
            let n = idx.len();
            let list = page_list(pages, idx);
            let hdr = Header::new(Op::Write, tag, n as u32, (n * (8 + PAGE_SIZE)) as u32).encode();
            let mut parts: [&[u8]; MAX_IOV] = [&[]; MAX_IOV];
            parts[0] = &hdr;
            parts[1] = &list[..n * 8];
            for (k, &i) in idx.iter().enumerate() {
                parts[2 + k] = data[i];
            }
            send_vectored(conn.fd, &parts[..2 + n], self.wait).map_err(|source| {
                BackendError::Io {
                    server: server.name.clone(),
                    source,
                }
            })?;
            recv_reply(server, conn.fd, Op::WriteOk, tag, &mut [], self.wait)
        })();
        conn.busy.store(false, Ordering::Release);
        r
    }

    /// Group a batch's positions by server, then call `f` once per server.
    fn per_server(
        &self,
        pages: &[u64],
        mut f: impl FnMut(usize, &[usize]) -> Result<(), BackendError>,
    ) -> Result<(), BackendError> {
        assert!(pages.len() <= MAX_PAGES_PER_CALL);
        let first = self.server_of(pages[0]);
        if pages.iter().all(|&p| self.server_of(p) == first) {
            let mut idx = [0usize; MAX_PAGES_PER_CALL];
            for (i, slot) in idx.iter_mut().enumerate().take(pages.len()) {
                *slot = i;
            }
            return f(first, &idx[..pages.len()]);
        }
        for s in 0..self.servers.len() {
            let mut idx = [0usize; MAX_PAGES_PER_CALL];
            let mut n = 0;
            for (i, &p) in pages.iter().enumerate() {
                if self.server_of(p) == s {
                    idx[n] = i;
                    n += 1;
                }
            }
            if n > 0 {
                f(s, &idx[..n])?;
            }
        }
        Ok(())
    }
}

fn read_header(server: &Server, fd: RawFd, wait: Wait) -> Result<Header, BackendError> {
    let mut hb = [0u8; HEADER_LEN];
    recv_exact(fd, &mut hb, wait).map_err(|source| BackendError::Io {
        server: server.name.clone(),
        source,
    })?;
    Header::decode(&hb).map_err(|e| BackendError::Protocol {
        server: server.name.clone(),
        why: e.to_string(),
    })
}

/// Check a reply header; an Error reply becomes `Refused` with its message.
fn check_reply(
    server: &Server,
    fd: RawFd,
    h: &Header,
    op: Op,
    tag: u32,
    len: u32,
    wait: Wait,
) -> Result<(), BackendError> {
    if h.op == Op::Error {
        let mut msg = [0u8; wire::MAX_ERROR_MSG];
        let n = h.len as usize;
        recv_exact(fd, &mut msg[..n], wait).map_err(|source| BackendError::Io {
            server: server.name.clone(),
            source,
        })?;
        return Err(BackendError::Refused {
            server: server.name.clone(),
            code: ErrorCode::from_u32(h.status),
            message: String::from_utf8_lossy(&msg[..n]).into_owned(),
        });
    }
    if h.op != op || h.tag != tag || h.len != len {
        return Err(BackendError::Protocol {
            server: server.name.clone(),
            why: format!(
                "expected {op:?} tag {tag} len {len}, got {:?} tag {} len {}",
                h.op, h.tag, h.len
            ),
        });
    }
    Ok(())
}

/// Receive a reply whose payload is expected to be exactly `data.len()`
/// bytes, header and payload in as few system calls as possible. An Error
/// reply (shorter) is recognised from its header and returned as `Refused`.
fn recv_reply(
    server: &Server,
    fd: RawFd,
    op: Op,
    tag: u32,
    data: &mut [u8],
    wait: Wait,
) -> Result<(), BackendError> {
    let io_err = |source| BackendError::Io {
        server: server.name.clone(),
        source,
    };
    let mut hb = [0u8; HEADER_LEN];
    let mut got = 0usize;
    // Until the header is complete, scatter into header and payload; only one
    // request is outstanding per connection, so nothing beyond this reply
    // can arrive.
    while got < HEADER_LEN {
        let r = farmem_sys::net::recv_some_vectored(fd, &mut [&mut hb[got..], &mut data[..]], wait)
            .map_err(io_err)?;
        if r == 0 {
            let eof = io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed by peer");
            return Err(io_err(eof));
        }
        got += r;
    }
    let in_data = got - HEADER_LEN;
    let h = Header::decode(&hb).map_err(|e| BackendError::Protocol {
        server: server.name.clone(),
        why: e.to_string(),
    })?;
    if h.op == Op::Error {
        let n = h.len as usize;
        let mut msg = [0u8; wire::MAX_ERROR_MSG];
        let have = in_data.min(n);
        msg[..have].copy_from_slice(&data[..have]);
        recv_exact(fd, &mut msg[have..n], wait).map_err(io_err)?;
        return Err(BackendError::Refused {
            server: server.name.clone(),
            code: ErrorCode::from_u32(h.status),
            message: String::from_utf8_lossy(&msg[..n]).into_owned(),
        });
    }
    if h.op != op || h.tag != tag || h.len as usize != data.len() {
        return Err(BackendError::Protocol {
            server: server.name.clone(),
            why: format!(
                "expected {op:?} tag {tag} len {}, got {:?} tag {} len {}",
                data.len(),
                h.op,
                h.tag,
                h.len
            ),
        });
    }
    recv_exact(fd, &mut data[in_data..], wait).map_err(io_err)
}

fn expect_reply(
    server: &Server,
    fd: RawFd,
    op: Op,
    tag: u32,
    payload: &mut [u8],
    wait: Wait,
) -> Result<(), BackendError> {
    let h = read_header(server, fd, wait)?;
    check_reply(server, fd, &h, op, tag, payload.len() as u32, wait)?;
    recv_exact(fd, payload, wait).map_err(|source| BackendError::Io {
        server: server.name.clone(),
        source,
    })
}

impl Backend for RemoteBackend {
    fn read(&self, pages: &[u64], buf: &mut [u8]) -> Result<(), BackendError> {
        self.per_server(pages, |s, idx| self.read_from(s, pages, idx, buf))
    }

    fn write(&self, pages: &[u64], data: &[&[u8]]) -> Result<(), BackendError> {
        self.per_server(pages, |s, idx| self.write_to(s, pages, data, idx))
    }

    fn free(&self, start: u64, n: u64) -> Result<(), BackendError> {
        // Every server may hold part of the range.
        for (s, server) in self.servers.iter().enumerate() {
            let conn = self.acquire(s);
            let r = (|| {
                let tag = conn.tag.fetch_add(1, Ordering::Relaxed);
                let mut p = [0u8; 16];
                p[..8].copy_from_slice(&start.to_le_bytes());
                p[8..].copy_from_slice(&n.to_le_bytes());
                let hdr = Header::new(Op::Free, tag, 0, 16).encode();
                send_vectored(conn.fd, &[&hdr, &p], self.wait).map_err(|source| {
                    BackendError::Io {
                        server: server.name.clone(),
                        source,
                    }
                })?;
                let h = read_header(server, conn.fd, self.wait)?;
                check_reply(server, conn.fd, &h, Op::FreeOk, tag, 0, self.wait)
            })();
            conn.busy.store(false, Ordering::Release);
            r?;
        }
        Ok(())
    }

    fn describe(&self) -> String {
        let names: Vec<_> = self.servers.iter().map(|s| s.name.as_str()).collect();
        format!("memory servers {}", names.join(","))
    }

    fn holder(&self, page: u64) -> String {
        self.servers[self.server_of(page)].name.clone()
    }
}

/// Pages in a file (an SSD), page `p` at offset `p * 4096`.
pub struct FileBackend {
    path: PathBuf,
    fd: OwnedFd,
    pub direct: bool,
}

impl FileBackend {
    pub fn open(path: &std::path::Path, mode: FileDirect) -> Result<FileBackend, BackendError> {
        use std::os::unix::fs::OpenOptionsExt;
        let err = |source| BackendError::File {
            path: path.to_path_buf(),
            source,
        };
        let open = |direct: bool| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .custom_flags(if direct { libc::O_DIRECT } else { 0 })
                .open(path)
        };
        let (file, direct) = match mode {
            FileDirect::On => (open(true).map_err(err)?, true),
            FileDirect::Off => (open(false).map_err(err)?, false),
            // tmpfs and some filesystems refuse O_DIRECT: fall back to buffered.
            FileDirect::Auto => match open(true) {
                Ok(f) => (f, true),
                Err(_) => (open(false).map_err(err)?, false),
            },
        };
        Ok(FileBackend {
            path: path.to_path_buf(),
            fd: file.into(),
            direct,
        })
    }
}

impl Backend for FileBackend {
    fn read(&self, pages: &[u64], buf: &mut [u8]) -> Result<(), BackendError> {
        let mut i = 0;
        while i < pages.len() {
            // Read each run of consecutive pages with one pread.
            let mut j = i + 1;
            while j < pages.len() && pages[j] == pages[j - 1] + 1 {
                j += 1;
            }
            let dst = &mut buf[i * PAGE_SIZE..j * PAGE_SIZE];
            let got =
                farmem_sys::net::pread_full(self.fd.as_raw_fd(), dst, pages[i] * PAGE_SIZE as u64)
                    .map_err(|source| BackendError::File {
                        path: self.path.clone(),
                        source,
                    })?;
            if got != dst.len() {
                return Err(BackendError::File {
                    path: self.path.clone(),
                    source: io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the file is shorter than the pages written to it (was it truncated?)",
                    ),
                });
            }
            i = j;
        }
        Ok(())
    }

    fn write(&self, pages: &[u64], data: &[&[u8]]) -> Result<(), BackendError> {
        for (p, d) in pages.iter().zip(data) {
            farmem_sys::net::pwrite_full(self.fd.as_raw_fd(), d, p * PAGE_SIZE as u64).map_err(
                |source| BackendError::File {
                    path: self.path.clone(),
                    source,
                },
            )?;
        }
        Ok(())
    }

    fn free(&self, start: u64, n: u64) -> Result<(), BackendError> {
        // Punch a hole so the SSD space comes back; not all filesystems can.
        // SAFETY: fallocate takes plain integers.
        let r = unsafe {
            libc::fallocate(
                self.fd.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                (start * PAGE_SIZE as u64) as libc::off_t,
                (n * PAGE_SIZE as u64) as libc::off_t,
            )
        };
        let _ = r;
        Ok(())
    }

    fn describe(&self) -> String {
        format!(
            "file {} ({} I/O)",
            self.path.display(),
            if self.direct { "direct" } else { "buffered" }
        )
    }

    fn holder(&self, _page: u64) -> String {
        self.path.display().to_string()
    }
}
