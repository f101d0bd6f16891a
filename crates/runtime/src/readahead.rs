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
//! - **A stride need not be a whole number of pages.** A sweep along the
//!   outer dimension of an array whose plane is not a multiple of 4 KiB
//!   (NPB SP's `u[k][j][i]` with 65 x 65 doubles a plane: 8.25 pages) faults
//!   on pages 8, 8, 8 and 9 apart, which no page stride follows. The fault's
//!   place within its page ([`CELL`]-byte cells) gives the stride exactly:
//!   a candidate whose step is not a whole number of pages (nor under
//!   1 1/8 pages, which a sequential stream serves) is confirmed by a third
//!   fault at the expected cell (one a page stride on makes it a page
//!   stream, as a read of records whose faults wander within pages does), and its windows take the page of each element's position
//!   (fixed point, the step refined from the stream's first fault on).
//!   Such streams may step up to [`MAX_STEP`] pages: a third fault at
//!   random lands within the tolerance (four cells) with odds of about one
//!   in 28 x the arena's pages.
//! - **Windows are sized by what they earned** (Linux readahead's hit
//!   feedback, kept per 2 MiB region). Each prefetched page ends used (the
//!   stream ran through it, or the program wrote it) or wasted (evicted
//!   unused); a region's score counts both, halving as it grows so that it
//!   follows phase changes. A region whose prefetches are mostly wasted gets
//!   demand pages only, except a small probe window on one planned window
//!   in [`PROBE_EVERY`], so that a region that turns sequential is seen.
//! - **A stream caught by eviction holds less ahead of it** (Linux
//!   readahead's thrashing case). Many interleaved streams at a small
//!   budget (NPB SP: about 20, two threads over many arrays) fetch windows
//!   faster than probation keeps them, and eviction takes a window before
//!   its stream gets there. The fault that follows lands inside the
//!   windows the stream fetched ahead, or where it expected it on a page
//!   evicted unused (`page::WASTED`). Without this rule that fault lost the
//!   stream (it was not where the stream expected it), which then had to
//!   be confirmed again from one page. Now the stream goes on from the
//!   fault and is *caught*: it stops fetching a window ahead (a window
//!   ahead hides latency, not a fault, and holds a second window a
//!   stream), and, caught again,
//!   takes half the pages a window, down to [`FIRST_WINDOW`]. After
//!   `CALM_TO_GROW` windows in a row its limit doubles, and past the
//!   largest window it fetches ahead again.
//!
//! Sequential streams keep their full windows: their pages are used, so their
//! regions score well. `SEQUENTIAL` and `WILLNEED` advice skip both rules;
//! `RANDOM` advice turns prefetch off.

use crate::trace::Why;

pub const NSTREAMS: usize = 64;
pub const MAX_STRIDE: i64 = 64;
/// The largest step, in pages, of a stream whose step is not a whole number
/// of pages (NPB SP class B's `u`: 103.6 pages a plane).
pub const MAX_STEP: i64 = 256;
/// A fault's place within its page is known to a cell of this many bytes
/// (a page has 256: one byte in a trace record).
pub const CELL: usize = 16;
/// Cells a page.
pub const CELLS: i64 = (farmem_sys::PAGE_SIZE / CELL) as i64;
/// Fixed-point bits below a cell in a stream's positions.
const FRAC: u32 = 12;
/// A position's page: its top bits above a cell's and the fraction's.
const POS_PAGE: u32 = CELLS.trailing_zeros() + FRAC;
/// Exact faults after which a stream is its own evidence.
const PROVEN: u32 = 4;
/// A stream may go on through this many resident pages (strides) past its
/// expected fault and still be the same stream.
pub const MAX_GAP: i64 = 16;
/// Windows a caught stream keeps up with before its limit doubles (or it
/// fetches ahead again). In the simulator's 24 interleaved streams, with
/// a first form of the rule that halved at once, 16 regrew limits so soon
/// that they were caught again (1.17x MIN); 64 gave 1.07x.
const CALM_TO_GROW: u32 = 64;
/// Whether a page evicted unused `gone` evictions ago, under a budget of
/// `budget` pages, is back soon enough to say its stream was caught by
/// eviction (see the module comment). One back later was left over where
/// an earlier sweep stopped (its last window ahead), and says nothing of
/// the stream now: taken for a catch, it cost NPB SP class B at a quarter
/// 14% more faults (docs/benchmarks.md).
pub fn wasted_lately(gone: u32, budget: usize) -> bool {
    farmem_sys::usize_from(u64::from(gone)) <= budget / 2
}

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
///
/// A stream whose step is not a whole number of pages (`step` != 0, `stride`
/// 0) follows positions instead: `at` is where its next element is expected
/// (fixed point, [`Walk`]), `origin` where its first fault was and `index`
/// how many steps its last fault was from there (the step is refined as
/// `(last - origin) / index`), `last` that fault's position and `ahead` how
/// many steps `at` lies past it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stream {
    pub next: i64,
    pub stride: i64,
    pub window: usize,
    pub seen: u32,
    pub step: i64,
    pub at: i64,
    origin: i64,
    index: i64,
    last: i64,
    ahead: i64,
    /// Eviction took this page stream's windows before it got there
    /// (see [`Stream::caught`]): `solo`, it fetches no window ahead; with
    /// a `limit` too (0: none), its windows take at most that many pages.
    solo: bool,
    limit: usize,
    /// Windows the stream has kept up with since it was last caught, or
    /// its limit last raised.
    calm: u32,
}

