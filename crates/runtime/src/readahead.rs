//! What to prefetch with a demand fault: the decision, as pure bookkeeping
//! over page numbers, so that the same code runs in the fault path (under a
//! spin lock) and in the policy simulator (the `farmem-sim` crate).
//!
//! Two rules keep prefetch paying for itself:
//!
//! - **A pattern must be proved before it is followed.** A stream is a run
//!   of faults at one stride (|stride| <= 64 pages). Its first fault opens a
//!   candidate, the second gives the stride, and only the third, landing
//!   exactly one stride further, confirms it (Leap's majority trend, per
//!   stream rather than over one global window, so that a program's
//!   interleaved streams do not hide each other). A random fault lands on the
//!   one page a candidate expects with odds of one in the arena's size, so a
//!   graph traversal or a table lookup stays on demand pages. A confirmed
//!   stream's window starts at 4 pages and doubles each time the program
//!   reaches the page just past it (its previous window was used), up to
//!   `FARMEM_PREFETCH`.
//! - **Windows are sized by what they earned** (Linux readahead's hit
//!   feedback, kept per 2 MiB region). Each prefetched page ends used (the
//!   stream ran through it, or the program wrote it) or wasted (evicted
//!   unused); a region's score counts both, halving as it grows so that it
//!   follows phase changes. A region whose prefetches are mostly wasted gets
//!   demand pages only, except a small probe window on one planned window
//!   in [`PROBE_EVERY`], so that a region that turns sequential is seen.
//!
//! Sequential streams keep their full windows: their pages are used, so their
//! regions score well. `SEQUENTIAL` and `WILLNEED` advice skip both rules;
//! `RANDOM` advice turns prefetch off.

use crate::trace::Why;

pub const NSTREAMS: usize = 64;
pub const MAX_STRIDE: i64 = 64;
/// Exact faults after which a stream is its own evidence.
const PROVEN: u32 = 4;
/// A stream may go on through this many resident pages (strides) past its
/// expected fault and still be the same stream.
pub const MAX_GAP: i64 = 16;
/// A confirmed stream's first window.
pub const FIRST_WINDOW: usize = 4;
/// Regions of 2^REGION_SHIFT pages (2 MiB) share a score.
const REGION_SHIFT: u32 = 9;
pub const NREGIONS: usize = 4096;
/// A score of fewer outcomes than this is no evidence yet.
const MIN_EVIDENCE: u32 = 16;
/// Scores halve when their outcomes reach this many.
const DECAY_AT: u32 = 256;
/// In a region that wastes its prefetches, one planned window in this many
/// is still fetched (at two pages) to learn whether that changed.
pub const PROBE_EVERY: u32 = 16;
const PROBE_WINDOW: usize = 2;
/// Resident pages just before a fault that make it a stream already under
/// way (a random fault finds them all resident with probability (resident
/// share)^4: 6% at half local, under 1% at 4x expansion; the region score
/// stops the rest).
pub const RUN_BEHIND: usize = 4;

/// One stream: the page its next fault is expected at, its stride, its
/// window (0: not confirmed yet), and how many faults it has seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stream {
    pub next: i64,
    pub stride: i64,
    pub window: usize,
    pub seen: u32,
}

/// A fault's plan: fetch `pages` pages (the demand page included) at
/// `stride`, for reason `why`; `used` is the previous window the program
/// has now gone past, as (first page, stride, pages): the caller counts
/// those still marked prefetched as used. `pipeline`: a confirmed forward
/// stream, whose next window may be requested ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub stride: i64,
    pub pages: usize,
    pub why: Why,
    pub stream: Option<usize>,
    pub used: Option<(i64, i64, usize)>,
    /// A proven forward stream: its next window may be requested ahead.
    pub pipeline: bool,
}

impl Plan {
    fn demand() -> Plan {
        Plan {
            stride: 1,
            pages: 1,
            why: Why::Stream,
            stream: None,
            used: None,
            pipeline: false,
        }
    }
}

