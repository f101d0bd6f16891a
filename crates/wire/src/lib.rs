//! The farmem memory-server protocol, version 1.
//!
//! Every message is a 24-byte little-endian header followed by `len` payload
//! bytes. The header says exactly how long the payload is, and for each
//! operation the payload length is a fixed function of `count`, so a receiver
//! validates a frame before reading its payload and never buffers more than
//! [`MAX_PAYLOAD`].
//!
//! ```text
//! offset  size  field
//!      0     4  magic    "FMEM"
//!      4     2  version  1
//!      6     2  op       see [`Op`]
//!      8     4  tag      request id, echoed in the reply
//!     12     4  count    pages (or entries) in the message
//!     16     4  len      payload bytes
//!     20     4  status   0, or an [`ErrorCode`] in an Error reply
//! ```
//!
//! | request | payload | reply |
//! |---|---|---|
//! | Hello   | `token[16]`, max_pages u64 | HelloOk: capacity_pages u64, used_pages u64, page_size u64 |
//! | Read    | count × page u64 | ReadOk: count × 4096 bytes, in request order |
//! | Write   | count × page u64, then count × 4096 bytes | WriteOk (no payload) |
//! | Free    | start u64, pages u64 | FreeOk, count = pages released |
//! | Stats   | — | StatsOk: capacity, used, sessions, connections (u64 each) |
//! | Auth    | client `nonce[32]` | AuthChallenge: server `nonce[32]`, server `proof[32]` |
//! | AuthProof | client `proof[32]` | AuthOk (no payload) |
//! | UcxOpen | — | UcxOpenOk: chunk_pages u64, the server's UCX worker address |
//! | UcxChunk | chunk u64 | UcxChunkOk: base address u64, packed remote key |
//!
//! UcxOpen and UcxChunk (after Hello, so after the handshake too) move a
//! session's pages onto UCX: its pages then live in chunks of `chunk_pages`
//! pages that the server allocates and registers once each, page `p` at
//! `base(p / chunk_pages) + (p % chunk_pages) * 4096`, and the client reads
//! and writes them one-sided. A remote key is a capability: a server sends
//! one only to the session that owns the chunk. A server without UCX
//! answers UcxOpen with an Error of code `Unsupported`.
//!
//! A server with a shared secret takes nothing on a TCP connection before
//! Auth and AuthProof have passed (see [`auth`]); on a Unix socket, which
//! only this machine can reach, and on a server without a secret, a
//! connection starts at Hello.
//!
//! One codec for both sides: [`Frame`] encodes any frame's head (header
//! and fixed payload; page data travels after it, gathered from where it
//! lies), [`decode_request`] and [`decode_reply`] decode them. The client
//! (`farmem-runtime`), the server and their tests all go through it.
//!
//! A session is named by the client's random 128-bit token: all connections
//! presenting the same token share one page space, and no other token can
//! reach it. Page numbers must be below the `max_pages` declared at Hello.

pub mod auth;

use thiserror::Error;

pub const MAGIC: u32 = u32::from_le_bytes(*b"FMEM");
pub const VERSION: u16 = 1;
pub const HEADER_LEN: usize = 24;
pub const PAGE_SIZE: usize = 4096;
/// Most pages one Read or Write may carry (1 MiB of data).
pub const MAX_BATCH: u32 = 256;
/// Largest payload any frame may have.
pub const MAX_PAYLOAD: usize = MAX_BATCH as usize * (8 + PAGE_SIZE);
/// Largest page-number space a session may declare (2^40 pages = 4 PiB).
pub const MAX_PAGES: u64 = 1 << 40;
/// Longest UCX worker address or packed remote key a frame carries.
pub const MAX_UCX_BLOB: usize = MAX_BATCH as usize * 8 - 8;
/// Length of the session token.
pub const TOKEN_LEN: usize = 16;
/// Longest error message carried in an Error frame.
pub const MAX_ERROR_MSG: usize = 1024;

/// Operation codes. Replies have the high bit set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Op {
    Hello = 1,
    Read = 2,
    Write = 3,
    Free = 4,
    Stats = 5,
    Auth = 6,
    AuthProof = 7,
    UcxOpen = 8,
    UcxChunk = 9,
    HelloOk = 0x81,
    ReadOk = 0x82,
    WriteOk = 0x83,
    FreeOk = 0x84,
    StatsOk = 0x85,
    AuthChallenge = 0x86,
    AuthOk = 0x87,
    UcxOpenOk = 0x88,
    UcxChunkOk = 0x89,
    Error = 0xFF,
}