impl Stream {
    /// A page stream's last window: the pages before `next`, the demand
    /// page that opened it excluded.
    fn last_window(&self) -> Option<(Walk, usize)> {
        (self.window > 1).then(|| {
            (
                Walk::pages(
                    self.next - self.stride * (self.window as i64 - 1),
                    self.stride,
                ),
                self.window - 1,
            )
        })
    }

    /// The stream faulted where eviction had taken the windows it fetched
    /// ahead: its `(solo, limit)` from now. First it stops fetching a
    /// window ahead (which holds a second window in memory and saves no
    /// fault); if caught again, its windows take half the pages, down to
    /// [`FIRST_WINDOW`].
    fn caught(&self) -> (bool, usize) {
        if self.solo {
            (true, (self.window / 2).max(FIRST_WINDOW))
        } else {
            (true, 0)
        }
    }

    /// The stream reached its next window: `(solo, limit, calm)` from now.
    /// After [`CALM_TO_GROW`] windows in a row its limit doubles, and past
    /// the largest window it fetches ahead again.
    fn kept_up(&self, maxw: usize) -> (bool, usize, u32) {
        if !self.solo {
            return (false, 0, 0);
        }
        if self.calm + 1 < CALM_TO_GROW {
            return (true, self.limit, self.calm + 1);
        }
        match self.limit {
            0 => (false, 0, 0),
            l if l * 2 >= maxw => (true, 0, 0),
            l => (true, l * 2, 0),
        }
    }
}

/// The pages of a window, or of the previous window of a stream: element
/// `k` lies on page `page(k)`. Positions are fixed point, a page being
/// `1 << POS_PAGE`: a page stride is a whole number of pages, and a step
/// that is not keeps its fraction, so that element 8 of a stream of 8.25
/// pages lands on page 66, not 64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Walk {
    start: i64,
    step: i64,
}

impl Walk {
    /// Pages `first`, `first + stride`, ...
    pub fn pages(first: i64, stride: i64) -> Walk {
        Walk {
            start: first << POS_PAGE,
            step: stride << POS_PAGE,
        }
    }

    /// The page of element `k` (floored: positions before page 0 are
    /// negative).
    pub fn page(&self, k: i64) -> i64 {
        (self.start + self.step * k) >> POS_PAGE
    }

    /// Whether the walk goes down through memory.
    pub fn backward(&self) -> bool {
        self.step < 0
    }
}

/// The fixed-point position of cell `cell` of page `p`: its middle, the
/// fault being somewhere in it.
pub fn position(p: i64, cell: u8) -> i64 {
    (p << POS_PAGE) + (i64::from(cell) << FRAC) + (1 << (FRAC - 1))
}

/// A fault's plan: fetch `pages` pages (the demand page included) along
/// `walk` (`stride`: its page stride, 0 for a step that is not a whole
/// number of pages), for reason `why`; `used` is the previous window the
/// program has now gone past, as (its walk, pages): the caller counts those
/// still marked prefetched as used. `pipeline`: a confirmed forward stream,
/// whose next window may be requested ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub stride: i64,
    pub walk: Walk,
    pub pages: usize,
    pub why: Why,
    pub stream: Option<usize>,
    pub used: Option<(Walk, usize)>,
    /// A proven forward stream: its next window may be requested ahead.
    pub pipeline: bool,
    /// The fault caught its stream where eviction had taken the windows
    /// fetched ahead of it (see `Stream::caught`).
    pub caught: bool,
}

