//! Other processes' kernel accesses to this process's far memory.
//!
//! `process_vm_readv`/`process_vm_writev` let one process copy another's
//! memory (Open MPI's shared-memory transport moves large messages this
//! way). In SIGBUS mode, a far page of the *target* that is not resident
//! makes the caller's call fail with EFAULT, and the caller cannot fault it
//! in. So every process with far memory runs a small pin service on the
//! abstract Unix socket `@farmem-peer-<pid>`: a peer whose copy came up
//! short asks it to pin (and fault in) the range it wants, copies, and
//! closes the connection, which releases the pins.
//!
//! Protocol (native byte order, same host): the peer sends
//! `{addr: u64, len: u64, write: u64}`; the service pins up to the pin
//! limit's share of `[addr, addr+len)` that is far memory and answers with
//! the number of bytes pinned from `addr` (0: `addr` is not far memory
//! here). The pins are held until the next request or the end of the
//! connection. Only peers with the same user id are served.

use crate::{IoPin, Runtime};
use farmem_sys::msg::MsgBuf;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::time::Duration;

/// The service's abstract socket name, formatted without allocating
/// (`connect` runs on the SIGSYS path of `process_vm_*`).
fn name(pid: i32) -> MsgBuf {
    let mut m = MsgBuf::new();
    let _ = write!(m, "farmem-peer-{pid}");
    m
}

/// Start the pin service for this process (once, from `init`).
pub(crate) fn start(rt: &'static Runtime) -> std::io::Result<()> {
    let addr = SocketAddr::from_abstract_name(name(std::process::id() as i32).as_bytes())?;
    let listener = UnixListener::bind_addr(&addr)?;
    std::thread::Builder::new()
        .name("farmem-peers".into())
        .spawn(move || {
            // Signals are the program's business, not this thread's.
            std::mem::forget(farmem_sys::signal::SignalBlock::new());
            for conn in listener.incoming().flatten() {
                if crate::fork::is_forked_child() {
                    return;
                }
                let _ = std::thread::Builder::new()
                    .name("farmem-peer".into())
                    .spawn(move || {
                        std::mem::forget(farmem_sys::signal::SignalBlock::new());
                        serve(rt, conn)
                    });
            }
        })?;
    Ok(())
}

fn same_user(conn: &UnixStream) -> bool {
    let fd = std::os::fd::AsRawFd::as_raw_fd(conn);
    farmem_sys::net::peer_uid(fd).is_ok_and(|u| u == farmem_sys::process::getuid())
}

fn serve(rt: &'static Runtime, mut conn: UnixStream) {
    if !same_user(&conn) {
        return;
    }
    let mut held: Option<IoPin> = None;
    let mut req = [0u8; 24];
    while conn.read_exact(&mut req).is_ok() {
        drop(held.take());
        let field = |i: usize| u64::from_ne_bytes(req[i * 8..i * 8 + 8].try_into().unwrap());
        let (addr, len, write) = (
            farmem_sys::usize_from(field(0)),
            farmem_sys::usize_from(field(1)),
            field(2) != 0,
        );
        let (lo, hi) = rt.arena_range();
        let granted = if addr >= lo && addr < hi && len > 0 {
            let n = len.min(hi - addr).min(rt.io_chunk());
            held = rt.pin_for_io(addr, n, write);
            if held.is_some() {
                n
            } else {
                0
            }
        } else {
            0
        };
        if conn.write_all(&(granted as u64).to_ne_bytes()).is_err() {
            break;
        }
    }
}

/// A connection to another process's pin service.
pub struct PeerPins {
    conn: UnixStream,
}

impl PeerPins {
    /// Connect to process `pid`'s service; None if it runs none (it is not
    /// a farmem process, or has no far memory).
    pub fn connect(pid: i32) -> Option<PeerPins> {
        let addr = SocketAddr::from_abstract_name(name(pid).as_bytes()).ok()?;
        let conn = UnixStream::connect_addr(&addr).ok()?;
        // A peer that stops answering must not hang the caller forever.
        conn.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
        Some(PeerPins { conn })
    }

    /// Ask the peer to pin `[addr, addr+len)` of its memory; returns how
    /// many bytes from `addr` are pinned (0: not its far memory). Releases
    /// the previous request's pins.
    pub fn pin(&mut self, addr: usize, len: usize, write: bool) -> std::io::Result<usize> {
        let mut req = [0u8; 24];
        req[..8].copy_from_slice(&(addr as u64).to_ne_bytes());
        req[8..16].copy_from_slice(&(len as u64).to_ne_bytes());
        req[16..].copy_from_slice(&(write as u64).to_ne_bytes());
        self.conn.write_all(&req)?;
        let mut rep = [0u8; 8];
        self.conn.read_exact(&mut rep)?;
        Ok(farmem_sys::usize_from(u64::from_ne_bytes(rep)))
    }
}
