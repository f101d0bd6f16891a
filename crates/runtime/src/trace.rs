//! The policy trace (`FARMEM_TRACE=FILE`): every fault, prefetch, use of a
//! prefetched page, eviction and range the program gives back, in the order
//! the runtime saw them, for `farmem trace` to replay under Belady's MIN,
//! LRU and farmem's policy (see the `farmem-sim` crate).
//!
//! Records are appended from the fault path (inside the SIGBUS handler) and
//! from the calls that give pages back (with signals blocked), so the buffer
//! is preallocated and flushed with raw `write` calls under a spin lock:
//! nothing here allocates. The cost when tracing is off is one branch.
//!
//! File format (little-endian): a 48-byte header, then 8-byte records.
//! ```text
//! header: b"FMTRACE3" | budget pages u64 | prefetch window u32 | hold percent u32 | arena pages u64
//!         | eviction batch u32 | free reserve u32 | 8 bytes zero
//! record: bits 0-39 page | bits 40-47 cell | bits 48-55 detail | bits 56-63 kind
//! ```
//! A fault record's cell is where in its page the fault was, in 16-byte
//! cells ([`crate::readahead::CELL`]): what the prefetch planner follows
//! strides that are not whole pages by. Traces written before it was kept
//! hold 0 there, and replay as if every fault were at its page's start.
//! Traces of the second format (`FMTRACE2`) are the same without
//! [`Kind::Released`] records: their runtime did not write them, which
//! [`Header::releases`] says. Traces of the first format (`FMTRACE1`, 32
//! bytes, no eviction settings) read as batch 32 and no reserve, which is
//! what their runtime did.

use crate::sync::SpinLock;
use farmem_sys::mem::Mapping;
use std::fs::File;
use std::io::{self, Write as _};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

pub const MAGIC: &[u8; 8] = b"FMTRACE3";
pub const HEADER_BYTES: usize = 48;
const MAGIC_V2: &[u8; 8] = b"FMTRACE2";
const MAGIC_V1: &[u8; 8] = b"FMTRACE1";
const HEADER_V1_BYTES: usize = 32;
/// Records buffered before a `write`.
const BUF_RECORDS: usize = 1 << 16;
const PAGE_MASK: u64 = (1 << 40) - 1;

/// What a record says happened to its page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A demand fault on an absent page (the program read it).
    FaultRead = 1,
    /// A demand fault on an absent page (the program wrote it).
    FaultWrite = 2,
    /// A write to a resident clean page (a write-protect fault): a reference
    /// that moved no page.
    WriteHit = 3,
    /// The program reached a page an asynchronous prefetch had in flight.
    PrefetchWait = 4,
    /// Fetched ahead of demand; the detail says why ([`Why`]).
    Prefetch = 5,
    /// A prefetched page seen used.
    PrefetchUsed = 6,
    /// Evicted; detail bit 0: written back, bit 1: a prefetched page never seen used.
    Evict = 7,
    /// Pages given back by the program (freed, unmapped or `MADV_DONTNEED`):
    /// `page` is the first, the detail plus one how many (up to
    /// [`RELEASE_MAX`]; a longer range is several records). Their content
    /// is gone: a later reference is to a new page.
    Released = 8,
}

/// Pages one [`Kind::Released`] record covers at most.
pub const RELEASE_MAX: usize = 256;

impl Kind {
    pub fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::FaultRead,
            2 => Kind::FaultWrite,
            3 => Kind::WriteHit,
            4 => Kind::PrefetchWait,
            5 => Kind::Prefetch,
            6 => Kind::PrefetchUsed,
            7 => Kind::Evict,
            8 => Kind::Released,
            _ => return None,
        })
    }

    /// Whether the record is a reference by the program (what MIN replays).
    pub fn is_reference(self) -> bool {
        matches!(
            self,
            Kind::FaultRead | Kind::FaultWrite | Kind::WriteHit | Kind::PrefetchWait
        )
    }
}

/// Why a page was prefetched (the detail of a [`Kind::Prefetch`] record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Why {
    /// The range is advised SEQUENTIAL or WILLNEED.
    Advice = 0,
    /// A stream's window (stride proved by earlier faults).
    Stream = 1,
    /// A pipelined window requested ahead of a forward stream.
    Pipelined = 2,
    /// A probe: a small window in a region whose prefetches were wasted, to
    /// learn whether that has changed.
    Probe = 3,
}

