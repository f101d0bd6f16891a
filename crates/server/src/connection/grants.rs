//! The one-sided page paths' requests: opening a session's UCX pool or its
//! memory files, granting their chunks (each reserved against capacity and
//! quota before any memory is made, `crate::capacity`), and telling a
//! client the side door. Who may have what is checked here: UCX only for a
//! peer that passed the handshake, memory files only for a Unix peer of an
//! accepted user.

use super::{refuse, reserve, Door, Link};
use crate::metrics::Refusal;
use crate::store::Store;
use crate::Shared;
use farmem_sys::net::send_with_fd;
use farmem_wire::{self as wire, ErrorCode, Frame, Header};
use std::io;
use std::os::fd::AsRawFd;

/// UcxOpen: start UCX (once per server) and the session's pool, and give
/// the client the worker's address.
pub(super) fn ucx_open(
    sh: &Shared,
    s: &Store,
    h: &Header,
    out: &mut Vec<u8>,
    link: Link,
) -> io::Result<bool> {
    // UCX serves software RMA to any peer that reaches its worker,
    // whatever the key: it starts only for a peer that proved it
    // holds the secret, never for a Unix or unauthenticated one.
    if !link.authenticated {
        return refuse(
            out,
            h.tag,
            ErrorCode::Unsupported,
            "UCX is offered only on TCP to a client that passed the shared-secret handshake (start the server with --secret-file); on this host use the memory-file path (a Unix socket)",
        );
    }
    let engine = match sh.ucx() {
        Ok(e) => e,
        Err(why) => {
            return refuse(
                out,
                h.tag,
                ErrorCode::Unsupported,
                &format!("this server has no UCX: {why}"),
            )
        }
    };
    let pool = s
        .pool
        .get_or_init(|| crate::ucx::Pool::new(engine.clone(), s.max_pages()));
    let address = pool.engine().address();
    if address.len() > wire::MAX_UCX_BLOB {
        return refuse(
            out,
            h.tag,
            ErrorCode::Unsupported,
            &format!(
                "this server's UCX worker address has {} bytes, more than the protocol carries ({}); limit its devices (UCX_NET_DEVICES)",
                address.len(),
                wire::MAX_UCX_BLOB
            ),
        );
    }
    let reply = Frame::UcxOpenOk {
        chunk_pages: crate::ucx::CHUNK_PAGES,
        address,
    };
    out.extend_from_slice(&reply.encode(h.tag));
    Ok(true)
}

/// UcxChunk: grant a chunk of the session's UCX pool: its base and remote
/// key.
pub(super) fn ucx_chunk(
    sh: &Shared,
    s: &Store,
    h: &Header,
    chunk: u64,
    out: &mut Vec<u8>,
) -> io::Result<bool> {
    let Some(pool) = s.pool.get() else {
        return refuse(
            out,
            h.tag,
            ErrorCode::Malformed,
            "send UcxOpen before UcxChunk",
        );
    };
    match pool.grant(chunk, |pages| reserve(sh, s, pages)) {
        Ok((base, rkey)) => {
            out.extend_from_slice(&Frame::UcxChunkOk { base, rkey: &rkey }.encode(h.tag));
            Ok(true)
        }
        Err(crate::ucx::GrantError::OutOfRange(m)) => refuse(out, h.tag, ErrorCode::OutOfRange, &m),
        Err(crate::ucx::GrantError::Capacity(r)) => refuse(out, h.tag, r.code(), &r.to_string()),
        Err(crate::ucx::GrantError::Ucx(m)) => refuse(out, h.tag, ErrorCode::Unsupported, &m),
    }
}

/// MemfdOpen: the session's memory files, for a peer that may hold them.
pub(super) fn memfd_open(
    sh: &Shared,
    s: &Store,
    h: &Header,
    out: &mut Vec<u8>,
    link: Link,
) -> io::Result<bool> {
    if let Err(why) = memfd_peer_ok(sh, &link) {
        sh.metrics.refused(Refusal::Auth);
        tracing::warn!("refused {} memory files: {why}", link.peer);
        return refuse(out, h.tag, ErrorCode::Unsupported, &why);
    }
    s.memfd
        .get_or_init(|| crate::memfd::MemfdPool::new(s.max_pages(), same_memory_cgroup(link.fd)));
    let reply = Frame::MemfdOpenOk {
        chunk_pages: wire::CHUNK_PAGES,
    };
    out.extend_from_slice(&reply.encode(h.tag));
    Ok(true)
}

