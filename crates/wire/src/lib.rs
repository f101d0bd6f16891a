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
//! | Stats   | — | StatsOk: capacity, used, sessions, connections, flags (u64 each; flag 1: draining) |
//! | Auth    | client `nonce[32]` | AuthChallenge: server `nonce[32]`, server `proof[32]` |
//! | AuthProof | client `proof[32]` | AuthOk (no payload) |
//! | UcxOpen | — | UcxOpenOk: chunk_pages u64, the server's UCX worker address |
//! | UcxChunk | chunk u64 | UcxChunkOk: base address u64, packed remote key |
//! | MemfdOpen | — | MemfdOpenOk: chunk_pages u64 (always [`CHUNK_PAGES`]) |
//! | MemfdChunk | chunk u64 | MemfdChunkOk: chunk u64, pages u64; the chunk's descriptor passed with it (`SCM_RIGHTS`) |
//! | MemfdWhere | — | MemfdWhereOk: the abstract Unix socket name of the server's side door (1 to 107 bytes) |
//!
//! UcxOpen and UcxChunk (after Hello, so after the handshake too) move a
//! session's pages onto UCX: its pages then live in chunks of `chunk_pages`
//! pages that the server allocates and registers once each, page `p` at
//! `base(p / chunk_pages) + (p % chunk_pages) * 4096`, and the client reads
//! and writes them one-sided. A remote key is a capability: a server sends
//! one only to the session that owns the chunk. A server without UCX
//! answers UcxOpen with an Error of code `Unsupported`.
//!
//! MemfdOpen and MemfdChunk move a session's pages onto sealed memory files
//! (`memfd_create`), one per chunk, on a Unix socket only: the server passes
//! each chunk's descriptor to the session's client, which reads and writes
//! page `p` at offset `(p % chunk_pages) * 4096` of chunk `p / chunk_pages`
//! with `pread` and `pwrite`. The descriptor is the capability, and the
//! kernel enforces it: no address or key names a page. A server passes one
//! only to a peer whose `SO_PEERCRED` uid it accepts; a client accepts only
//! a sealed memory file of exactly the chunk's size.
//!
//! A server listening on TCP also opens a side door: an abstract Unix
//! socket of a random name, which it tells only a session's client
//! (MemfdWhere, after Hello, so after the handshake). A client on the same
//! host connects there, passes the server's `SO_PEERCRED` check, says Hello
//! with its session's token, and takes the memory files there: a same-host
//! server reached over TCP moves pages through them too. The side door
//! serves only the users the server hands memory files to, and only joins
//! sessions already open: it opens no session of its own, so it never
//! stands in for the shared secret.
//!
//! Chunks are [`CHUNK_PAGES`] pages on both one-sided paths: a protocol
//! constant, so a server cannot make a client allocate bookkeeping for
//! millions of tiny chunks.
//!
//! A server with a shared secret takes nothing on a TCP connection before
//! Auth and AuthProof have passed (see [`auth`]); on a Unix socket, which
//! only this machine can reach, and on a server without a secret, a
//! connection starts at Hello.
//!
//! After the handshake, every frame on that connection, both ways, carries
//! a 32-byte tag under the connection's own session key, placed after the
//! header and the payload it covers and before any page data (see
//! [`seal`]).
//!
//! One codec for both sides: [`Frame`] encodes any frame's head (header
//! and fixed payload; page data travels after it, gathered from where it
//! lies), [`decode_request`] and [`decode_reply`] decode them. The client
//! (`farmem-runtime`), the server and their tests all go through it.
//!
//! A session is named by the client's random 128-bit token: all connections
//! presenting the same token share one page space, and no other token can
//! reach it. Page numbers must be below the `max_pages` declared at Hello.

mod addr;
pub mod auth;
mod decode;
mod encode;
mod header;
pub mod seal;

pub use addr::{AddrError, ServerAddr, MAX_UNIX_NAME};
pub use decode::{decode_reply, decode_request, pages, Reply, Request};
pub use encode::{Frame, Head, ServerStats, MAX_HEAD};
pub use header::{payload_len_ok, ErrorCode, Header, Op, WireError};

pub const MAGIC: u32 = u32::from_le_bytes(*b"FMEM");
pub const VERSION: u16 = 1;
pub const HEADER_LEN: usize = 24;
/// The page the protocol moves: the machine's base page, defined once in
/// `farmem_sys`.
pub use farmem_sys::PAGE_SIZE;
/// Most pages one Read or Write may carry (1 MiB of data).
pub const MAX_FRAME_PAGES: u32 = 256;
/// Largest payload any frame may have.
pub const MAX_PAYLOAD: usize = MAX_FRAME_PAGES as usize * (8 + PAGE_SIZE);
/// Largest page-number space a session may declare (2^40 pages = 4 PiB).
pub const MAX_PAGES: u64 = 1 << 40;
/// Longest UCX worker address or packed remote key a frame carries.
pub const MAX_UCX_BLOB: usize = MAX_FRAME_PAGES as usize * 8 - 8;
/// Pages in one chunk of a session's one-sided pages (64 MiB), on UCX and
/// on sealed memory files alike.
pub const CHUNK_PAGES: u64 = 16_384;
/// Length of the session token.
pub const TOKEN_LEN: usize = 16;
/// Bytes of each side's nonce in the shared-secret handshake.
pub const NONCE_LEN: usize = 32;
/// Bytes of a handshake proof (an HMAC-SHA256).
pub const MAC_LEN: usize = 32;
/// Longest error message carried in an Error frame.
pub const MAX_ERROR_MSG: usize = 1024;

#[cfg(test)]
mod tests;
