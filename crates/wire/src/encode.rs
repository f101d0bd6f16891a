//! Encoding: every frame's head, on the stack.

use crate::{
    auth, ErrorCode, Header, Op, HEADER_LEN, MAX_ERROR_MSG, MAX_FRAME_PAGES, MAX_UCX_BLOB,
    PAGE_SIZE, TOKEN_LEN,
};

/// The server's figures in a StatsOk reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerStats {
    pub capacity_pages: u64,
    pub used_pages: u64,
    pub sessions: u64,
    pub connections: u64,
    /// The server is leaving (`farmem serve --drain`, stopped): it takes no
    /// new session, and its clients should move their pages off it.
    pub draining: bool,
}

/// Room for the head of any frame: the header and everything but bulk page
/// data (a whole page list, or the longest error message).
pub const MAX_HEAD: usize = HEADER_LEN + MAX_FRAME_PAGES as usize * 8;

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
    MemfdOpen,
    MemfdWhere,
    MemfdChunk {
        chunk: u64,
    },
    /// `name` is 1 to [`crate::MAX_UNIX_NAME`] bytes.
    MemfdWhereOk {
        name: &'a [u8],
    },
    MemfdOpenOk {
        chunk_pages: u64,
    },
    /// Sent with the chunk's descriptor (`SCM_RIGHTS`).
    MemfdChunkOk {
        chunk: u64,
        pages: u64,
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
            Frame::StatsOk(_) => (Op::StatsOk, 0, 40),
            Frame::Error { message, .. } => (Op::Error, 0, message.len().min(MAX_ERROR_MSG)),
            Frame::UcxOpen => (Op::UcxOpen, 0, 0),
            Frame::UcxChunk { .. } => (Op::UcxChunk, 0, 8),
            Frame::UcxOpenOk { address: b, .. } => (Op::UcxOpenOk, 0, 8 + b.len()),
            Frame::UcxChunkOk { rkey: b, .. } => (Op::UcxChunkOk, 0, 8 + b.len()),
            Frame::MemfdOpen => (Op::MemfdOpen, 0, 0),
            Frame::MemfdWhere => (Op::MemfdWhere, 0, 0),
            Frame::MemfdWhereOk { name } => (Op::MemfdWhereOk, 0, name.len()),
            Frame::MemfdChunk { .. } => (Op::MemfdChunk, 0, 8),
            Frame::MemfdOpenOk { .. } => (Op::MemfdOpenOk, 0, 8),
            Frame::MemfdChunkOk { .. } => (Op::MemfdChunkOk, 0, 16),
        }
    }

    /// Encode the header and the fixed part of the payload with `tag`.
    ///
    /// # Panics
    /// If a Read or Write carries more than [`MAX_FRAME_PAGES`] pages, or a UCX
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
            op != Op::MemfdWhereOk || (1..=crate::MAX_UNIX_NAME).contains(&len),
            "a side door's name of {len} bytes"
        );
        assert!(
            count <= MAX_FRAME_PAGES
                || !matches!(op, Op::Read | Op::Write | Op::ReadOk | Op::WriteOk),
            "a frame of {count} pages exceeds MAX_FRAME_PAGES"
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
                let flags = u64::from(s.draining);
                for v in [
                    s.capacity_pages,
                    s.used_pages,
                    s.sessions,
                    s.connections,
                    flags,
                ] {
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
            Frame::UcxChunk { chunk } | Frame::MemfdChunk { chunk } => {
                out.put(&chunk.to_le_bytes())
            }
            Frame::MemfdOpenOk { chunk_pages } => out.put(&chunk_pages.to_le_bytes()),
            Frame::MemfdChunkOk { chunk, pages } => {
                out.put(&chunk.to_le_bytes());
                out.put(&pages.to_le_bytes());
            }
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
            Frame::MemfdWhereOk { name } => out.put(name),
            Frame::AuthOk
            | Frame::UcxOpen
            | Frame::MemfdOpen
            | Frame::MemfdWhere
            | Frame::Stats
            | Frame::ReadOk { .. }
            | Frame::WriteOk { .. }
            | Frame::FreeOk { .. } => {}
        }
        out
    }
}