impl Op {
    pub fn from_u16(v: u16) -> Option<Op> {
        Some(match v {
            1 => Op::Hello,
            2 => Op::Read,
            3 => Op::Write,
            4 => Op::Free,
            5 => Op::Stats,
            6 => Op::Auth,
            7 => Op::AuthProof,
            8 => Op::UcxOpen,
            9 => Op::UcxChunk,
            0x81 => Op::HelloOk,
            0x82 => Op::ReadOk,
            0x83 => Op::WriteOk,
            0x84 => Op::FreeOk,
            0x85 => Op::StatsOk,
            0x86 => Op::AuthChallenge,
            0x87 => Op::AuthOk,
            0x88 => Op::UcxOpenOk,
            0x89 => Op::UcxChunkOk,
            0xFF => Op::Error,
            _ => return None,
        })
    }
}

/// Error codes carried in the `status` field of an Error reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum ErrorCode {
    BadMagic = 1,
    BadVersion = 2,
    UnknownOp = 3,
    BadLength = 4,
    TooLarge = 5,
    OutOfRange = 6,
    NoSession = 7,
    Capacity = 8,
    NotFound = 9,
    Malformed = 10,
    /// This server needs the shared secret before anything else.
    AuthRequired = 11,
    /// The client's proof did not match, or this server has no secret.
    AuthFailed = 12,
    /// The server cannot do what was asked (UCX is not available there).
    Unsupported = 13,
}

impl ErrorCode {
    pub fn from_u32(v: u32) -> Option<ErrorCode> {
        Some(match v {
            1 => ErrorCode::BadMagic,
            2 => ErrorCode::BadVersion,
            3 => ErrorCode::UnknownOp,
            4 => ErrorCode::BadLength,
            5 => ErrorCode::TooLarge,
            6 => ErrorCode::OutOfRange,
            7 => ErrorCode::NoSession,
            8 => ErrorCode::Capacity,
            9 => ErrorCode::NotFound,
            10 => ErrorCode::Malformed,
            11 => ErrorCode::AuthRequired,
            12 => ErrorCode::AuthFailed,
            13 => ErrorCode::Unsupported,
            _ => return None,
        })
    }

    /// Whether the connection stays usable after this error. Framing errors
    /// leave the stream position unknown, so the server closes after them.
    pub fn keeps_connection(self) -> bool {
        matches!(
            self,
            ErrorCode::OutOfRange
                | ErrorCode::NoSession
                | ErrorCode::Capacity
                | ErrorCode::NotFound
                | ErrorCode::Malformed
                | ErrorCode::Unsupported
        )
    }
}

/// What was wrong with a frame.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum WireError {
    #[error("bad magic {0:#010x}: the peer is not speaking the farmem protocol")]
    BadMagic(u32),
    #[error("protocol version {0} is not supported (this build speaks version {VERSION})")]
    BadVersion(u16),
    #[error("unknown operation code {0:#x}")]
    UnknownOp(u16),
    #[error("payload of {len} bytes does not fit operation {op:?} with count {count}")]
    BadLength { op: Op, count: u32, len: u32 },
    #[error("frame of {0} pages exceeds the limit of {MAX_BATCH}")]
    TooLarge(u32),
    #[error("malformed payload: {0}")]
    Malformed(&'static str),
}

impl WireError {
    pub fn code(&self) -> ErrorCode {
        match self {
            WireError::BadMagic(_) => ErrorCode::BadMagic,
            WireError::BadVersion(_) => ErrorCode::BadVersion,
            WireError::UnknownOp(_) => ErrorCode::UnknownOp,
            WireError::BadLength { .. } => ErrorCode::BadLength,
            WireError::TooLarge(_) => ErrorCode::TooLarge,
            WireError::Malformed(_) => ErrorCode::Malformed,
        }
    }
}

/// A decoded, validated frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub op: Op,
    pub tag: u32,
    pub count: u32,
    pub len: u32,
    pub status: u32,
}

impl Header {
    pub fn new(op: Op, tag: u32, count: u32, len: u32) -> Header {
        Header {
            op,
            tag,
            count,
            len,
            status: 0,
        }
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&(self.op as u16).to_le_bytes());
        b[8..12].copy_from_slice(&self.tag.to_le_bytes());
        b[12..16].copy_from_slice(&self.count.to_le_bytes());
        b[16..20].copy_from_slice(&self.len.to_le_bytes());
        b[20..24].copy_from_slice(&self.status.to_le_bytes());
        b
    }

    /// Decode and validate a header: magic, version, op, batch limit and the
    /// exact payload length the op requires.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Header, WireError> {
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let magic = u32_at(0);
        if magic != MAGIC {
            return Err(WireError::BadMagic(magic));
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != VERSION {
            return Err(WireError::BadVersion(version));
        }
        let op_raw = u16::from_le_bytes([b[6], b[7]]);
        let op = Op::from_u16(op_raw).ok_or(WireError::UnknownOp(op_raw))?;
        let h = Header {
            op,
            tag: u32_at(8),
            count: u32_at(12),
            len: u32_at(16),
            status: u32_at(20),
        };
        if matches!(op, Op::Read | Op::Write | Op::ReadOk | Op::WriteOk) && h.count > MAX_BATCH {
            return Err(WireError::TooLarge(h.count));
        }
        if !payload_len_ok(op, h.count, h.len) {
            return Err(WireError::BadLength {
                op,
                count: h.count,
                len: h.len,
            });
        }
        // Fields an op does not use must be zero, so that every frame has
        // one encoding (found by fuzzing: a Free with a count re-encoded
        // differently).
        let counts = matches!(
            op,
            Op::Read | Op::Write | Op::ReadOk | Op::WriteOk | Op::FreeOk
        );
        if !counts && h.count != 0 {
            return Err(WireError::Malformed("count must be 0 for this operation"));
        }
        if op != Op::Error && h.status != 0 {
            return Err(WireError::Malformed(
                "status must be 0 except in an Error reply",
            ));
        }
        Ok(h)
    }
}

