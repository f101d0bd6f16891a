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
//! Such a sweep still took one write-protect fault per window: the reads
//! bring each window in clean, and the writes follow. So a window fetched
//! (on demand or pipelined) where a write stream expects its next fault is
//! installed writable at once ([`WriteStreams::take`]), on credit: each
//! write-protect fault that lands where its stream expected refills the
//! credit to [`CREDIT`] windows, each window installed writable spends one,
//! and with none left the next window comes in clean, so that the writer's
//! fault confirms the stream again. A stream the program left (a write
//! sweep that ended where a read-only sweep begins) costs at most
//! [`CREDIT`] windows written back needlessly.
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

/// Windows a write stream may have installed writable (see the module
/// comment) between two write-protect faults that confirm it.
pub(crate) const CREDIT: u64 = 16;

/// How far, in pages, a write stream's writer may trail the windows it
/// took writable (see [`WriteStreams::take`]): a few windows pipelined
/// ahead.
const LAG: usize = 4 * MAX_BATCH;

/// Stream entries: position (39 bits) | valid (1 bit) | window (8 bits) |
/// credit (8 bits). Window 0 means "one fault seen at `position`, not
/// confirmed yet". The arena has at most 2^38 pages, so positions fit.
fn encode_stream(pos: usize, win: u64, credit: u64) -> u64 {
    // pos is a page number, below 2^38 (within POS_MASK).
    (pos as u64 & POS_MASK) | (1 << 39) | ((win & 0xFF) << 40) | ((credit & 0xFF) << 48)
}

const POS_MASK: u64 = (1 << 39) - 1;

fn decode_stream(e: u64) -> (usize, u64, u64) {
    (
        farmem_sys::usize_from(e & POS_MASK),
        (e >> 40) & 0xFF,
        (e >> 48) & 0xFF,
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

    /// Which stream the write fault at `p` continues, and how many clean
    /// pages after `p` to make writable with it: twice the stream's window,
    /// or 0 for a new stream (which then replaces the oldest). A fault
    /// continues a stream where the stream expected it, or behind the
    /// windows the stream brought in writable ahead of its writer (within
    /// [`LAG`] pages): those were taken while the writer was still on a
    /// window that had come in clean.
    fn plan(&self, p: usize) -> (Option<usize>, usize) {
        for (i, s) in self.streams.iter().enumerate() {
            let e = s.load(Ordering::Relaxed);
            let (pos, win, _) = decode_stream(e);
            let behind = win > 0 && p < pos && pos - p <= LAG;
            if e != 0 && (pos == p || behind) {
                let ahead = (farmem_sys::usize_from(win) * 2).clamp(2, MAX_BATCH - 1);
                return (Some(i), ahead);
            }
        }
        let v = self.victim.fetch_add(1, Ordering::Relaxed) % NWSTREAMS;
        self.streams[v].store(encode_stream(p + 1, 0, 0), Ordering::Relaxed);
        (None, 0)
    }

    /// Stream `i`, just confirmed by a write fault, has made the pages up
    /// to `next` writable: it expects its next fault there (or where its
    /// windows taken ahead end, if further), with window `win` and full
    /// credit.
    fn moved(&self, i: usize, next: usize, win: usize) {
        let e = self.streams[i].load(Ordering::Relaxed);
        let (pos, _, _) = decode_stream(e);
        let next = if e != 0 && pos > next && pos - next <= LAG {
            pos
        } else {
            next
        };
        self.streams[i].store(encode_stream(next, win as u64, CREDIT), Ordering::Relaxed);
        // One stream per place: another that ended near here (the same
        // writer, recorded twice where its faults raced) would spend a
        // credit of its own on the same windows. A second writer this close
        // (within LAG pages) loses its stream and builds it up again.
        for (j, s) in self.streams.iter().enumerate() {
            let e = s.load(Ordering::Relaxed);
            let (pos, _, _) = decode_stream(e);
            if j != i && e != 0 && pos.abs_diff(next) <= LAG {
                let _ = s.compare_exchange(e, 0, Ordering::Relaxed, Ordering::Relaxed);
            }
        }
    }

    /// Forget the streams that expect their next fault in pages `[first,
    /// end]` (freed: the end too, where a stream over the whole range waits).
    pub(crate) fn forget(&self, first: usize, end: usize) {
        for s in &self.streams {
            let e = s.load(Ordering::Relaxed);
            let (pos, _, _) = decode_stream(e);
            if e != 0 && (first..=end).contains(&pos) {
                let _ = s.compare_exchange(e, 0, Ordering::Relaxed, Ordering::Relaxed);
            }
        }
    }

    /// Whether a window of pages from `first` up to `end` (exclusive), about
    /// to be installed clean, is to be installed writable instead: a
    /// confirmed stream with credit expects its next write fault at
    /// `first`, or a little before (within [`LAG`] pages: a pipelined
    /// window is requested while the writer is still on the one before).
    /// If so, the stream spends one credit and expects its next fault at
    /// `end`.
    pub(crate) fn take(&self, first: usize, end: usize) -> bool {
        for s in &self.streams {
            let e = s.load(Ordering::Relaxed);
            let (pos, win, credit) = decode_stream(e);
            if e != 0 && first >= pos && first - pos <= LAG && win > 0 && credit > 0 && end > first
            {
                let taken = encode_stream(end, win, credit - 1);
                return s
                    .compare_exchange(e, taken, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok();
            }
        }
        false
    }
}

impl Runtime {
    /// Whether the `n` pages from `first` up to `end` (exclusive, a window
    /// of one stride-1 stream), about to be installed clean, come in
    /// writable instead: where a write stream expects its next fault
    /// ([`WriteStreams::take`]), unless the program said it mostly reads
    /// them.
    pub(crate) fn writable_ahead(&self, first: usize, end: usize, n: usize) -> bool {
        if self.arena.table().load(first).has(page::ADV_READ_MOSTLY)
            || !self.streams.writes().take(first, end)
        {
            return false;
        }
        self.observe.stats().wp_ahead.add(n as u64);
        true
    }

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
        for (pos, win, credit) in [
            (0usize, 0u64, 0u64),
            (12345, 4, 1),
            (1 << 30, 64, CREDIT),
            ((1 << 38) - 1, 255, 255),
        ] {
            assert_eq!(
                decode_stream(encode_stream(pos, win, credit)),
                (pos, win, credit)
            );
        }
    }

    /// A stream takes windows only once a write fault confirmed it, only
    /// where it expects the next one, and only as long as its credit lasts.
    #[test]
    fn windows_are_taken_on_credit() {
        let w = WriteStreams::new();
        // One fault: a stream, not yet confirmed.
        assert_eq!(w.plan(100), (None, 0));
        assert!(!w.take(101, 110));
        // A second fault where it expected: confirmed, with full credit.
        let (i, ahead) = w.plan(101);
        let i = i.expect("the stream continues");
        w.moved(i, 104, ahead);
        assert!(!w.take(103, 110), "not where the stream expects");
        let mut at = 104;
        for _ in 0..CREDIT {
            assert!(w.take(at, at + 8));
            at += 8;
        }
        assert!(
            !w.take(at, at + 8),
            "credit spent: the next window comes in clean"
        );
        // The writer's fault on that window confirms the stream again.
        let (j, ahead) = w.plan(at);
        assert_eq!(j, Some(i));
        w.moved(i, at + 8, ahead);
        assert!(w.take(at + 8, at + 16));
    }
}