impl Why {
    pub const COUNT: usize = 4;
    pub const NAMES: [&'static str; Why::COUNT] = ["advice", "stream", "pipelined", "probe"];
}

/// Detail of a fault record: the page came back from the hold (no network).
pub const FAULT_FROM_HOLD: u8 = 1;
pub const EVICT_WRITTEN_BACK: u8 = 1;
pub const EVICT_UNUSED_PREFETCH: u8 = 2;

pub fn encode(kind: Kind, page: u64, detail: u8) -> u64 {
    (page & PAGE_MASK) | u64::from(detail) << 48 | (kind as u64) << 56
}

/// A fault record: [`encode`] with the cell of the page the fault was at.
pub fn encode_at(kind: Kind, page: u64, detail: u8, cell: u8) -> u64 {
    encode(kind, page, detail) | u64::from(cell) << 40
}

/// A record's cell (0 but for faults; see the format above).
pub fn cell(r: u64) -> u8 {
    ((r >> 40) & 0xFF) as u8
}

/// A record's (kind, page, detail); None for a kind this build does not know.
pub fn decode(r: u64) -> Option<(Kind, u64, u8)> {
    let kind = Kind::from_u8((r >> 56) as u8)?;
    Some((kind, r & PAGE_MASK, ((r >> 48) & 0xFF) as u8))
}

/// What a trace file's header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The whole local budget (resident pages and the hold).
    pub budget_pages: u64,
    pub prefetch_pages: u32,
    /// `FARMEM_HOLD`.
    pub hold_percent: u32,
    pub arena_pages: u64,
    /// Victims a round chose at least: `FARMEM_EVICT_BATCH`, or what
    /// `auto` made of the budget. A replay at another budget keeps it (the
    /// header does not say whether it came from `auto`).
    pub evict_batch: u32,
    /// `FARMEM_RESERVE`, as the runtime applied it (capped).
    pub reserve_pages: u32,
    /// Whether the runtime recorded the pages the program gave back
    /// ([`Kind::Released`]); traces made before it did read as false.
    pub releases: bool,
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut h = [0u8; HEADER_BYTES];
        h[..8].copy_from_slice(MAGIC);
        h[8..16].copy_from_slice(&self.budget_pages.to_le_bytes());
        h[16..20].copy_from_slice(&self.prefetch_pages.to_le_bytes());
        h[20..24].copy_from_slice(&self.hold_percent.to_le_bytes());
        h[24..32].copy_from_slice(&self.arena_pages.to_le_bytes());
        h[32..36].copy_from_slice(&self.evict_batch.to_le_bytes());
        h[36..40].copy_from_slice(&self.reserve_pages.to_le_bytes());
        h
    }

    /// The header and its length, or None if `b` starts with neither format.
    pub fn decode(b: &[u8]) -> Option<(Header, usize)> {
        let (len, releases) = match b.get(..8) {
            Some(m) if m == MAGIC => (HEADER_BYTES, true),
            Some(m) if m == MAGIC_V2 => (HEADER_BYTES, false),
            Some(m) if m == MAGIC_V1 => (HEADER_V1_BYTES, false),
            _ => return None,
        };
        if b.len() < len {
            return None;
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or([0; 4]));
        let v2 = len == HEADER_BYTES;
        Some((
            Header {
                budget_pages: u64_at(8),
                prefetch_pages: u32_at(16),
                hold_percent: u32_at(20),
                arena_pages: u64_at(24),
                evict_batch: if v2 { u32_at(32) } else { 32 },
                reserve_pages: if v2 { u32_at(36) } else { 0 },
                releases,
            },
            len,
        ))
    }
}

struct Buf {
    records: Mapping,
    len: usize,
    /// A write failed: stop tracing (and say so once) rather than stop the program.
    failed: bool,
}

/// An open trace file and its buffer.
pub(crate) struct Tracer {
    fd: OwnedFd,
    buf: SpinLock<Buf>,
}

impl Tracer {
    pub(crate) fn create(path: &Path, header: Header) -> io::Result<Tracer> {
        let mut f = File::create(path)?;
        f.write_all(&header.encode())?;
        let records = Mapping::anonymous(BUF_RECORDS * 8, true)?;
        Ok(Tracer {
            fd: f.into(),
            buf: SpinLock::new(Buf {
                records,
                len: 0,
                failed: false,
            }),
        })
    }

    /// Append one record (async-signal-safe). Callers outside the SIGBUS
    /// handler hold signals blocked, as for every spin lock of the runtime.
    pub(crate) fn record(&self, kind: Kind, page: usize, detail: u8) {
        self.push(encode(kind, page as u64, detail));
    }

    /// [`Tracer::record`] for a fault at cell `cell` of its page.
    pub(crate) fn record_at(&self, kind: Kind, page: usize, detail: u8, cell: u8) {
        self.push(encode_at(kind, page as u64, detail, cell));
    }