/// The payload length each op requires for `count`.
pub fn payload_len_ok(op: Op, count: u32, len: u32) -> bool {
    let c = count as usize;
    let l = len as usize;
    if l > MAX_PAYLOAD {
        return false;
    }
    match op {
        Op::Hello => l == TOKEN_LEN + 8,
        Op::HelloOk => l == 24,
        Op::Read => c > 0 && l == c * 8,
        Op::ReadOk => l == c * PAGE_SIZE,
        Op::Write => c > 0 && l == c * (8 + PAGE_SIZE),
        Op::WriteOk => l == 0,
        Op::Free => l == 16,
        Op::FreeOk => l == 0,
        Op::Stats => l == 0,
        Op::StatsOk => l == 32,
        Op::Auth | Op::AuthProof => l == auth::NONCE_LEN,
        Op::AuthChallenge => l == auth::NONCE_LEN + auth::MAC_LEN,
        Op::AuthOk => l == 0,
        Op::UcxOpen => l == 0,
        Op::UcxChunk => l == 8,
        Op::UcxOpenOk | Op::UcxChunkOk => l > 8 && l <= 8 + MAX_UCX_BLOB,
        Op::Error => l <= MAX_ERROR_MSG,
    }
}

/// A decoded request, borrowing its payload.
#[derive(Debug, PartialEq, Eq)]
pub enum Request<'a> {
    Hello {
        token: [u8; TOKEN_LEN],
        max_pages: u64,
    },
    /// Page numbers as raw little-endian bytes; iterate with [`pages`].
    Read {
        pages: &'a [u8],
    },
    Write {
        pages: &'a [u8],
        data: &'a [u8],
    },
    Free {
        start: u64,
        pages: u64,
    },
    Stats,
    Auth {
        nonce: [u8; auth::NONCE_LEN],
    },
    AuthProof {
        proof: [u8; auth::MAC_LEN],
    },
    UcxOpen,
    UcxChunk {
        chunk: u64,
    },
}

/// Iterate the little-endian u64 page numbers of a Read or Write payload.
pub fn pages(raw: &[u8]) -> impl Iterator<Item = u64> + '_ {
    raw.chunks_exact(8)
        .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
}

fn array_at<const N: usize>(p: &[u8], o: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&p[o..o + N]);
    a
}

fn u64_at(p: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&p[o..o + 8]);
    u64::from_le_bytes(a)
}

/// Decode a request payload for a header already validated by
/// [`Header::decode`]. Replies are not requests and are rejected.
pub fn decode_request<'a>(h: &Header, payload: &'a [u8]) -> Result<Request<'a>, WireError> {
    if payload.len() != h.len as usize {
        return Err(WireError::Malformed("payload shorter than the header says"));
    }
    Ok(match h.op {
        Op::Hello => {
            let mut token = [0u8; TOKEN_LEN];
            token.copy_from_slice(&payload[..TOKEN_LEN]);
            let max_pages = u64_at(payload, TOKEN_LEN);
            if max_pages == 0 || max_pages > MAX_PAGES {
                return Err(WireError::Malformed("max_pages must be in 1..=2^40"));
            }
            Request::Hello { token, max_pages }
        }
        Op::Read => Request::Read { pages: payload },
        Op::Write => {
            let n = h.count as usize * 8;
            Request::Write {
                pages: &payload[..n],
                data: &payload[n..],
            }
        }
        Op::Free => Request::Free {
            start: u64_at(payload, 0),
            pages: u64_at(payload, 8),
        },
        Op::Stats => Request::Stats,
        Op::Auth => Request::Auth {
            nonce: array_at(payload, 0),
        },
        Op::AuthProof => Request::AuthProof {
            proof: array_at(payload, 0),
        },
        Op::UcxOpen => Request::UcxOpen,
        Op::UcxChunk => Request::UcxChunk {
            chunk: u64_at(payload, 0),
        },
        other => return Err(WireError::UnknownOp(other as u16)),
    })
}

