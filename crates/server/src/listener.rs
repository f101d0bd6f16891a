//! The listening socket: TCP or Unix, bound from a [`ServerAddr`] or
//! inherited already listening.

use farmem_wire::{self as wire, ServerAddr, HEADER_LEN};
use std::io;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixListener;

/// Socket buffers for accepted connections: room for a whole largest frame
/// (256 pages and their numbers), so a Read reply or a client's Write leaves
/// in one `sendmsg` instead of waiting for the peer to drain the socket.
pub(crate) const SOCKET_BUFFER: usize = HEADER_LEN + wire::MAX_PAYLOAD;

/// A bound listening socket, TCP or Unix.
pub(crate) enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    pub(crate) fn bind(addr: &ServerAddr) -> io::Result<Listener> {
        match addr {
            ServerAddr::Tcp { host, port } => {
                TcpListener::bind((host.as_str(), *port)).map(Listener::Tcp)
            }
            ServerAddr::Unix(path) => UnixListener::bind(path).map(Listener::Unix),
            ServerAddr::UnixAbstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                let sa = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                UnixListener::bind_addr(&sa).map(Listener::Unix)
            }
        }
    }

    /// Whether clients arrive over TCP (from anywhere the network reaches)
    /// rather than a Unix socket (this machine only).
    pub(crate) fn is_tcp(&self) -> bool {
        matches!(self, Listener::Tcp(_))
    }

    pub(crate) fn fd(&self) -> std::os::fd::RawFd {
        match self {
            Listener::Tcp(l) => l.as_raw_fd(),
            Listener::Unix(l) => l.as_raw_fd(),
        }
    }

    pub(crate) fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.set_nonblocking(true),
            Listener::Unix(l) => l.set_nonblocking(true),
        }
    }

    /// Accept one connection: its socket and a name for messages.
    pub(crate) fn accept(&self) -> io::Result<(OwnedFd, String)> {
        match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept()?;
                let _ = s.set_nodelay(true);
                // Best effort: a smaller buffer only costs more waits.
                let _ = farmem_sys::net::set_socket_buffers(s.as_raw_fd(), SOCKET_BUFFER);
                Ok((s.into(), peer.to_string()))
            }
            Listener::Unix(l) => {
                let (s, _) = l.accept()?;
                let _ = farmem_sys::net::set_socket_buffers(s.as_raw_fd(), SOCKET_BUFFER);
                Ok((s.into(), "unix client".into()))
            }
        }
    }
}

/// Accept errors that pass (out of descriptors or memory for a moment).
pub(crate) fn is_transient_accept_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE)
            | Some(libc::ENFILE)
            | Some(libc::ENOBUFS)
            | Some(libc::ENOMEM)
            | Some(libc::ECONNABORTED)
    )
}
