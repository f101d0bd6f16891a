//! Dirty tracking: pages are installed write-protected unless the fault was a
//! write, and the first write to a clean page faults once more to mark it
//! dirty (`UFFDIO_WRITEPROTECT` off). Only dirty pages are written back.
//!
//! A program that reads a region and then writes it in order (a merge pass,
//! a stencil sweeping its output over its input) would take one such fault
//! per page, ~10 µs each. So write faults on clean pages are followed as
//! streams, like prefetch: when the next fault lands just past the previous
//! one, the clean pages after it are made writable with it, a window that
//! doubles up to one batch. A window that runs out of clean pages (a
//! read-modify-write sweep just behind its read front: NPB MG's `psinv`)
//! ends where it stopped, and the stream continues from there with its
//! window. A page taken this way and then not written costs one needless
//! write-back; a page never written is still never sent.
//!
//! Why not `UFFD_FEATURE_WP_ASYNC` with `PAGEMAP_SCAN` (no fault at all, dirty
//! bits harvested per eviction)? Evicting a page needs its content to stop
//! changing between the harvest and the unmap, and on this kernel nothing
//! does that atomically: in async mode a write-protected page is simply made
//! writable again by the kernel, and `UFFDIO_MOVE` (which would take the page
//! out of the writer's reach) does not carry the write-protect bit, so a
//! write between harvest and move would be lost. `crates/sys/tests/abi.rs`
//! checks that fact on the running kernel.

use crate::cost::Phase;
use crate::page::{self, next, Event, State};
use crate::{Runtime, MAX_BATCH};
use farmem_sys::msg::MsgBuf;
use farmem_sys::PAGE_SIZE;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

const NWSTREAMS: usize = 16;

/// Stream entries: position (39 bits) | valid (1 bit) | window (8 bits) |
/// stride (16 bits). Window 0 means "one fault seen at `position`, no stride
/// yet". The arena has at most 2^38 pages, so positions fit.
fn encode_stream(pos: i64, win: u64, stride: i64) -> u64 {
    // Two's-complement bit packing: pos is a page number (below 2^38, within
    // POS_MASK) and |stride| <= MAX_STRIDE fits an i16.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let (pos, stride) = (pos as u64, (stride as i16) as u16 as u64);
    (pos & POS_MASK) | (1 << 39) | ((win & 0xFF) << 40) | (stride << 48)
}

const POS_MASK: u64 = (1 << 39) - 1;

fn decode_stream(e: u64) -> (i64, u64, i64) {
    (
        (e & POS_MASK) as i64,
        (e >> 40) & 0xFF,
        ((e >> 48) as u16 as i16) as i64,
    )
}

/// Write streams over clean pages: where each expects its next write fault,
/// and its window. Lock-free: a lost update only costs a stream its window.
pub(crate) struct WriteStreams {
    streams: [AtomicU64; NWSTREAMS],
    victim: AtomicUsize,
}

impl WriteStreams {
    pub(crate) fn new() -> WriteStreams {
        WriteStreams {
            streams: [const { AtomicU64::new(0) }; NWSTREAMS],
            victim: AtomicUsize::new(0),
        }
    }

    /// Which stream the write fault at `p` continues (it lands where the
    /// last one ended), and how many clean pages after `p` to make writable
    /// with it: twice the stream's window, or 0 for a new stream (which then
    /// replaces the oldest).
    fn plan(&self, p: usize) -> (Option<usize>, usize) {
        for (i, s) in self.streams.iter().enumerate() {
            let e = s.load(Ordering::Relaxed);
            let (pos, win, _) = decode_stream(e);
            if e != 0 && pos == p as i64 {
                let ahead = (farmem_sys::usize_from(win) * 2).clamp(2, MAX_BATCH - 1);
                return (Some(i), ahead);
            }
        }
        let v = self.victim.fetch_add(1, Ordering::Relaxed) % NWSTREAMS;
        self.streams[v].store(encode_stream(p as i64 + 1, 0, 1), Ordering::Relaxed);
        (None, 0)
    }

    /// Stream `i` expects its next write fault at `next`, with window `win`.
    fn moved(&self, i: usize, next: usize, win: usize) {
        self.streams[i].store(encode_stream(next as i64, win as u64, 1), Ordering::Relaxed);
    }
}

impl Runtime {
    /// A write hit clean page `p`, now MakingDirty and owned by this thread:
    /// make it (and, on a write stream, the clean pages after it) writable
    /// and dirty.
    pub(crate) fn make_dirty(&self, p: usize) {
        let timed = self.span();
        let (stream, ahead) = self.streams.writes().plan(p);
        let mut n = 1;
        while n <= ahead && p + n < self.arena.npages() {
            let q = p + n;
            let w = self.arena.table().load(q);
            let taken = w.state() == State::Clean
                && !w.has(page::ADV_READ_MOSTLY)
                && next(w, Event::WriteFault).is_ok_and(|nw| self.arena.table().cas(q, w, nw));
            if !taken {
                break;
            }
            n += 1;
        }
        if let Some(s) = stream {
            // The stream's next write fault is at the first page not taken:
            // when it outruns the pages read in so far (a read-modify-write
            // sweep just behind its read front), it continues from there
            // with the window it has, instead of starting over.
            self.streams.writes().moved(s, p + n, ahead);
        }
        if let Err(e) = self
            .arena
            .uffd()
            .write_protect(self.addr_of(p), n * PAGE_SIZE, false)
        {
            let mut m = MsgBuf::new();
            let _ = writeln!(
                m,
                "farmem: cannot make far page {:#x} writable: {e}",
                self.addr_of(p)
            );
            farmem_sys::fatal(m.as_bytes());
        }
        for q in p..p + n {
            self.arena.table().must(q, Event::MadeDirty);
        }
        self.observe.stats().wp_faults.add(1);
        self.observe.stats().wp_ahead.add(n as u64 - 1);
        self.charge(timed, Phase::MakeDirty);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_encoding_roundtrips() {
        for (pos, win, stride) in [
            (0i64, 0u64, 0i64),
            (12345, 4, 1),
            (1 << 30, 64, -3),
            (7, 255, 64),
        ] {
            assert_eq!(
                decode_stream(encode_stream(pos, win, stride)),
                (pos, win, stride)
            );
        }
    }
}
