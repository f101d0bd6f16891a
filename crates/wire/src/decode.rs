//! Decoding: requests (server side) and replies (client side), each for a
//! header already validated.

use crate::{auth, ErrorCode, Header, Op, ServerStats, WireError, MAX_PAGES, TOKEN_LEN};

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
    MemfdOpen,
    MemfdWhere,
    MemfdChunk {
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
        Op::MemfdOpen => Request::MemfdOpen,
        Op::MemfdWhere => Request::MemfdWhere,
        Op::MemfdChunk => Request::MemfdChunk {
            chunk: u64_at(payload, 0),
        },
        other => return Err(WireError::UnknownOp(other as u16)),
    })
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
    /// The descriptor travels beside the frame (`SCM_RIGHTS`), not in it.
    MemfdOpenOk {
        chunk_pages: u64,
    },
    MemfdChunkOk {
        chunk: u64,
        pages: u64,
    },
    /// The abstract Unix socket name of the server's side door.
    MemfdWhereOk {
        name: &'a [u8],
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
    if h.op == Op::StatsOk && u64_at(payload, 32) & !1 != 0 {
        return Err(WireError::Malformed("a StatsOk with unknown flags"));
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
            draining: u64_at(payload, 32) & 1 != 0,
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
        Op::MemfdOpenOk => Reply::MemfdOpenOk {
            chunk_pages: u64_at(payload, 0),
        },
        Op::MemfdChunkOk => Reply::MemfdChunkOk {
            chunk: u64_at(payload, 0),
            pages: u64_at(payload, 8),
        },
        Op::MemfdWhereOk => Reply::MemfdWhereOk { name: payload },
        Op::Error => Reply::Error {
            code: ErrorCode::from_u32(h.status),
            message: payload,
        },
        other => return Err(WireError::UnknownOp(other as u16)),
    })
}
