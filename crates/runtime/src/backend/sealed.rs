//! A connection that passed the shared-secret handshake: every frame it
//! sends gets its tag, and every frame it receives is checked against its
//! tag before the caller can act on it (`farmem_wire::seal`). The remote
//! backend's code above is the same as on an open connection; this layer
//! follows the frames in the byte stream.
//!
//! Receiving follows each frame in three parts: the header, the covered
//! payload, then (after the tag, read and checked here) any page data. A
//! read never crosses from one part into the next, so the call that
//! delivers a frame's last covered byte has checked the tag before it
//! returns: a header the caller has seen is at worst unchecked for as long
//! as it takes to read the part after it, and the caller acts on no payload
//! byte and on no page whose frame failed. A frame that fails breaks the
//! connection for good (the stream's position can no longer be trusted).

use super::transport::Transport;
use crate::sync::SpinLock;
use farmem_sys::net::{Wait, MAX_IOV};
use farmem_wire::seal::{covered_len, Direction, FrameMac, SessionKey, TAG_LEN};
use farmem_wire::{Header, HEADER_LEN};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

/// Most buffers one scattered read fills (the backend passes at most two).
const MAX_SCATTER: usize = 4;

pub(crate) struct Sealed {
    inner: Box<dyn Transport>,
    key: SessionKey,
    /// Frames sent so far (the next one's sequence number).
    sent: AtomicU64,
    /// Where the incoming stream stands. Taken only between reads, never
    /// across one; uncontended, since only the connection's holder reads.
    incoming: SpinLock<Incoming>,
}

/// The frame being received.
struct Incoming {
    /// Its sequence number.
    seq: u64,
    part: Part,
    header: [u8; HEADER_LEN],
    mac: FrameMac,
    /// A frame failed its tag, or its header did not decode: nothing more
    /// is taken from this connection.
    broken: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    /// `got` bytes of the header are in.
    Header { got: usize },
    /// `left` bytes of covered payload to come, then the tag, then `rest`
    /// bytes of page data.
    Covered { left: usize, rest: usize },
    /// `left` bytes of page data to come.
    Pages { left: usize },
}

impl Part {
    /// Bytes the next read may take without crossing into another part.
    fn room(self) -> usize {
        match self {
            Part::Header { got } => HEADER_LEN - got,
            Part::Covered { left, .. } | Part::Pages { left } => left,
        }
    }
}

impl Incoming {
    /// Take `bytes`, all within the current part.
    fn take(&mut self, key: &SessionKey, bytes: &[u8]) {
        match self.part {
            Part::Header { got } => {
                self.header[got..got + bytes.len()].copy_from_slice(bytes);
                self.mac.update(bytes);
                let got = got + bytes.len();
                self.part = Part::Header { got };
                if got == HEADER_LEN {
                    match Header::decode(&self.header) {
                        Ok(h) => {
                            let covered = covered_len(&h);
                            self.part = Part::Covered {
                                left: covered,
                                rest: h.len as usize - covered,
                            };
                        }
                        // The caller decodes the same header and says why;
                        // nothing after it can be framed.
                        Err(_) => self.broken = true,
                    }
                }
            }
            Part::Covered { left, rest } => {
                self.mac.update(bytes);
                self.part = Part::Covered {
                    left: left - bytes.len(),
                    rest,
                };
            }
            Part::Pages { left } => {
                self.part = Part::Pages {
                    left: left - bytes.len(),
                };
                if left == bytes.len() {
                    self.next_frame(key);
                }
            }
        }
    }

    /// Whether the covered part is complete and the tag comes next.
    fn tag_due(&self) -> bool {
        !self.broken && matches!(self.part, Part::Covered { left: 0, .. })
    }

    fn next_frame(&mut self, key: &SessionKey) {
        self.seq += 1;
        self.part = Part::Header { got: 0 };
        self.mac = key.frame_mac(Direction::ToClient, self.seq);
    }
}

impl Sealed {
    /// `inner`, which has just passed the handshake that gave `key`.
    pub(crate) fn new(inner: Box<dyn Transport>, key: SessionKey) -> Sealed {
        let mac = key.frame_mac(Direction::ToClient, 0);
        Sealed {
            inner,
            key,
            sent: AtomicU64::new(0),
            incoming: SpinLock::new(Incoming {
                seq: 0,
                part: Part::Header { got: 0 },
                header: [0; HEADER_LEN],
                mac,
                broken: false,
            }),
        }
    }