/// Where a memory server listens and clients connect: TCP `HOST:PORT` (a
/// name or an address, IPv6 in brackets: `[::1]:7070`), a Unix socket
/// `unix:/PATH`, or `unix:@NAME` in the abstract namespace (same machine
/// only, no file). The one parser of server addresses: `farmem serve
/// --listen`, `FARMEM_SERVERS`, `farmem run --servers` and the client.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ServerAddr {
    Tcp { host: String, port: u16 },
    Unix(String),
    UnixAbstract(String),
}

/// Why a string is not a [`ServerAddr`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{given:?} is not a server address: {why}; write host:port (e.g. 10.0.0.2:7070 or [::1]:7070), unix:/path or unix:@name")]
pub struct AddrError {
    pub given: String,
    pub why: &'static str,
}

/// The longest Unix socket path or abstract name (`sun_path` less its NUL).
pub const MAX_UNIX_NAME: usize = 107;

impl std::str::FromStr for ServerAddr {
    type Err = AddrError;
    fn from_str(s: &str) -> Result<ServerAddr, AddrError> {
        let bad = |why| AddrError {
            given: s.to_string(),
            why,
        };
        if let Some(rest) = s.strip_prefix("unix:") {
            let (name, abs) = match rest.strip_prefix('@') {
                Some(n) => (n, true),
                None => (rest, false),
            };
            if name.is_empty() {
                return Err(bad("the socket name is empty"));
            }
            if name.len() > MAX_UNIX_NAME {
                return Err(bad("a Unix socket name has at most 107 bytes"));
            }
            if name.contains('\0') {
                return Err(bad("a NUL byte in the socket name"));
            }
            return Ok(if abs {
                ServerAddr::UnixAbstract(name.into())
            } else {
                ServerAddr::Unix(name.into())
            });
        }
        let (host, port) = s.rsplit_once(':').ok_or_else(|| bad("no :PORT"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| bad("the port is not a number in 0..=65535"))?;
        let host = match host.strip_prefix('[') {
            Some(h) => {
                let h = h
                    .strip_suffix(']')
                    .ok_or_else(|| bad("an unclosed [ in the host"))?;
                h.parse::<std::net::Ipv6Addr>()
                    .map_err(|_| bad("not an IPv6 address inside [ ]"))?;
                h
            }
            None if host.contains(':') => return Err(bad("an IPv6 address needs brackets")),
            None => host,
        };
        if host.is_empty() {
            return Err(bad("the host is empty"));
        }
        if host
            .chars()
            .any(|c| c.is_whitespace() || c == ',' || c == '/')
        {
            return Err(bad("the host has a space, comma or slash"));
        }
        Ok(ServerAddr::Tcp {
            host: host.into(),
            port,
        })
    }
}

impl std::fmt::Display for ServerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerAddr::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            ServerAddr::Tcp { host, port } => write!(f, "{host}:{port}"),
            ServerAddr::Unix(p) => write!(f, "unix:{p}"),
            ServerAddr::UnixAbstract(n) => write!(f, "unix:@{n}"),
        }
    }
}

impl From<std::net::SocketAddr> for ServerAddr {
    fn from(a: std::net::SocketAddr) -> ServerAddr {
        ServerAddr::Tcp {
            host: a.ip().to_string(),
            port: a.port(),
        }
    }
}

impl ServerAddr {
    /// Parse a comma-separated list (`FARMEM_SERVERS`); empty items are
    /// skipped, and at least one address is required.
    pub fn parse_list(s: &str) -> Result<Vec<ServerAddr>, AddrError> {
        let v = s
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::parse)
            .collect::<Result<Vec<ServerAddr>, AddrError>>()?;
        if v.is_empty() {
            return Err(AddrError {
                given: s.to_string(),
                why: "no server given",
            });
        }
        Ok(v)
    }

    /// Whether a client can connect here (TCP port 0 only means "any" to a
    /// listener).
    pub fn is_connectable(&self) -> bool {
        !matches!(self, ServerAddr::Tcp { port: 0, .. })
    }
}

/// The server's figures in a StatsOk reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerStats {
    pub capacity_pages: u64,
    pub used_pages: u64,
    pub sessions: u64,
    pub connections: u64,
}

/// Room for the head of any frame: the header and everything but bulk page
/// data (a whole page list, or the longest error message).
pub const MAX_HEAD: usize = HEADER_LEN + MAX_BATCH as usize * 8;