/// Per region: used and wasted prefetched pages, 16 bits each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Score {
    used: u32,
    wasted: u32,
    probes: u32,
}

/// Advice that decides the plan on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hint {
    None,
    Sequential,
    Random,
}

pub struct Planner {
    maxw: usize,
    streams: [Stream; NSTREAMS],
    victim: usize,
    regions: Box<[Score]>,
}

fn region(p: u64) -> usize {
    // The modulo keeps it below NREGIONS (a power of two).
    farmem_sys::usize_from(p >> REGION_SHIFT) % NREGIONS
}

impl Planner {
    /// A planner for windows of at most `maxw` pages (<= 1: no prefetch).
    pub fn new(maxw: usize) -> Planner {
        Planner {
            maxw,
            streams: [Stream::default(); NSTREAMS],
            victim: 0,
            regions: vec![Score::default(); NREGIONS].into_boxed_slice(),
        }
    }

    pub fn max_window(&self) -> usize {
        self.maxw
    }

    /// The largest window a proven stream may grow to in the region of `p`.
    fn cap(&self, p: u64) -> usize {
        let s = self.regions[region(p)];
        let n = s.used + s.wasted;
        if n < MIN_EVIDENCE {
            return self.maxw;
        }
        match s.used * 16 / n {
            15.. => self.maxw,
            8.. => {
                (self.maxw * farmem_sys::usize_from(u64::from(s.used * 16 / n)) / 16)
                    .next_power_of_two()
                    / 2
            }
            _ => 2 * FIRST_WINDOW,
        }
        .max(2)
    }

    /// The largest window region `p`'s record allows a stream being
    /// confirmed, and whether it is a probe (probes count).
    fn allowed(&mut self, p: u64, want: usize) -> (usize, bool) {
        let s = &mut self.regions[region(p)];
        let n = s.used + s.wasted;
        if n < MIN_EVIDENCE {
            return (want, false);
        }
        // Used share in 1/16ths: at 15/16 or better any window; below half,
        // demand pages and the odd probe; in between, the window shrinks with
        // the share (a window of w pages wastes about w(1-u) of them).
        if s.used * 16 / n >= 8 {
            return (want.min(self.cap(p)), false);
        }
        let s = &mut self.regions[region(p)];
        s.probes += 1;
        if s.probes.is_multiple_of(PROBE_EVERY) {
            (want.min(PROBE_WINDOW), true)
        } else {
            (1, false)
        }
    }

    /// Plan the fetch for a demand fault at `p`. `resident(q)`: whether page
    /// `q` is resident (for streams that went through resident pages).
    pub fn plan(&mut self, p: u64, hint: Hint, resident: impl Fn(u64) -> bool) -> Plan {
        if self.maxw <= 1 || hint == Hint::Random {
            return Plan::demand();
        }
        if hint == Hint::Sequential {
            return Plan {
                stride: 1,
                pages: self.maxw,
                why: Why::Advice,
                stream: None,
                used: None,
                pipeline: false,
            };
        }
        let pi = i64::try_from(p).unwrap_or(i64::MAX);
        // A stream that expected this fault, or went on through resident
        // pages to it: reads of resident pages raise no fault, so a stream
        // that meets pages kept from earlier shows itself only here, and its
        // last window was used on the way.
        let through = |s: &Stream| {
            let gap = pi - s.next;
            s.stride != 0
                && gap.signum() == s.stride.signum()
                && gap % s.stride == 0
                && gap / s.stride <= MAX_GAP
                && (0..gap / s.stride)
                    .all(|j| u64::try_from(s.next + s.stride * j).is_ok_and(&resident))
        };
        // One pass over the streams finds both a confirmed stream to follow
        // (which wins wherever it is) and the first candidate that `begin`
        // would confirm: scattered faults follow none, and two passes over
        // the 2 KiB of streams were most of planning's cost there (GAPBS
        // BFS's graph build at a quarter; docs/benchmarks.md).
        let mut candidate = None;
        for (i, s) in self.streams.iter().enumerate() {
            if s.seen >= 2 && (s.next == pi || (s.window > 0 && through(s))) {
                return self.follow(i, p, pi);
            }
            if candidate.is_none()
                && s.seen == 1
                && s.next != pi
                && (pi - s.next).abs() <= MAX_STRIDE
            {
                candidate = Some(i);
            }
        }
        self.begin(p, pi, candidate, resident)
    }