    /// Read the tag of the frame whose covered part is in, and check it.
    fn check_tag(&self, wait: Wait) -> io::Result<()> {
        let mut tag = [0u8; TAG_LEN];
        let got = self.inner.recv_exact(&mut tag, wait);
        let mut inc = self.incoming.lock();
        if let Err(e) = got {
            inc.broken = true;
            return Err(e);
        }
        if !inc.mac.verify(&tag) {
            inc.broken = true;
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "frame {} from the server failed its seal: altered, replayed or forged on the way (connection closed)",
                    inc.seq
                ),
            ));
        }
        match inc.part {
            Part::Covered { rest, .. } if rest > 0 => inc.part = Part::Pages { left: rest },
            _ => inc.next_frame(&self.key),
        }
        Ok(())
    }
}

fn broken() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "this connection's frames can no longer be trusted (an earlier frame failed its seal or did not decode)",
    )
}

/// Append `s` (unless empty) to the `k` parts of `out`.
fn push<'a>(out: &mut [&'a [u8]; MAX_IOV], k: &mut usize, s: &'a [u8]) -> io::Result<()> {
    if !s.is_empty() {
        *out.get_mut(*k)
            .ok_or_else(|| invalid("too many parts in one sealed frame"))? = s;
        *k += 1;
    }
    Ok(())
}

fn invalid(why: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, why)
}

impl Transport for Sealed {
    fn send(&self, parts: &[&[u8]], wait: Wait) -> io::Result<()> {
        let hb: &[u8; HEADER_LEN] = parts
            .first()
            .and_then(|p| p.get(..HEADER_LEN))
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| invalid("a frame to seal must start with its whole header"))?;
        let h = Header::decode(hb).map_err(|_| invalid("a frame to seal has a bad header"))?;
        let covered = HEADER_LEN + covered_len(&h);
        let seq = self.sent.fetch_add(1, Ordering::Relaxed);
        let mut mac = self.key.frame_mac(Direction::ToServer, seq);
        let mut left = covered;
        for p in parts {
            let k = p.len().min(left);
            mac.update(&p[..k]);
            left -= k;
        }
        if left > 0 {
            return Err(invalid("a frame to seal is shorter than its header says"));
        }
        let tag = mac.finish();
        // The same parts with the tag put in after the covered bytes.
        let mut out: [&[u8]; MAX_IOV] = [&[]; MAX_IOV];
        let mut k = 0;
        let mut left = Some(covered);
        for p in parts {
            match left {
                Some(l) if l <= p.len() => {
                    push(&mut out, &mut k, &p[..l])?;
                    push(&mut out, &mut k, &tag)?;
                    push(&mut out, &mut k, &p[l..])?;
                    left = None;
                }
                Some(l) => {
                    push(&mut out, &mut k, p)?;
                    left = Some(l - p.len());
                }
                None => push(&mut out, &mut k, p)?,
            }
        }
        self.inner.send(&out[..k], wait)
    }

    fn recv_exact(&self, buf: &mut [u8], wait: Wait) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let n = self.recv_some(&mut [&mut buf[done..]], wait)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed by peer",
                ));
            }
            done += n;
        }
        Ok(())
    }

    fn recv_some(&self, bufs: &mut [&mut [u8]], wait: Wait) -> io::Result<usize> {
        let room = {
            let inc = self.incoming.lock();
            if inc.broken {
                return Err(broken());
            }
            inc.part.room()
        };
        // The caller's buffers, cut where the current part ends.
        let mut cut: [&mut [u8]; MAX_SCATTER] = Default::default();
        let mut k = 0;
        let mut left = room;
        for b in bufs.iter_mut() {
            if k == MAX_SCATTER || left == 0 {
                break;
            }
            let n = b.len().min(left);
            cut[k] = &mut b[..n];
            left -= n;
            k += 1;
        }
        let n = self.inner.recv_some(&mut cut[..k], wait)?;
        if n == 0 {
            return Ok(0);
        }
        let tag_due = {
            let mut inc = self.incoming.lock();
            let mut left = n;
            for b in bufs.iter() {
                let k = b.len().min(left);
                inc.take(&self.key, &b[..k]);
                left -= k;
                if left == 0 {
                    break;
                }
            }
            inc.tag_due()
        };
        if tag_due {
            self.check_tag(wait)?;
        }
        Ok(n)
    }

    fn is_local(&self) -> bool {
        self.inner.is_local()
    }
    fn same_host(&self) -> bool {
        self.inner.same_host()
    }
    fn closed(&self) -> bool {
        self.inner.closed()
    }
    fn shutdown(&self) {
        self.inner.shutdown();
    }
    fn peer_uid(&self) -> Option<io::Result<u32>> {
        self.inner.peer_uid()
    }
}

#[cfg(test)]
mod tests;
