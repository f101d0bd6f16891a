//! Prefetch: per-stream windows that grow with use. A stream is a run of
//! faults at a constant stride; its window doubles each time the program
//! reaches the page just past it, up to FARMEM_PREFETCH pages.

use crate::page::{self, Event, PageWord};
use crate::Runtime;
use std::sync::atomic::Ordering;

pub(crate) const NSTREAMS: usize = 32;
const MAX_STRIDE: i64 = 64;

impl Runtime {
    /// Plan the prefetch window for a demand fault at `p`: returns the stride
    /// and how many pages (the demand page included) to fetch, and remembers the
    /// stream. A stream is confirmed when a fault lands at most MAX_STRIDE pages
    /// from a recent one; each fault at the page just past the previous window
    /// doubles the window up to FARMEM_PREFETCH.
    pub(crate) fn plan_prefetch(
        &self,
        p: usize,
        w: PageWord,
    ) -> (i64, usize, Option<(usize, u64)>) {
        let maxw = self.cfg.prefetch_pages as usize;
        if maxw <= 1 || w.has(page::ADV_RANDOM) {
            return (1, 1, None);
        }
        if w.has(page::ADV_SEQUENTIAL) {
            return (1, maxw, None);
        }
        let p64 = p as i64;
        for (i, s) in self.streams.iter().enumerate() {
            let e = s.load(Ordering::Relaxed);
            if e == 0 {
                continue;
            }
            let (pos, win, stride) = decode_stream(e);
            if win == 0 {
                let d = p64 - pos;
                if d != 0 && d.abs() <= MAX_STRIDE {
                    return (d, 4.min(maxw), Some((i, e)));
                }
            } else if p64 == pos {
                // The stream ran past its window: the prefetched pages were used.
                for k in 1..win as i64 {
                    let q = pos - stride * k;
                    if q >= 0
                        && (q as usize) < self.npages
                        && self.transition(q as usize, Event::PrefetchUsed).is_ok()
                    {
                        self.stats.prefetch_used.fetch_add(1, Ordering::Relaxed);
                    }
                }
                return (stride, (win as usize * 2).clamp(2, maxw), Some((i, e)));
            }
        }
        let v = self.stream_victim.fetch_add(1, Ordering::Relaxed) % NSTREAMS;
        self.streams[v].store(encode_stream(p64, 0, 0), Ordering::Relaxed);
        (1, 1, None)
    }
}

/// Stream entries: position (39 bits) | valid (1 bit) | window (8 bits) |
/// stride (16 bits). Window 0 means "one fault seen at `position`, no stride
/// yet". The arena has at most 2^38 pages, so positions fit.
pub(crate) fn encode_stream(pos: i64, win: u64, stride: i64) -> u64 {
    ((pos as u64) & POS_MASK)
        | (1 << 39)
        | ((win & 0xFF) << 40)
        | (((stride as i16) as u16 as u64) << 48)
}

const POS_MASK: u64 = (1 << 39) - 1;

fn decode_stream(e: u64) -> (i64, u64, i64) {
    (
        (e & POS_MASK) as i64,
        (e >> 40) & 0xFF,
        ((e >> 48) as u16 as i16) as i64,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(crate) fn stream_encoding_roundtrips() {
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