    fn push(&self, word: u64) {
        let mut b = self.buf.lock();
        if b.failed {
            return;
        }
        let i = b.len;
        let p = b.records.as_ptr().cast::<u64>();
        // SAFETY: i < BUF_RECORDS (flushed when full below); the mapping holds
        // BUF_RECORDS u64s, is page-aligned, and is only touched under the lock.
        unsafe { p.add(i).write(word) };
        b.len += 1;
        if b.len == BUF_RECORDS {
            self.flush_locked(&mut b);
        }
    }

    fn flush_locked(&self, b: &mut Buf) {
        // SAFETY: the first `len` records were written above; the mapping
        // lives as long as the buffer.
        let bytes = unsafe { std::slice::from_raw_parts(b.records.as_ptr(), b.len * 8) };
        if let Err(e) = farmem_sys::write_all_fd(self.fd.as_raw_fd(), bytes) {
            b.failed = true;
            let mut m = farmem_sys::msg::MsgBuf::new();
            let _ = std::fmt::Write::write_fmt(
                &mut m,
                format_args!("farmem: FARMEM_TRACE: cannot write the trace ({e}); tracing stops, the program goes on\n"),
            );
            farmem_sys::write_stderr(m.as_bytes());
        }
        b.len = 0;
    }

    /// Write out what is buffered (at exit).
    pub(crate) fn flush(&self) {
        let _block = farmem_sys::signal::SignalBlock::new();
        let mut b = self.buf.lock();
        if !b.failed && b.len > 0 {
            self.flush_locked(&mut b);
        }
    }
}

/// The trace file of process `pid`: `%p` in the configured path becomes the
/// pid, so that every process of a job (MPI ranks, a script's programs)
/// writes its own.
pub fn path_for(configured: &Path, pid: u32) -> std::path::PathBuf {
    let s = configured.to_string_lossy();
    if s.contains("%p") {
        std::path::PathBuf::from(s.replace("%p", &pid.to_string()))
    } else {
        configured.to_path_buf()
    }
}

/// Read a whole trace file: its header and records.
pub fn read(path: &Path) -> io::Result<(Header, Vec<u64>)> {
    let bytes = std::fs::read(path)?;
    let (header, len) = Header::decode(&bytes).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is not a farmem trace (it does not start with {:?}); write one with FARMEM_TRACE=FILE or farmem run --trace FILE",
                path.display(),
                std::str::from_utf8(MAGIC).unwrap_or("")
            ),
        )
    })?;
    let body = &bytes[len..];
    if !body.len().is_multiple_of(8) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: the trace ends in the middle of a record (was the program killed while it wrote?)",
                path.display()
            ),
        ));
    }
    let records = body
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect();
    Ok((header, records))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_roundtrip() {
        for (k, p, d) in [
            (Kind::FaultRead, 0u64, 0u8),
            (Kind::Evict, (1 << 40) - 1, 3),
            (Kind::Prefetch, 12345, Why::Probe as u8),
            (Kind::Released, 77, 255),
        ] {
            assert_eq!(decode(encode(k, p, d)), Some((k, p, d)));
            let r = encode_at(k, p, d, 0xA5);
            assert_eq!((decode(r), cell(r)), (Some((k, p, d)), 0xA5));
            assert_eq!(cell(encode(k, p, d)), 0);
        }
        assert_eq!(decode(0), None);
    }

    #[test]
    fn header_roundtrips_and_rejects_other_files() {
        let h = Header {
            budget_pages: 7,
            prefetch_pages: 64,
            hold_percent: 6,
            arena_pages: 1 << 30,
            evict_batch: 16,
            reserve_pages: 48,
            releases: true,
        };
        assert_eq!(Header::decode(&h.encode()), Some((h, HEADER_BYTES)));
        // A second-format trace has no release records, and says so.
        let mut v2 = h.encode();
        v2[..8].copy_from_slice(MAGIC_V2);
        let (old, len) = Header::decode(&v2).expect("a second-format header");
        assert_eq!(
            (old, len),
            (
                Header {
                    releases: false,
                    ..h
                },
                HEADER_BYTES
            )
        );
        assert_eq!(Header::decode(b"not a trace at all, not at all!!"), None);
        // A first-format trace reads with the eviction its runtime used.
        let mut v1 = h.encode()[..HEADER_V1_BYTES].to_vec();
        v1[..8].copy_from_slice(MAGIC_V1);
        let (old, len) = Header::decode(&v1).expect("a first-format header");
        assert_eq!((old.evict_batch, old.reserve_pages, len), (32, 0, 32));
        assert_eq!(old.budget_pages, 7);
    }
}