    /// Demand fault `p` (`pi`) met confirmed stream `i`: grow its window.
    fn follow(&mut self, i: usize, p: u64, pi: i64) -> Plan {
        let s = self.streams[i];
        // The previous window: the pages before `next`, the demand page excluded.
        let used = (s.window > 1).then(|| {
            (
                s.next - s.stride * (s.window as i64 - 1),
                s.stride,
                s.window - 1,
            )
        });
        let want = if s.window == 0 {
            if s.seen >= 2 {
                FIRST_WINDOW
            } else {
                1
            }
        } else {
            (s.window * 2).min(self.maxw)
        };
        // A stream that has come back to its expected page twice is its
        // own evidence: the region's record only caps its growth. A
        // stream being confirmed is judged by the region.
        let (pages, probe) = if want <= 1 {
            (1, false)
        } else if s.seen >= PROVEN {
            (want.min(self.cap(p)), false)
        } else {
            self.allowed(p, want)
        };
        let pages = pages.max(1);
        self.streams[i] = Stream {
            next: pi + s.stride * pages as i64,
            stride: s.stride,
            // A stream refused a window stays confirmed, at the smallest one.
            window: pages,
            seen: s.seen.saturating_add(1),
        };
        Plan {
            stride: s.stride,
            pages,
            why: if probe { Why::Probe } else { Why::Stream },
            stream: Some(i),
            used,
            pipeline: s.stride == 1 && pages > 1 && s.seen >= PROVEN,
        }
    }

    /// Demand fault `p` (`pi`) followed no confirmed stream: confirm a
    /// candidate, start one from resident pages behind it, or note it as a
    /// candidate.
    /// `candidate`: the first stream that has seen one fault, close enough
    /// to `pi` to give a stride (found by `plan`'s pass).
    fn begin(
        &mut self,
        p: u64,
        pi: i64,
        candidate: Option<usize>,
        resident: impl Fn(u64) -> bool,
    ) -> Plan {
        if let Some(i) = candidate {
            let stride = pi - self.streams[i].next;
            // Where this region's prefetches have been used, two faults
            // are proof enough: its record proves the pattern.
            if self.region_proven(p) {
                return self.start(i, pi, stride, FIRST_WINDOW.min(self.maxw), Why::Stream);
            }
            self.streams[i] = Stream {
                next: pi + stride,
                stride,
                window: 0,
                seen: 2,
            };
            return Plan {
                stream: Some(i),
                ..Plan::demand()
            };
        }
        let i = self.victim % NSTREAMS;
        self.victim = self.victim.wrapping_add(1);
        // The program ran through resident pages into this one: perhaps a
        // forward stream already under way (the pages before it were kept, so
        // they raised no fault to follow). A random fault among resident
        // pages looks the same, so it is a candidate with its stride, to be
        // confirmed by the next fault like any other; where the region's
        // prefetches have been used, its record is the proof, and the
        // stream starts here (stencil7 at 4x: 19% fewer faults, BFS's waste
        // unchanged).
        if p >= RUN_BEHIND as u64 && (1..=RUN_BEHIND as u64).all(|k| resident(p - k)) {
            if self.region_proven(p) {
                return self.start(i, pi, 1, FIRST_WINDOW.min(self.maxw), Why::Stream);
            }
            self.streams[i] = Stream {
                next: pi + 1,
                stride: 1,
                window: 0,
                seen: 2,
            };
            return Plan {
                stream: Some(i),
                ..Plan::demand()
            };
        }
        // `next` of a one-fault candidate is the fault itself.
        self.streams[i] = Stream {
            next: pi,
            stride: 0,
            window: 0,
            seen: 1,
        };
        Plan::demand()
    }