/// A frame to send, request or reply, without its bulk page data: a Write's
/// and a ReadOk's `count` pages follow the head on the wire and are sent from
/// wherever they lie (gathered with the head in one `sendmsg`), never copied
/// into the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    Hello {
        token: &'a [u8; TOKEN_LEN],
        max_pages: u64,
    },
    Read {
        pages: &'a [u64],
    },
    /// Followed by `pages.len()` pages of data.
    Write {
        pages: &'a [u64],
    },
    Free {
        start: u64,
        pages: u64,
    },
    Stats,
    Auth {
        nonce: &'a [u8; auth::NONCE_LEN],
    },
    AuthProof {
        proof: &'a [u8; auth::MAC_LEN],
    },
    HelloOk {
        capacity_pages: u64,
        used_pages: u64,
    },
    /// Followed by `count` pages of data.
    ReadOk {
        count: u32,
    },
    WriteOk {
        count: u32,
    },
    FreeOk {
        released: u32,
    },
    StatsOk(ServerStats),
    AuthChallenge {
        nonce: &'a [u8; auth::NONCE_LEN],
        proof: &'a [u8; auth::MAC_LEN],
    },
    AuthOk,
    UcxOpen,
    UcxChunk {
        chunk: u64,
    },
    /// `address` is at most [`MAX_UCX_BLOB`] bytes.
    UcxOpenOk {
        chunk_pages: u64,
        address: &'a [u8],
    },
    /// `rkey` is at most [`MAX_UCX_BLOB`] bytes.
    UcxChunkOk {
        base: u64,
        rkey: &'a [u8],
    },
    /// The message is cut at [`MAX_ERROR_MSG`] bytes.
    Error {
        code: ErrorCode,
        message: &'a str,
    },
}

/// An encoded frame head (on the stack: the fault path encodes in a signal
/// handler, where nothing may allocate).
pub struct Head {
    buf: [u8; MAX_HEAD],
    len: usize,
}

impl std::ops::Deref for Head {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Head {
    fn put(&mut self, b: &[u8]) {
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }
}

impl Frame<'_> {
    /// The op, count and payload length (bulk data included) of this frame.
    fn shape(&self) -> (Op, u32, usize) {
        let n = |p: &[u64]| u32::try_from(p.len()).unwrap_or(u32::MAX);
        match self {
            Frame::Hello { .. } => (Op::Hello, 0, TOKEN_LEN + 8),
            Frame::Read { pages } => (Op::Read, n(pages), pages.len() * 8),
            Frame::Write { pages } => (Op::Write, n(pages), pages.len() * (8 + PAGE_SIZE)),
            Frame::Free { .. } => (Op::Free, 0, 16),
            Frame::Stats => (Op::Stats, 0, 0),
            Frame::Auth { .. } => (Op::Auth, 0, auth::NONCE_LEN),
            Frame::AuthProof { .. } => (Op::AuthProof, 0, auth::MAC_LEN),
            Frame::AuthChallenge { .. } => (Op::AuthChallenge, 0, auth::NONCE_LEN + auth::MAC_LEN),
            Frame::AuthOk => (Op::AuthOk, 0, 0),
            Frame::HelloOk { .. } => (Op::HelloOk, 0, 24),
            Frame::ReadOk { count } => (Op::ReadOk, *count, *count as usize * PAGE_SIZE),
            Frame::WriteOk { count } => (Op::WriteOk, *count, 0),
            Frame::FreeOk { released } => (Op::FreeOk, *released, 0),
            Frame::StatsOk(_) => (Op::StatsOk, 0, 32),
            Frame::Error { message, .. } => (Op::Error, 0, message.len().min(MAX_ERROR_MSG)),
            Frame::UcxOpen => (Op::UcxOpen, 0, 0),
            Frame::UcxChunk { .. } => (Op::UcxChunk, 0, 8),
            Frame::UcxOpenOk { address: b, .. } => (Op::UcxOpenOk, 0, 8 + b.len()),
            Frame::UcxChunkOk { rkey: b, .. } => (Op::UcxChunkOk, 0, 8 + b.len()),
        }
    }

