//! The fixed 24-byte header, its operation and error codes, and what
//! can be wrong with a frame.

use crate::{
    HEADER_LEN, MAGIC, MAX_ERROR_MSG, MAX_FRAME_PAGES, MAX_PAYLOAD, MAX_UCX_BLOB, PAGE_SIZE,
    TOKEN_LEN, VERSION,
};
use thiserror::Error;

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
    MemfdOpen = 10,
    MemfdChunk = 11,
    MemfdWhere = 12,
    HelloOk = 0x81,
    ReadOk = 0x82,
    WriteOk = 0x83,
    FreeOk = 0x84,
    StatsOk = 0x85,
    AuthChallenge = 0x86,
    AuthOk = 0x87,
    UcxOpenOk = 0x88,
    UcxChunkOk = 0x89,
    MemfdOpenOk = 0x8A,
    MemfdChunkOk = 0x8B,
    MemfdWhereOk = 0x8C,
    Error = 0xFF,
}

impl Op {
    /// Every op, in code order: the requests, then the replies. A test
    /// checks that it holds exactly the codes [`Op::from_u16`] decodes.
    pub const ALL: [Op; 25] = [
        Op::Hello,
        Op::Read,
        Op::Write,
        Op::Free,
        Op::Stats,
        Op::Auth,
        Op::AuthProof,
        Op::UcxOpen,
        Op::UcxChunk,
        Op::MemfdOpen,
        Op::MemfdChunk,
        Op::MemfdWhere,
        Op::HelloOk,
        Op::ReadOk,
        Op::WriteOk,
        Op::FreeOk,
        Op::StatsOk,
        Op::AuthChallenge,
        Op::AuthOk,
        Op::UcxOpenOk,
        Op::UcxChunkOk,
        Op::MemfdOpenOk,
        Op::MemfdChunkOk,
        Op::MemfdWhereOk,
        Op::Error,
    ];

    /// Every request, in code order: what a server counts by kind. The
    /// requests come first in [`Op::ALL`].
    pub const REQUESTS: [Op; 12] = {
        let mut r = [Op::Hello; 12];
        let mut i = 0;
        while i < r.len() {
            r[i] = Op::ALL[i];
            i += 1;
        }
        r
    };

    /// The op's name in metrics and messages (snake case).
    pub fn name(self) -> &'static str {
        match self {
            Op::Hello => "hello",
            Op::Read => "read",
            Op::Write => "write",
            Op::Free => "free",
            Op::Stats => "stats",
            Op::Auth => "auth",
            Op::AuthProof => "auth_proof",
            Op::UcxOpen => "ucx_open",
            Op::UcxChunk => "ucx_chunk",
            Op::MemfdOpen => "memfd_open",
            Op::MemfdChunk => "memfd_chunk",
            Op::MemfdWhere => "memfd_where",
            Op::HelloOk => "hello_ok",
            Op::ReadOk => "read_ok",
            Op::WriteOk => "write_ok",
            Op::FreeOk => "free_ok",
            Op::StatsOk => "stats_ok",
            Op::AuthChallenge => "auth_challenge",
            Op::AuthOk => "auth_ok",
            Op::UcxOpenOk => "ucx_open_ok",
            Op::UcxChunkOk => "ucx_chunk_ok",
            Op::MemfdOpenOk => "memfd_open_ok",
            Op::MemfdChunkOk => "memfd_chunk_ok",
            Op::MemfdWhereOk => "memfd_where_ok",
            Op::Error => "error",
        }
    }

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
            10 => Op::MemfdOpen,
            11 => Op::MemfdChunk,
            12 => Op::MemfdWhere,
            0x81 => Op::HelloOk,
            0x82 => Op::ReadOk,
            0x83 => Op::WriteOk,
            0x84 => Op::FreeOk,
            0x85 => Op::StatsOk,
            0x86 => Op::AuthChallenge,
            0x87 => Op::AuthOk,
            0x88 => Op::UcxOpenOk,
            0x89 => Op::UcxChunkOk,
            0x8A => Op::MemfdOpenOk,
            0x8B => Op::MemfdChunkOk,
            0x8C => Op::MemfdWhereOk,
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
    /// Every code, in code order. A test checks that it holds exactly the
    /// codes [`ErrorCode::from_u32`] decodes.
    pub const ALL: [ErrorCode; 13] = [
        ErrorCode::BadMagic,
        ErrorCode::BadVersion,
        ErrorCode::UnknownOp,
        ErrorCode::BadLength,
        ErrorCode::TooLarge,
        ErrorCode::OutOfRange,
        ErrorCode::NoSession,
        ErrorCode::Capacity,
        ErrorCode::NotFound,
        ErrorCode::Malformed,
        ErrorCode::AuthRequired,
        ErrorCode::AuthFailed,
        ErrorCode::Unsupported,
    ];

    /// The code's name in metrics and messages (snake case).
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::BadMagic => "bad_magic",
            ErrorCode::BadVersion => "bad_version",
            ErrorCode::UnknownOp => "unknown_op",
            ErrorCode::BadLength => "bad_length",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::OutOfRange => "out_of_range",
            ErrorCode::NoSession => "no_session",
            ErrorCode::Capacity => "capacity",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Malformed => "malformed",
            ErrorCode::AuthRequired => "auth_required",
            ErrorCode::AuthFailed => "auth_failed",
            ErrorCode::Unsupported => "unsupported",
        }
    }

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
    #[error("frame of {0} pages exceeds the limit of {MAX_FRAME_PAGES}")]
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
        if matches!(op, Op::Read | Op::Write | Op::ReadOk | Op::WriteOk)
            && h.count > MAX_FRAME_PAGES
        {
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
        Op::StatsOk => l == 40,
        Op::Auth | Op::AuthProof => l == crate::NONCE_LEN,
        Op::AuthChallenge => l == crate::NONCE_LEN + crate::MAC_LEN,
        Op::AuthOk => l == 0,
        Op::UcxOpen => l == 0,
        Op::UcxChunk => l == 8,
        Op::UcxOpenOk | Op::UcxChunkOk => l > 8 && l <= 8 + MAX_UCX_BLOB,
        Op::MemfdOpen | Op::MemfdWhere => l == 0,
        Op::MemfdWhereOk => l > 0 && l <= crate::MAX_UNIX_NAME,
        Op::MemfdOpenOk | Op::MemfdChunk => l == 8,
        Op::MemfdChunkOk => l == 16,
        Op::Error => l <= MAX_ERROR_MSG,
    }
}