    /// Whether the region of `p` has shown that its prefetches are used
    /// (enough outcomes, 15/16 of them used).
    fn region_proven(&self, p: u64) -> bool {
        let s = self.regions[region(p)];
        let n = s.used + s.wasted;
        n >= MIN_EVIDENCE && s.used * 16 / n >= 15
    }

    /// Start confirmed stream `i` at fault `pi` with a window of `pages`.
    fn start(&mut self, i: usize, pi: i64, stride: i64, pages: usize, why: Why) -> Plan {
        self.streams[i] = Stream {
            next: pi + stride * pages as i64,
            stride,
            window: pages,
            seen: 3,
        };
        Plan {
            stride,
            pages,
            why,
            stream: Some(i),
            used: None,
            // Pipelined windows are the dearest guess (wasted whole when the
            // stream stops short): only for streams that proved themselves.
            pipeline: false,
        }
    }

    /// Stream `i` now expects its next fault at `next` with window `window`
    /// (the caller fetched fewer pages than planned, or requested the
    /// following window ahead).
    pub fn moved(&mut self, i: usize, next: i64, window: usize) {
        let s = &mut self.streams[i];
        if s.seen >= 2 {
            s.next = next;
            s.window = window;
        }
    }

    /// The forward stream expecting a fault at `q`, if any (the first page
    /// of a pipelined window in flight), with its window.
    pub fn stream_at(&self, q: i64) -> Option<(usize, usize)> {
        self.streams
            .iter()
            .position(|s| s.seen >= 2 && s.stride == 1 && s.window > 0 && s.next == q)
            .map(|i| (i, self.streams[i].window))
    }

    /// How many pages the region of `p` allows a pipelined window.
    pub fn pipeline_window(&mut self, p: u64, want: usize) -> usize {
        self.allowed(p, want).0
    }

    /// A prefetched page at `p` was used.
    pub fn on_used(&mut self, p: u64) {
        let s = &mut self.regions[region(p)];
        s.used += 1;
        decay(s);
    }

    /// A prefetched page at `p` was evicted without being seen used.
    pub fn on_wasted(&mut self, p: u64) {
        let s = &mut self.regions[region(p)];
        s.wasted += 1;
        decay(s);
    }
}