/// MemfdWhere: the side door's name, to a client that came in by TCP.
pub(super) fn memfd_where(
    sh: &Shared,
    h: &Header,
    out: &mut Vec<u8>,
    link: Link,
) -> io::Result<bool> {
    match (&sh.side_door, link.door) {
        (Some(name), Door::Tcp) => {
            let reply = Frame::MemfdWhereOk {
                name: name.as_bytes(),
            };
            out.extend_from_slice(&reply.encode(h.tag));
            Ok(true)
        }
        _ => refuse(
            out,
            h.tag,
            ErrorCode::Unsupported,
            "this server has no side door for memory files (it listens on a Unix socket, or could not open one)",
        ),
    }
}

/// MemfdChunk: grant a chunk's memory file, its descriptor sent with the
/// reply.
pub(super) fn memfd_chunk(
    sh: &Shared,
    s: &Store,
    h: &Header,
    chunk: u64,
    out: &mut Vec<u8>,
    link: Link,
) -> io::Result<bool> {
    let Some(pool) = s.memfd.get() else {
        return refuse(
            out,
            h.tag,
            ErrorCode::Malformed,
            "send MemfdOpen before MemfdChunk",
        );
    };
    match pool.grant(chunk, |pages| reserve(sh, s, pages)) {
        Ok((chunk_fd, pages)) => {
            // Never sealed: memory files pass only on a Unix
            // socket (`memfd_peer_ok`), which takes no handshake.
            let reply = Frame::MemfdChunkOk { chunk, pages }.encode(h.tag);
            // Sent here, with the descriptor; `out` stays empty.
            send_with_fd(link.fd, &reply, chunk_fd.as_raw_fd(), link.wait)?;
            Ok(true)
        }
        Err(crate::memfd::GrantError::OutOfRange(m)) => {
            refuse(out, h.tag, ErrorCode::OutOfRange, &m)
        }
        Err(crate::memfd::GrantError::Capacity(r)) => refuse(out, h.tag, r.code(), &r.to_string()),
        Err(crate::memfd::GrantError::System(m)) => refuse(out, h.tag, ErrorCode::Unsupported, &m),
    }
}

/// Whether the peer on `link` may hold this server's memory files: only on
/// a Unix socket, and only a process of a user this server accepts
/// (`SO_PEERCRED`; its own user, or one named with `--memfd-uid`).
fn memfd_peer_ok(sh: &Shared, link: &Link) -> Result<(), String> {
    if link.tcp {
        return Err("memory files pass only over a Unix socket; a client on this host takes them at the side door (MemfdWhere), over TCP from elsewhere pages move through the socket (or UCX on RDMA)".into());
    }
    side_peer_ok(sh, link.fd)
}

/// Whether the process on Unix socket `fd` is in this server's memory
/// cgroup (false where either cannot be read: the server then pays).
fn same_memory_cgroup(fd: std::os::fd::RawFd) -> bool {
    let Ok(pid) = farmem_sys::net::peer_pid(fd) else {
        return false;
    };
    let mine = farmem_sys::process::memory_cgroup(None);
    pid != 0 && mine.is_some() && farmem_sys::process::memory_cgroup(Some(pid)) == mine
}

/// Whether the process on Unix socket `fd` runs as a user this server
/// hands memory files to (and so may come in by the side door).
pub(crate) fn side_peer_ok(sh: &Shared, fd: std::os::fd::RawFd) -> Result<(), String> {
    let uid = farmem_sys::net::peer_uid(fd)
        .map_err(|e| format!("the peer's credentials cannot be read (SO_PEERCRED: {e})"))?;
    let me = farmem_sys::process::geteuid();
    if uid == me || sh.cfg.memfd_uids.contains(&uid) {
        Ok(())
    } else {
        Err(format!(
            "the peer runs as uid {uid}, and this server hands its memory files only to uid {me}{}; start it with --memfd-uid {uid} to allow that user",
            if sh.cfg.memfd_uids.is_empty() { String::new() } else { format!(" and {:?}", sh.cfg.memfd_uids) }
        ))
    }
}