    /// Encode the header and the fixed part of the payload with `tag`.
    ///
    /// # Panics
    /// If a Read or Write carries more than [`MAX_BATCH`] pages, or a UCX
    /// reply more than [`MAX_UCX_BLOB`] bytes (a caller's bug: batches are
    /// cut, and blobs checked, before they reach the codec).
    pub fn encode(&self, tag: u32) -> Head {
        let (op, count, len) = self.shape();
        assert!(
            !matches!(op, Op::UcxOpenOk | Op::UcxChunkOk) || len <= 8 + MAX_UCX_BLOB,
            "a UCX blob of {} bytes exceeds MAX_UCX_BLOB",
            len - 8
        );
        assert!(
            count <= MAX_BATCH || !matches!(op, Op::Read | Op::Write | Op::ReadOk | Op::WriteOk),
            "a frame of {count} pages exceeds MAX_BATCH"
        );
        let len32 =
            u32::try_from(len).expect("a frame's length fits u32: its batch was checked above");
        let mut h = Header::new(op, tag, count, len32);
        if let Frame::Error { code, .. } = self {
            h.status = *code as u32;
        }
        let mut out = Head {
            buf: [0; MAX_HEAD],
            len: 0,
        };
        out.put(&h.encode());
        match self {
            Frame::Hello { token, max_pages } => {
                out.put(&token[..]);
                out.put(&max_pages.to_le_bytes());
            }
            Frame::Read { pages } | Frame::Write { pages } => {
                for p in *pages {
                    out.put(&p.to_le_bytes());
                }
            }
            Frame::Free { start, pages } => {
                out.put(&start.to_le_bytes());
                out.put(&pages.to_le_bytes());
            }
            Frame::HelloOk {
                capacity_pages,
                used_pages,
            } => {
                out.put(&capacity_pages.to_le_bytes());
                out.put(&used_pages.to_le_bytes());
                out.put(&(PAGE_SIZE as u64).to_le_bytes());
            }
            Frame::StatsOk(s) => {
                for v in [s.capacity_pages, s.used_pages, s.sessions, s.connections] {
                    out.put(&v.to_le_bytes());
                }
            }
            Frame::Error { message, .. } => out.put(&message.as_bytes()[..len]),
            Frame::Auth { nonce } => out.put(&nonce[..]),
            Frame::AuthProof { proof } => out.put(&proof[..]),
            Frame::AuthChallenge { nonce, proof } => {
                out.put(&nonce[..]);
                out.put(&proof[..]);
            }
            Frame::UcxChunk { chunk } => out.put(&chunk.to_le_bytes()),
            Frame::UcxOpenOk {
                chunk_pages,
                address,
            } => {
                out.put(&chunk_pages.to_le_bytes());
                out.put(address);
            }
            Frame::UcxChunkOk { base, rkey } => {
                out.put(&base.to_le_bytes());
                out.put(rkey);
            }
            Frame::AuthOk
            | Frame::UcxOpen
            | Frame::Stats
            | Frame::ReadOk { .. }
            | Frame::WriteOk { .. }
            | Frame::FreeOk { .. } => {}
        }
        out
    }
}

/// A decoded reply with a small payload (a ReadOk's pages are received
/// straight into place by the caller, so only its header is decoded here).
#[derive(Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    HelloOk {
        capacity_pages: u64,
        used_pages: u64,
        page_size: u64,
    },
    ReadOk {
        count: u32,
    },
    WriteOk {
        count: u32,
    },
    FreeOk {
        released: u32,
    },
    StatsOk(ServerStats),
    AuthChallenge {
        nonce: [u8; auth::NONCE_LEN],
        proof: [u8; auth::MAC_LEN],
    },
    AuthOk,
    UcxOpenOk {
        chunk_pages: u64,
        address: &'a [u8],
    },
    UcxChunkOk {
        base: u64,
        rkey: &'a [u8],
    },
    Error {
        /// None for a code this version does not know.
        code: Option<ErrorCode>,
        message: &'a [u8],
    },
}