fn decay(s: &mut Score) {
    if s.used + s.wasted >= DECAY_AT {
        s.used /= 2;
        s.wasted /= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_followed_after_three_faults_and_its_window_doubles() {
        let mut pl = Planner::new(64);
        let none = |_| false;
        assert_eq!(pl.plan(1000, Hint::None, none).pages, 1);
        assert_eq!(pl.plan(1001, Hint::None, none).pages, 1);
        let p = pl.plan(1002, Hint::None, none);
        assert_eq!((p.pages, p.stride), (FIRST_WINDOW, 1));
        let p = pl.plan(1006, Hint::None, none);
        assert_eq!(p.pages, 8);
        assert_eq!(p.used, Some((1003, 1, 3)));
        let p = pl.plan(1014, Hint::None, none);
        assert_eq!(p.pages, 16);
    }

    #[test]
    fn strided_and_backward_streams_are_found() {
        let mut pl = Planner::new(64);
        for (k, p) in [5000u64, 4997, 4994].iter().enumerate() {
            let plan = pl.plan(*p, Hint::None, |_| false);
            assert_eq!(plan.pages, if k == 2 { FIRST_WINDOW } else { 1 });
            assert_eq!(plan.stride, if k == 2 { -3 } else { plan.stride });
        }
    }

    #[test]
    fn random_faults_get_demand_pages() {
        let mut pl = Planner::new(64);
        let mut x = 88172645463325252u64;
        let mut prefetched = 0;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            prefetched += pl.plan(x % 1_000_000, Hint::None, |_| false).pages - 1;
        }
        assert!(
            prefetched < 100,
            "{prefetched} pages prefetched for random faults"
        );
    }

    /// Faults of a forward scan from `p`, each at the page after the last
    /// window: the windows planned.
    fn scan(pl: &mut Planner, mut p: u64, faults: usize) -> Vec<usize> {
        (0..faults)
            .map(|_| {
                let w = pl.plan(p, Hint::None, |_| false).pages;
                p += w as u64;
                w
            })
            .collect()
    }

    #[test]
    fn a_wasteful_region_gets_demand_pages_and_probes() {
        let mut pl = Planner::new(64);
        for _ in 0..64 {
            pl.on_wasted(10);
        }
        // Short streams (three faults each) are confirmed at demand pages,
        // but for the odd probe.
        let windows: Vec<usize> = (0..3 * PROBE_EVERY as u64)
            .map(|k| *scan(&mut pl, 8 * k, 3).last().unwrap())
            .collect();
        let probes = windows.iter().filter(|&&w| w > 1).count();
        assert!((2..=3).contains(&probes), "{windows:?}");
        assert!(windows.iter().all(|&w| w <= PROBE_WINDOW), "{windows:?}");
        // A long stream proves itself, and grows to a small window there.
        let long = scan(&mut pl, 400, 12);
        assert_eq!(*long.iter().max().unwrap(), 2 * FIRST_WINDOW, "{long:?}");
        // Another region is untouched.
        assert_eq!(
            scan(&mut pl, 1 << 20, 4),
            [1, 1, FIRST_WINDOW, 2 * FIRST_WINDOW]
        );
    }

    #[test]
    fn a_region_whose_prefetches_are_used_keeps_full_windows() {
        let mut pl = Planner::new(64);
        for _ in 0..200 {
            pl.on_used(10);
        }
        pl.on_wasted(10);
        // Its record proves a stream at the second fault.
        assert_eq!(scan(&mut pl, 100, 7), [1, 4, 8, 16, 32, 64, 64]);
    }

    #[test]
    fn a_stream_goes_on_through_resident_pages() {
        let mut pl = Planner::new(64);
        scan(&mut pl, 100, 3);
        // The window 102..=105 was read, then 106..=109 were found resident.
        let p = pl.plan(110, Hint::None, |q| (106..110).contains(&q));
        assert_eq!(p.used, Some((103, 1, 3)));
        assert_eq!(p.pages, 2 * FIRST_WINDOW);
    }

    #[test]
    fn faults_after_resident_pages_are_a_candidate() {
        let mut pl = Planner::new(64);
        assert_eq!(pl.plan(500, Hint::None, |_| true).pages, 1);
        assert_eq!(pl.plan(501, Hint::None, |_| true).pages, FIRST_WINDOW);
    }

    #[test]
    fn in_a_proven_region_a_run_through_resident_pages_starts_at_once() {
        let mut pl = Planner::new(64);
        for _ in 0..200 {
            pl.on_used(500);
        }
        let p = pl.plan(500, Hint::None, |_| true);
        assert_eq!((p.pages, p.stride), (FIRST_WINDOW, 1));
        // In a region without a record it is still only a candidate.
        assert_eq!(pl.plan(1 << 20, Hint::None, |_| true).pages, 1);
    }

    #[test]
    fn advice_decides_alone() {
        let mut pl = Planner::new(32);
        assert_eq!(pl.plan(7, Hint::Sequential, |_| false).pages, 32);
        assert_eq!(pl.plan(7, Hint::Random, |_| true).pages, 1);
        assert_eq!(Planner::new(1).plan(7, Hint::None, |_| true).pages, 1);
    }
}