impl Plan {
    fn demand(p: i64) -> Plan {
        Plan {
            stride: 1,
            walk: Walk::pages(p, 1),
            pages: 1,
            why: Why::Stream,
            stream: None,
            used: None,
            pipeline: false,
            caught: false,
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

    /// Plan the fetch for a demand fault at cell `cell` of page `p` (see
    /// [`CELL`]). `refetch`: `p` was fetched ahead and evicted unused not
    /// long ago (`page::WASTED`; see the module comment). `resident(q)`:
    /// whether page `q` is resident (for streams that went through resident
    /// pages).
    pub fn plan(
        &mut self,
        p: u64,
        cell: u8,
        hint: Hint,
        refetch: bool,
        resident: impl Fn(u64) -> bool,
    ) -> Plan {
        // Pages past 2^40 (what a trace record holds) cannot be placed.
        let Some(pi) = i64::try_from(p).ok().filter(|&q| q < 1 << 40) else {
            return Plan::demand(i64::MAX);
        };
        if self.maxw <= 1 || hint == Hint::Random {
            return Plan::demand(pi);
        }
        if hint == Hint::Sequential {
            return Plan {
                stride: 1,
                walk: Walk::pages(pi, 1),
                pages: self.maxw,
                why: Why::Advice,
                stream: None,
                used: None,
                pipeline: false,
                caught: false,
            };
        }
        let x = position(pi, cell);
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
        // BFS's graph build at a quarter; docs/benchmarks.md). A candidate
        // further than a page stride may go (`far`) serves only a step that
        // is not a whole number of pages.
        let mut candidate = None;
        let mut far = None;
        let mut behind = None;
        // A fault inside the windows a confirmed page stream fetched ahead
        // of it (its current one and one pipelined): eviction took them
        // before the stream got there.
        let inside = |s: &Stream| {
            let back = s.next - pi;
            s.stride != 0
                && back.signum() == s.stride.signum()
                && back % s.stride == 0
                && back / s.stride <= 2 * s.window as i64
        };
        for (i, s) in self.streams.iter().enumerate() {
            if s.seen >= 2 {
                if s.step != 0 {
                    if let Some(m) = steps_to(s, x, &resident) {
                        return self.follow_steps(i, p, x, m);
                    }
                    // A candidate at a fractional step whose third fault
                    // lands one page stride on: a page stream after all.
                    if s.window == 0 && s.next == pi {
                        return self.follow(i, p, pi);
                    }
                } else if s.next == pi || (s.window > 0 && through(s)) {
                    if refetch && s.window > 0 {
                        return self.catch_up(i, p, pi);
                    }
                    return self.follow(i, p, pi);
                } else if refetch && s.window > 0 && behind.is_none() && inside(s) {
                    behind = Some(i);
                }
                continue;
            }
            if s.seen == 1 && s.next != pi {
                let d = (pi - s.next).abs();
                if d <= MAX_STRIDE {
                    candidate = candidate.or(Some(i));
                } else if d <= MAX_STEP {
                    far = far.or(Some(i));
                }
            }
        }
        if let Some(i) = behind {
            return self.catch_up(i, p, pi);
        }
        self.begin(p, pi, x, candidate.or(far), resident)
    }

    /// Demand fault `p` (`pi`) caught page stream `i` (see
    /// [`Stream::caught`]): continue the stream from here, holding less
    /// ahead of it.
    fn catch_up(&mut self, i: usize, p: u64, pi: i64) -> Plan {
        let s = self.streams[i];
        let (solo, limit) = s.caught();
        let want = if limit > 0 { limit } else { s.window };
        let pages = want.min(self.cap(p)).max(1);
        // Met where it was expected (or past it): the window before is used.
        let used = ((pi - s.next) * s.stride.signum() >= 0)
            .then(|| s.last_window())
            .flatten();
        self.streams[i] = Stream {
            next: pi + s.stride * pages as i64,
            stride: s.stride,
            window: pages,
            seen: s.seen,
            solo,
            limit,
            calm: 0,
            ..Stream::default()
        };
        Plan {
            stride: s.stride,
            walk: Walk::pages(pi, s.stride),
            pages,
            why: Why::Stream,
            stream: Some(i),
            used,
            pipeline: false,
            caught: true,
        }
    }

    /// The window a stream may take now, and whether it is a probe: twice
    /// its last (the first once confirmed), as the region's record allows.
    fn grow(&mut self, s: &Stream, p: u64) -> (usize, bool) {
        let want = if s.window == 0 {
            FIRST_WINDOW
        } else {
            (s.window * 2).min(self.maxw)
        };
        let want = if s.limit > 0 { want.min(s.limit) } else { want };
        // A stream that has come back to its expected page twice is its
        // own evidence: the region's record only caps its growth. A
        // stream being confirmed is judged by the region.
        let (pages, probe) = if s.seen >= PROVEN {
            (want.min(self.cap(p)), false)
        } else {
            self.allowed(p, want)
        };
        (pages.max(1), probe)
    }

    /// Demand fault `p` (`pi`) met page stream `i`: grow its window.
    fn follow(&mut self, i: usize, p: u64, pi: i64) -> Plan {
        let s = self.streams[i];
        // The previous window: the pages before `next`, the demand page excluded.
        let used = s.last_window();
        let (pages, probe) = self.grow(&s, p);
        let (solo, limit, calm) = s.kept_up(self.maxw);
        self.streams[i] = Stream {
            next: pi + s.stride * pages as i64,
            stride: s.stride,
            // A stream refused a window stays confirmed, at the smallest one.
            window: pages,
            seen: s.seen.saturating_add(1),
            solo,
            limit,
            calm,
            ..Stream::default()
        };
        Plan {
            stride: s.stride,
            walk: Walk::pages(pi, s.stride),
            pages,
            why: if probe { Why::Probe } else { Why::Stream },
            stream: Some(i),
            used,
            pipeline: s.stride == 1 && pages > 1 && s.seen >= PROVEN && !solo,
            caught: false,
        }
    }

    /// Demand fault `p` at position `x` met stream `i` of a fractional step,
    /// `m` steps past the element it expected: refine the step and grow its
    /// window.
    fn follow_steps(&mut self, i: usize, p: u64, x: i64, m: i64) -> Plan {
        let s = self.streams[i];
        let used = (s.window > 1).then(|| {
            (
                Walk {
                    start: s.at - s.step * (s.window as i64 - 1),
                    step: s.step,
                },
                s.window - 1,
            )
        });
        // From the first fault on, the step is known to a cell over
        // `index` steps.
        let index = s.index + s.ahead + m;
        let step = (x - s.origin) / index;
        let (pages, probe) = self.grow(&s, p);
        let at = x + step * pages as i64;
        self.streams[i] = Stream {
            next: at >> POS_PAGE,
            stride: 0,
            window: pages,
            seen: s.seen.saturating_add(1),
            step,
            at,
            origin: s.origin,
            index,
            last: x,
            ahead: pages as i64,
            ..Stream::default()
        };
        Plan {
            stride: 0,
            walk: Walk { start: x, step },
            pages,
            why: if probe { Why::Probe } else { Why::Stream },
            stream: Some(i),
            used,
            pipeline: false,
            caught: false,
        }
    }

    /// Demand fault `p` (`pi`, position `x`) followed no confirmed stream:
    /// confirm a candidate, start one from resident pages behind it, or note
    /// it as a candidate.
    /// `candidate`: the first stream that has seen one fault, close enough
    /// to `pi` to give a stride (found by `plan`'s pass).
    fn begin(
        &mut self,
        p: u64,
        pi: i64,
        x: i64,
        candidate: Option<usize>,
        resident: impl Fn(u64) -> bool,
    ) -> Plan {
        if let Some(i) = candidate {
            let c = self.streams[i];
            let stride = pi - c.next;
            let step = x - c.at;
            if fractional(step) {
                if self.region_proven(p) {
                    return self.start_steps(i, x, c.at, step, FIRST_WINDOW.min(self.maxw));
                }
                // Confirmed by a third fault one step on; one a page stride
                // on (where a page stride may go) makes a page stream.
                self.streams[i] = Stream {
                    next: if stride.abs() <= MAX_STRIDE {
                        pi + stride
                    } else {
                        i64::MIN
                    },
                    stride,
                    window: 0,
                    seen: 2,
                    step,
                    at: x + step,
                    origin: c.at,
                    index: 1,
                    last: x,
                    ahead: 1,
                    ..Stream::default()
                };
                return Plan {
                    stream: Some(i),
                    ..Plan::demand(pi)
                };
            }
            if stride.abs() <= MAX_STRIDE {
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
                    ..Stream::default()
                };
                return Plan {
                    stream: Some(i),
                    ..Plan::demand(pi)
                };
            }
            // Further than a page stride, at a whole number of pages: no
            // stream; this fault is a candidate of its own.
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
                ..Stream::default()
            };
            return Plan {
                stream: Some(i),
                ..Plan::demand(pi)
            };
        }
        // `next` of a one-fault candidate is the fault itself, `at` its
        // position.
        self.streams[i] = Stream {
            next: pi,
            stride: 0,
            window: 0,
            seen: 1,
            at: x,
            ..Stream::default()
        };
        Plan::demand(pi)
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
            ..Stream::default()
        };
        Plan {
            stride,
            walk: Walk::pages(pi, stride),
            pages,
            why,
            stream: Some(i),
            used: None,
            // Pipelined windows are the dearest guess (wasted whole when the
            // stream stops short): only for streams that proved themselves.
            pipeline: false,
            caught: false,
        }
    }

    /// Start confirmed stream `i` of step `step` at the fault at `x`, one
    /// step after its first at `origin`, with a window of `pages`.
    fn start_steps(&mut self, i: usize, x: i64, origin: i64, step: i64, pages: usize) -> Plan {
        let at = x + step * pages as i64;
        self.streams[i] = Stream {
            next: at >> POS_PAGE,
            stride: 0,
            window: pages,
            seen: 3,
            step,
            at,
            origin,
            index: 1,
            last: x,
            ahead: pages as i64,
            ..Stream::default()
        };
        Plan {
            stride: 0,
            walk: Walk { start: x, step },
            pages,
            why: Why::Stream,
            stream: Some(i),
            used: None,
            pipeline: false,
            caught: false,
        }
    }

    /// Stream `i` now expects its next fault at `next` with window `window`
    /// (a forward stream whose following window was requested ahead).
    pub fn moved(&mut self, i: usize, next: i64, window: usize) {
        let s = &mut self.streams[i];
        if s.seen >= 2 && s.step == 0 {
            s.next = next;
            s.window = window;
        }
    }

    /// `want` pages for stream `i`'s next window requested ahead, or none
    /// where eviction took its windows before (see the module comment).
    pub fn limited(&self, i: usize, want: usize) -> usize {
        if self.streams[i].solo {
            0
        } else {
            want
        }
    }

    /// The window planned along `walk` for stream `i` ended after `span`
    /// elements (a page in another state stopped it): the stream's next
    /// fault comes sooner.
    pub fn window_ended(&mut self, i: usize, walk: Walk, span: usize) {
        let s = &mut self.streams[i];
        if s.seen < 2 {
            return;
        }
        if s.step != 0 {
            s.at = walk.start + walk.step * span as i64;
            s.ahead = span as i64;
        }
        s.next = walk.page(span as i64);
        s.window = span;
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

/// Whether a step (fixed point, between two faults' cells) is not a whole
/// number of pages, and at least an eighth of a page longer than one page:
/// a shorter one touches nearly every page, which a sequential stream
/// fetches with at most an eighth wasted, and pipelines.
fn fractional(step: i64) -> bool {
    let page = 1 << POS_PAGE;
    let len = step.abs();
    len >= page + page / 8 && len <= MAX_STEP * page && step.rem_euclid(page) != 0
}

/// How many steps past the element stream `s` (of a fractional step)
/// expects the fault at `x` lies, if it is the stream's: at that element or,
/// for a confirmed stream, up to [`MAX_GAP`] steps on with every element
/// between on a resident page.
///
/// Positions are known to a cell, so the step from the first fault to the
/// last, over `index` steps, is known to a cell over `index`: the expected
/// element is off by up to one cell and one more for each `index` steps
/// ahead of the last fault, and the fault itself by one.
fn steps_to(s: &Stream, x: i64, resident: impl Fn(u64) -> bool) -> Option<i64> {
    let (off, step) = if s.step < 0 {
        (s.at - x, -s.step)
    } else {
        (x - s.at, s.step)
    };
    let m = (off + step / 2).div_euclid(step);
    if !(0..=MAX_GAP).contains(&m) || (m > 0 && s.window == 0) {
        return None;
    }
    let cell = 1 << FRAC;
    let tol = (2 * cell + 2 * cell * (s.ahead + m) / s.index.max(1)).min(step / 4);
    if (off - m * step).abs() > tol {
        return None;
    }
    (0..m)
        .all(|j| u64::try_from((s.at + s.step * j) >> POS_PAGE).is_ok_and(&resident))
        .then_some(m)
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
        assert_eq!(pl.plan(1000, 0, Hint::None, false, none).pages, 1);
        assert_eq!(pl.plan(1001, 0, Hint::None, false, none).pages, 1);
        let p = pl.plan(1002, 0, Hint::None, false, none);
        assert_eq!((p.pages, p.stride), (FIRST_WINDOW, 1));
        let p = pl.plan(1006, 0, Hint::None, false, none);
        assert_eq!(p.pages, 8);
        assert_eq!(p.used, Some((Walk::pages(1003, 1), 3)));
        let p = pl.plan(1014, 0, Hint::None, false, none);
        assert_eq!(p.pages, 16);
    }

    /// A proven stream grown to 64 pages at `base`: returns where it
    /// expects its next fault.
    fn grown(pl: &mut Planner, base: u64) -> u64 {
        let none = |_| false;
        let mut at = base;
        for _ in 0..3 {
            pl.plan(at, 0, Hint::None, false, none);
            at += 1;
        }
        at += FIRST_WINDOW as u64 - 1;
        for w in [8, 16, 32, 64, 64] {
            assert_eq!(pl.plan(at, 0, Hint::None, false, none).pages, w);
            at += w as u64;
        }
        at
    }

    #[test]
    fn a_stream_caught_by_eviction_stops_fetching_ahead_then_takes_half() {
        let mut pl = Planner::new(64);
        let next = grown(&mut pl, 1000);
        // A fault inside the windows on a page that was not evicted unused
        // (a window passed over it resident; main let it go since) says
        // nothing of the stream.
        let p = pl.plan(next - 30, 0, Hint::None, false, |_| false);
        assert!(!p.caught && p.stream != Some(0));
        // Eviction took a page of the windows the stream fetched ahead
        // before it got there: it goes on from that page, without a window
        // ahead.
        let p = pl.plan(next - 20, 0, Hint::None, true, |_| false);
        assert_eq!(
            (p.pages, p.stride, p.pipeline, p.used),
            (64, 1, false, None)
        );
        assert!(p.caught);
        let i = p.stream.unwrap();
        assert_eq!(pl.limited(i, 64), 0);
        let p = pl.plan(next + 44, 0, Hint::None, false, |_| false);
        assert_eq!((p.pages, p.pipeline, p.caught), (64, false, false));
        // Caught again: half the window each time, down to the first one.
        let p = pl.plan(next + 100, 0, Hint::None, true, |_| false);
        assert_eq!(p.pages, 32);
        for want in [16, 8, FIRST_WINDOW, FIRST_WINDOW] {
            let at = pl.streams[i].next - 1;
            let p = pl.plan(at.cast_unsigned(), 0, Hint::None, true, |_| false);
            assert_eq!(p.pages, want);
        }
    }

    #[test]
    fn a_refetched_page_where_the_stream_expects_it_counts_as_caught() {
        let mut pl = Planner::new(64);
        let next = grown(&mut pl, 1000);
        assert!(pl.plan(next, 0, Hint::None, false, |_| false).pipeline);
        let mut pl = Planner::new(64);
        let next = grown(&mut pl, 1000);
        // The page was fetched ahead (a pipelined window's first) and
        // evicted unused.
        let p = pl.plan(next, 0, Hint::None, true, |_| false);
        assert_eq!((p.pages, p.pipeline), (64, false));
        let n = next.cast_signed();
        assert_eq!(p.used, Some((Walk::pages(n - 63, 1), 63)));
    }

    #[test]
    fn a_stream_that_keeps_up_earns_back_its_window_then_its_window_ahead() {
        let mut pl = Planner::new(64);
        let mut at = grown(&mut pl, 1000);
        assert_eq!(pl.plan(at, 0, Hint::None, true, |_| false).pages, 64);
        at += 64;
        assert_eq!(pl.plan(at, 0, Hint::None, true, |_| false).pages, 32);
        at += 32;
        for _ in 0..CALM_TO_GROW {
            let p = pl.plan(at, 0, Hint::None, false, |_| false);
            assert_eq!((p.pages, p.pipeline), (32, false));
            at += 32;
        }
        for _ in 0..CALM_TO_GROW - 1 {
            let p = pl.plan(at, 0, Hint::None, false, |_| false);
            assert_eq!((p.pages, p.pipeline), (64, false));
            at += 64;
        }
        let p = pl.plan(at, 0, Hint::None, false, |_| false);
        assert_eq!((p.pages, p.pipeline), (64, true));
    }

    #[test]
    fn a_refetched_page_of_no_stream_is_a_demand_fault() {
        let mut pl = Planner::new(64);
        grown(&mut pl, 1000);
        for q in xorshift(200) {
            let q = 1 << 30 | (q % (1 << 20));
            assert_eq!(pl.plan(q, 0, Hint::None, true, |_| false).pages, 1);
        }
    }

    #[test]
    fn strided_and_backward_streams_are_found() {
        let mut pl = Planner::new(64);
        for (k, p) in [5000u64, 4997, 4994].iter().enumerate() {
            let plan = pl.plan(*p, 0, Hint::None, false, |_| false);
            assert_eq!(plan.pages, if k == 2 { FIRST_WINDOW } else { 1 });
            assert_eq!(plan.stride, if k == 2 { -3 } else { plan.stride });
        }
    }

    /// `n` pseudo-random numbers (xorshift64), the same on every run.
    fn xorshift(n: usize) -> impl Iterator<Item = u64> {
        let mut x = 88172645463325252u64;
        (0..n).map(move |_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        })
    }

    #[test]
    fn random_faults_get_demand_pages() {
        let mut pl = Planner::new(64);
        let mut prefetched = 0;
        for x in xorshift(100_000) {
            prefetched += pl
                .plan(x % 1_000_000, 0, Hint::None, false, |_| false)
                .pages
                - 1;
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
                let w = pl.plan(p, 0, Hint::None, false, |_| false).pages;
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
        let p = pl.plan(110, 0, Hint::None, false, |q| (106..110).contains(&q));
        assert_eq!(p.used, Some((Walk::pages(103, 1), 3)));
        assert_eq!(p.pages, 2 * FIRST_WINDOW);
    }

    #[test]
    fn faults_after_resident_pages_are_a_candidate() {
        let mut pl = Planner::new(64);
        assert_eq!(pl.plan(500, 0, Hint::None, false, |_| true).pages, 1);
        assert_eq!(
            pl.plan(501, 0, Hint::None, false, |_| true).pages,
            FIRST_WINDOW
        );
    }

    #[test]
    fn in_a_proven_region_a_run_through_resident_pages_starts_at_once() {
        let mut pl = Planner::new(64);
        for _ in 0..200 {
            pl.on_used(500);
        }
        let p = pl.plan(500, 0, Hint::None, false, |_| true);
        assert_eq!((p.pages, p.stride), (FIRST_WINDOW, 1));
        // In a region without a record it is still only a candidate.
        assert_eq!(pl.plan(1 << 20, 0, Hint::None, false, |_| true).pages, 1);
    }

    #[test]
    fn advice_decides_alone() {
        let mut pl = Planner::new(32);
        assert_eq!(pl.plan(7, 0, Hint::Sequential, false, |_| false).pages, 32);
        assert_eq!(pl.plan(7, 0, Hint::Random, false, |_| true).pages, 1);
        assert_eq!(
            Planner::new(1)
                .plan(7, 0, Hint::None, false, |_| true)
                .pages,
            1
        );
    }

    /// The page and cell of byte address `a`.
    fn at(a: u64) -> (u64, u8) {
        (a / 4096, u8::try_from((a % 4096) / CELL as u64).unwrap())
    }

    /// A sweep along a dimension of `step` bytes from byte `base`, `dir`
    /// 1 or -1: the program faults on each element's page it finds absent
    /// (here, every one not in a window). Returns the faults' plans and
    /// checks that every page planned is the page of the element it stands
    /// for.
    fn sweep_bytes(pl: &mut Planner, base: u64, step: u64, dir: i64, elements: i64) -> Vec<Plan> {
        let elem = |k: i64| {
            let off = (step as i64) * k * dir;
            u64::try_from(base as i64 + off).unwrap()
        };
        let mut plans = Vec::new();
        let mut k = 0;
        while k < elements {
            let (p, c) = at(elem(k));
            let plan = pl.plan(p, c, Hint::None, false, |_| false);
            for j in 0..plan.pages as i64 {
                // Faults are known to a cell: an element within two cells
                // of a page's edge may be placed on the page beside it.
                let e = elem(k + j);
                let near_edge = (e + 32) % 4096 < 64;
                let page = plan.walk.page(j);
                assert!(
                    page == (e / 4096) as i64 || near_edge && page.abs_diff((e / 4096) as i64) == 1,
                    "element {} of a window at element {k}: page {page}, not {}",
                    k + j,
                    e / 4096
                );
            }
            k += plan.pages as i64;
            plans.push(plan);
        }
        plans
    }

    #[test]
    fn a_stride_that_is_not_a_whole_number_of_pages_is_followed() {
        // NPB SP class A's planes of 65 x 65 doubles: 33,800 bytes, 8.25
        // pages, which faults 8, 8, 8 and 9 pages apart.
        let mut pl = Planner::new(64);
        let plans = sweep_bytes(&mut pl, 1 << 30, 33_800, 1, 600);
        let windows: Vec<usize> = plans.iter().map(|p| p.pages).collect();
        assert_eq!(
            windows[..9],
            [1, 1, 4, 8, 16, 32, 64, 64, 64],
            "{windows:?}"
        );
        assert!(plans[2..]
            .iter()
            .all(|p| p.stride == 0 && p.stream.is_some()));
        // The previous window, counted used, is its elements' pages.
        let (walk, k) = plans[3].used.unwrap();
        assert_eq!(k, 3);
        assert_eq!(walk.page(0), ((1u64 << 30) + 3 * 33_800) as i64 / 4096);
        // Backward, and a plane of NPB SP class B's u (103.6 pages).
        let mut pl = Planner::new(64);
        let plans = sweep_bytes(&mut pl, 1 << 34, 424_360, -1, 300);
        assert!(plans.len() <= 12, "{} faults", plans.len());
        assert!(plans[2].walk.backward());
    }

    #[test]
    fn a_fractional_candidate_a_page_stride_on_is_a_page_stream() {
        // Faults 8 pages apart whose cells wander: no step in bytes, but a
        // page stride.
        let mut pl = Planner::new(64);
        assert_eq!(pl.plan(1000, 0, Hint::None, false, |_| false).pages, 1);
        assert_eq!(pl.plan(1008, 100, Hint::None, false, |_| false).pages, 1);
        let p = pl.plan(1016, 7, Hint::None, false, |_| false);
        assert_eq!((p.pages, p.stride), (FIRST_WINDOW, 8));
        assert_eq!(p.walk, Walk::pages(1016, 8));
        // A step just over a page is left to a sequential stream.
        let mut pl = Planner::new(64);
        for (p, c) in [(2000u64, 0u8), (2001, 16), (2002, 32)] {
            pl.plan(p, c, Hint::None, false, |_| false);
        }
        let p = pl.plan(2006, 96, Hint::None, false, |_| false);
        assert_eq!((p.stride, p.pages), (1, 2 * FIRST_WINDOW));
    }

    #[test]
    fn random_faults_with_cells_get_demand_pages() {
        let mut pl = Planner::new(64);
        let mut prefetched = 0;
        for x in xorshift(100_000) {
            let (p, c) = at(x % (4 << 30));
            prefetched += pl.plan(p, c, Hint::None, false, |_| false).pages - 1;
        }
        assert!(
            prefetched < 100,
            "{prefetched} pages prefetched for random faults"
        );
    }

    proptest::proptest! {
        /// Any step of 1 1/8 to MAX_STEP pages that is not a whole number of
        /// pages, either way, from any byte: every window holds exactly its
        /// elements' pages, and a long sweep takes few faults.
        #[test]
        fn fractional_windows_hold_their_elements_pages(
            step in 4608u64..(MAX_STEP as u64 * 4096),
            base in (1u64 << 31)..(1u64 << 33),
            back in proptest::bool::ANY,
        ) {
            proptest::prop_assume!(!(step % 4096 <= 32 || step % 4096 >= 4096 - 32));
            let mut pl = Planner::new(64);
            let plans = sweep_bytes(&mut pl, base, step, if back { -1 } else { 1 }, 1000);
            proptest::prop_assert!(plans.len() <= 25, "{} faults for 1000 elements", plans.len());
        }
    }
}
