//! How the remote backend reaches a memory server: a [`Transport`] is one
//! ordered, reliable connection carrying the wire protocol's frames.
//! [`StreamSocket`] (TCP, or a Unix stream socket on this machine) is the one
//! kind today (a Unix one may also pass file descriptors: the one-host
//! page path's chunks); docs/scale-out.md describes how an RDMA transport (UCX or
//! libfabric) would implement the same calls, and what it changes.
//!
//! Every call may run inside the SIGBUS handler: no allocation, no locks,
//! and a bounded wait (spin, then block until [`Wait::timeout_ns`]).

use farmem_sys::net::{self, Wait};
use farmem_wire::ServerAddr;
use std::io;
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, OwnedFd};

/// One connection to a memory server. Messages arrive in the order they
/// were sent, on both sides: the remote backend's ordering argument (a read
/// queues behind the write it must see) rests on it.
pub trait Transport: Send + Sync {
    /// Send `parts`, in order, as one message (a frame's head, then the
    /// pages it carries, gathered from where they lie).
    fn send(&self, parts: &[&[u8]], wait: Wait) -> io::Result<()>;
    /// Receive exactly `buf.len()` bytes.
    fn recv_exact(&self, buf: &mut [u8], wait: Wait) -> io::Result<()>;
    /// Receive what has arrived, scattered over `bufs` in order, waiting for
    /// at least one byte; 0 means the server closed the connection.
    fn recv_some(&self, bufs: &mut [&mut [u8]], wait: Wait) -> io::Result<usize>;
    /// Whether only this machine can be at the other end (then no shared
    /// secret is needed: a Unix socket).
    fn is_local(&self) -> bool;
    /// Whether the server is on this host (a Unix socket, or TCP to a
    /// loopback address): UCX then reaches it through shared memory.
    fn same_host(&self) -> bool;
    /// Whether the server closed the connection (or it failed); never waits.
    fn closed(&self) -> bool;
    /// End the connection both ways (the server sees the session's
    /// connection close); a thread using it meanwhile gets an error.
    fn shutdown(&self) {}
    /// The uid of the process at the other end of a Unix socket
    /// (`SO_PEERCRED`); None where the transport cannot tell (TCP).
    fn peer_uid(&self) -> Option<io::Result<u32>> {
        None
    }
    /// Receive exactly `buf.len()` bytes and the file descriptor the server
    /// passed with them, if any (a Unix socket's `SCM_RIGHTS`).
    fn recv_exact_with_fd(&self, buf: &mut [u8], wait: Wait) -> io::Result<Option<OwnedFd>> {
        self.recv_exact(buf, wait).map(|()| None)
    }
}

/// A non-blocking stream socket: TCP to another host, or Unix on this one.
pub struct StreamSocket {
    fd: OwnedFd,
    local: bool,
}

impl StreamSocket {
    /// Connect to `addr`, giving up after `timeout_ms` (at most 5 s per
    /// address a name resolves to); non-blocking, with socket buffers that
    /// hold a batch of write-backs and a read.
    pub fn connect(addr: &ServerAddr, timeout_ms: u64) -> io::Result<StreamSocket> {
        let (fd, local): (OwnedFd, bool) = match addr {
            ServerAddr::Unix(path) => (std::os::unix::net::UnixStream::connect(path)?.into(), true),
            ServerAddr::UnixAbstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                let sa = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                (
                    std::os::unix::net::UnixStream::connect_addr(&sa)?.into(),
                    true,
                )
            }
            ServerAddr::Tcp { host, port } => {
                let timeout = std::time::Duration::from_millis(timeout_ms.min(5000));
                let mut last = io::Error::other("the name resolves to no address");
                let mut found = None;
                for a in (host.as_str(), *port).to_socket_addrs()? {
                    match TcpStream::connect_timeout(&a, timeout) {
                        Ok(s) => {
                            let _ = s.set_nodelay(true);
                            found = Some(s);
                            break;
                        }
                        Err(e) => last = e,
                    }
                }
                (found.ok_or(last)?.into(), false)
            }
        };
        net::set_nonblocking(fd.as_raw_fd())?;
        // Room for a whole batch of deferred write-backs plus a read, so
        // neither side waits for the other to drain (best effort: the
        // kernel caps it at net.core.wmem_max).
        let _ = net::set_socket_buffers(fd.as_raw_fd(), 1 << 20);
        Ok(StreamSocket { fd, local })
    }
}

impl Transport for StreamSocket {
    fn send(&self, parts: &[&[u8]], wait: Wait) -> io::Result<()> {
        net::send_vectored(self.fd.as_raw_fd(), parts, wait)
    }
    fn recv_exact(&self, buf: &mut [u8], wait: Wait) -> io::Result<()> {
        net::recv_exact(self.fd.as_raw_fd(), buf, wait)
    }
    fn recv_some(&self, bufs: &mut [&mut [u8]], wait: Wait) -> io::Result<usize> {
        net::recv_some_vectored(self.fd.as_raw_fd(), bufs, wait)
    }
    fn is_local(&self) -> bool {
        self.local
    }
    fn same_host(&self) -> bool {
        net::peer_is_local(self.fd.as_raw_fd())
    }
    fn closed(&self) -> bool {
        net::peer_closed(self.fd.as_raw_fd())
    }
    fn shutdown(&self) {
        net::shutdown(self.fd.as_raw_fd());
    }
    fn peer_uid(&self) -> Option<io::Result<u32>> {
        self.local.then(|| net::peer_uid(self.fd.as_raw_fd()))
    }
    fn recv_exact_with_fd(&self, buf: &mut [u8], wait: Wait) -> io::Result<Option<OwnedFd>> {
        if self.local {
            net::recv_exact_with_fd(self.fd.as_raw_fd(), buf, wait)
        } else {
            self.recv_exact(buf, wait).map(|()| None)
        }
    }
}