/// Decode a reply for a header already validated by [`Header::decode`].
/// `payload` is the whole payload, except for ReadOk, whose page data is
/// never passed (give an empty slice).
pub fn decode_reply<'a>(h: &Header, payload: &'a [u8]) -> Result<Reply<'a>, WireError> {
    let want = if h.op == Op::ReadOk {
        0
    } else {
        h.len as usize
    };
    if payload.len() != want {
        return Err(WireError::Malformed(
            "payload length differs from the header's",
        ));
    }
    Ok(match h.op {
        Op::HelloOk => Reply::HelloOk {
            capacity_pages: u64_at(payload, 0),
            used_pages: u64_at(payload, 8),
            page_size: u64_at(payload, 16),
        },
        Op::ReadOk => Reply::ReadOk { count: h.count },
        Op::WriteOk => Reply::WriteOk { count: h.count },
        Op::FreeOk => Reply::FreeOk { released: h.count },
        Op::StatsOk => Reply::StatsOk(ServerStats {
            capacity_pages: u64_at(payload, 0),
            used_pages: u64_at(payload, 8),
            sessions: u64_at(payload, 16),
            connections: u64_at(payload, 24),
        }),
        Op::AuthChallenge => Reply::AuthChallenge {
            nonce: array_at(payload, 0),
            proof: array_at(payload, auth::NONCE_LEN),
        },
        Op::AuthOk => Reply::AuthOk,
        Op::UcxOpenOk => Reply::UcxOpenOk {
            chunk_pages: u64_at(payload, 0),
            address: &payload[8..],
        },
        Op::UcxChunkOk => Reply::UcxChunkOk {
            base: u64_at(payload, 0),
            rkey: &payload[8..],
        },
        Op::Error => Reply::Error {
            code: ErrorCode::from_u32(h.status),
            message: payload,
        },
        other => return Err(WireError::UnknownOp(other as u16)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn header_roundtrip() {
        let h = Header::new(Op::Read, 7, 3, 24);
        assert_eq!(Header::decode(&h.encode()).unwrap(), h);
    }

    #[test]
    fn rejects_bad_frames() {
        let mut b = Header::new(Op::Read, 1, 2, 16).encode();
        b[0] = b'X';
        assert!(matches!(Header::decode(&b), Err(WireError::BadMagic(_))));
        let mut b = Header::new(Op::Read, 1, 2, 16).encode();
        b[4] = 9;
        assert_eq!(Header::decode(&b), Err(WireError::BadVersion(9)));
        let mut b = Header::new(Op::Read, 1, 2, 16).encode();
        b[6] = 0x42;
        assert_eq!(Header::decode(&b), Err(WireError::UnknownOp(0x42)));
        let b = Header::new(Op::Read, 1, 2, 17).encode();
        assert!(matches!(
            Header::decode(&b),
            Err(WireError::BadLength { .. })
        ));
        let b = Header::new(Op::Read, 1, MAX_BATCH + 1, (MAX_BATCH + 1) * 8).encode();
        assert_eq!(Header::decode(&b), Err(WireError::TooLarge(MAX_BATCH + 1)));
        let b = Header::new(Op::Write, 1, 0, 0).encode();
        assert!(Header::decode(&b).is_err(), "empty writes are malformed");
    }

    #[test]
    fn decode_write_splits_pages_and_data() {
        let mut p = Vec::new();
        p.extend_from_slice(&5u64.to_le_bytes());
        p.extend_from_slice(&[0xAB; PAGE_SIZE]);
        let h =
            Header::decode(&Header::new(Op::Write, 0, 1, u32::try_from(p.len()).unwrap()).encode())
                .unwrap();
        match decode_request(&h, &p).unwrap() {
            Request::Write { pages: pg, data } => {
                assert_eq!(pages(pg).collect::<Vec<_>>(), vec![5]);
                assert_eq!(data.len(), PAGE_SIZE);
            }
            other => panic!("decoded {other:?}"),
        }
    }

    #[test]
    fn hello_validates_max_pages() {
        let mut p = vec![1u8; TOKEN_LEN];
        p.extend_from_slice(&(MAX_PAGES + 1).to_le_bytes());
        let h =
            Header::decode(&Header::new(Op::Hello, 0, 0, u32::try_from(p.len()).unwrap()).encode())
                .unwrap();
        assert!(decode_request(&h, &p).is_err());
    }

    #[test]
    fn server_addresses_parse_and_print_back() {
        for (s, want) in [
            (
                "10.0.0.2:7070",
                ServerAddr::Tcp {
                    host: "10.0.0.2".into(),
                    port: 7070,
                },
            ),
            (
                "node7:7070",
                ServerAddr::Tcp {
                    host: "node7".into(),
                    port: 7070,
                },
            ),
            (
                "[::1]:0",
                ServerAddr::Tcp {
                    host: "::1".into(),
                    port: 0,
                },
            ),
            ("unix:/run/fm.sock", ServerAddr::Unix("/run/fm.sock".into())),
            (
                "unix:@farmem-1",
                ServerAddr::UnixAbstract("farmem-1".into()),
            ),
        ] {
            let a: ServerAddr = s.parse().unwrap();
            assert_eq!(a, want);
            assert_eq!(a.to_string(), s);
        }
        for (s, why) in [
            ("node7", "no :PORT"),
            ("node7:70000", "port"),
            (":7070", "host is empty"),
            ("::1:7070", "brackets"),
            ("[::1:7070", "unclosed"),
            ("[nothost]:1", "IPv6"),
            ("unix:", "empty"),
            ("unix:@", "empty"),
            ("a b:1", "space"),
        ] {
            let e = s.parse::<ServerAddr>().unwrap_err();
            assert!(e.to_string().contains(why), "{s}: {e}");
        }
        let long = format!("unix:@{}", "n".repeat(MAX_UNIX_NAME + 1));
        assert!(long.parse::<ServerAddr>().is_err());
        assert!(!"h:0".parse::<ServerAddr>().unwrap().is_connectable());
        let l = ServerAddr::parse_list(" a:1, ,unix:@b ").unwrap();
        assert_eq!(l.len(), 2);
        assert!(ServerAddr::parse_list(" , ").is_err());
    }

    /// Decode an encoded head: (header, fixed payload).
    fn split(head: &[u8]) -> (Header, &[u8]) {
        let h = Header::decode(head[..HEADER_LEN].try_into().unwrap()).unwrap();
        (h, &head[HEADER_LEN..])
    }

    #[test]
    fn requests_roundtrip_through_the_codec() {
        let token = [7u8; TOKEN_LEN];
        let head = Frame::Hello {
            token: &token,
            max_pages: 99,
        }
        .encode(3);
        let (h, p) = split(&head);
        assert_eq!((h.op, h.tag), (Op::Hello, 3));
        assert_eq!(
            decode_request(&h, p).unwrap(),
            Request::Hello {
                token,
                max_pages: 99
            }
        );
        let head = Frame::Free { start: 5, pages: 6 }.encode(4);
        let (h, p) = split(&head);
        assert_eq!(
            decode_request(&h, p).unwrap(),
            Request::Free { start: 5, pages: 6 }
        );
        let head = Frame::Stats.encode(5);
        let (h, p) = split(&head);
        assert_eq!(decode_request(&h, p).unwrap(), Request::Stats);
        // A Write's head ends with its page list; the data follows it.
        let head = Frame::Write { pages: &[9, 2] }.encode(6);
        let (h, list) = split(&head);
        assert_eq!((h.count, h.len as usize), (2, 2 * (8 + PAGE_SIZE)));
        let mut full = list.to_vec();
        full.extend(std::iter::repeat_n(1u8, 2 * PAGE_SIZE));
        match decode_request(&h, &full).unwrap() {
            Request::Write { pages: pg, data } => {
                assert_eq!(pages(pg).collect::<Vec<_>>(), vec![9, 2]);
                assert_eq!(data.len(), 2 * PAGE_SIZE);
            }
            other => panic!("decoded {other:?}"),
        }
    }

    #[test]
    fn replies_roundtrip_through_the_codec() {
        let head = Frame::HelloOk {
            capacity_pages: 10,
            used_pages: 4,
        }
        .encode(1);
        let (h, p) = split(&head);
        assert_eq!(
            decode_reply(&h, p).unwrap(),
            Reply::HelloOk {
                capacity_pages: 10,
                used_pages: 4,
                page_size: PAGE_SIZE as u64
            }
        );
        let st = ServerStats {
            capacity_pages: 1,
            used_pages: 2,
            sessions: 3,
            connections: 4,
        };
        let head = Frame::StatsOk(st).encode(2);
        let (h, p) = split(&head);
        assert_eq!(decode_reply(&h, p).unwrap(), Reply::StatsOk(st));
        let head = Frame::ReadOk { count: 3 }.encode(3);
        let (h, p) = split(&head);
        assert_eq!((h.len as usize, p.len()), (3 * PAGE_SIZE, 0));
        assert_eq!(decode_reply(&h, p).unwrap(), Reply::ReadOk { count: 3 });
        let head = Frame::FreeOk { released: 8 }.encode(4);
        let (h, p) = split(&head);
        assert_eq!(decode_reply(&h, p).unwrap(), Reply::FreeOk { released: 8 });
        let long = "x".repeat(MAX_ERROR_MSG + 10);
        let head = Frame::Error {
            code: ErrorCode::Capacity,
            message: &long,
        }
        .encode(5);
        let (h, p) = split(&head);
        assert_eq!(h.len as usize, MAX_ERROR_MSG, "cut to the limit");
        match decode_reply(&h, p).unwrap() {
            Reply::Error { code, message } => {
                assert_eq!(code, Some(ErrorCode::Capacity));
                assert_eq!(message.len(), MAX_ERROR_MSG);
            }
            other => panic!("decoded {other:?}"),
        }
        // A request is not a reply.
        let head = Frame::Stats.encode(6);
        let (h, p) = split(&head);
        assert!(decode_reply(&h, p).is_err());
    }

    proptest! {
        /// Any Read or Write the codec encodes decodes to the same pages, and
        /// its header passes the receiver's checks.
        #[test]
        fn page_lists_roundtrip(list in proptest::collection::vec(any::<u64>(), 1..=MAX_BATCH as usize), write in any::<bool>(), tag in any::<u32>()) {
            let f = if write { Frame::Write { pages: &list } } else { Frame::Read { pages: &list } };
            let head = f.encode(tag);
            let (h, raw) = split(&head);
            prop_assert_eq!(h.tag, tag);
            prop_assert!(payload_len_ok(h.op, h.count, h.len));
            prop_assert_eq!(pages(raw).collect::<Vec<_>>(), list);
        }

        /// Arbitrary bytes never panic the decoder, and whatever it accepts
        /// re-encodes to the same bytes and has a payload length that fits
        /// the op and the limits.
        #[test]
        fn decoder_total(bytes in proptest::array::uniform24(any::<u8>())) {
            if let Ok(h) = Header::decode(&bytes) {
                prop_assert_eq!(h.encode(), bytes);
                prop_assert!(h.len as usize <= MAX_PAYLOAD);
                prop_assert!(payload_len_ok(h.op, h.count, h.len));
            }
        }

        #[test]
        fn request_decoder_total(op in 1u16..6, count in 0u32..4, payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            let h = Header::new(Op::from_u16(op).unwrap(), 0, count, u32::try_from(payload.len()).unwrap());
            if let Ok(h) = Header::decode(&h.encode()) {
                let _ = decode_request(&h, &payload);
            }
        }
    }
}
