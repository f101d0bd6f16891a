//! Which resident page leaves next: a scan-resistant, loop-aware policy that
//! learns only from what the runtime sees (faults and evictions). This kernel
//! gives user space no access bits (no idle-page tracking, no DAMON for
//! virtual addresses), so a hit on a resident page is invisible; refaults are
//! not.
//!
//! Two FIFO queues share the budget:
//! - **probation** (1/8 of the budget, at least a few prefetch windows):
//!   pages seen once (first touch, prefetch, refaults that found
//!   main full). A scan streams through it and never reaches the protected set.
//! - **main** (protected, the rest of the budget): pages that came back.
//!
//! Every eviction stamps the page with the *eviction clock* (evictions so
//! far); a refault's *distance* is the clock now minus that stamp — how many
//! other pages left while it was away, Linux's workingset refault distance.
//! A refaulting page enters main while main has room. When main is full it
//! displaces a main page only if its distance is less than half the one that
//! page had when it was admitted (a CLOCK-like look at the few oldest). On a
//! cyclic sweep larger than the budget every page refaults at about the same
//! distance, so main stops changing: a stable resident set holds, and the
//! rest of the loop streams through probation — close to the optimal policy
//! (keep B pages, miss the other N−B). Pages that stay hot never refault and
//! keep their place. So that a stale set can still age out, one failed
//! admission in [`TRICKLE`] displaces the oldest main page anyway; on a loop
//! that swap is neutral (one page loses its place, another gains it).
//!
//! Which pages form the stable set matters as much as how many. Every run of
//! kept pages inside a loop splits the stream around it, and each split
//! costs a fault, an install call and an unmap call (several µs), where a
//! page inside a run costs under one. A set formed while the program did
//! something else (a matrix built by scattered writes, then swept) is dust:
//! NPB CG class A at half its footprint kept 3,730 pages in 1,151 runs and
//! fetched 1.4 pages a run. So the queues count main's pages in each block
//! of [`BLOCK`] pages, and a page fetched in a window ([`Fetched::InRun`])
//! may also displace a main page that sits in a block keeping fewer main
//! pages than the newcomer's. On a loop each swap is neutral in misses, and
//! blocks drift apart until each is kept whole or streamed whole: the kept
//! part becomes runs. Such a page looks further (`LOOK_IN_RUN`, 64 of
//! main's oldest) and, of the pages it may displace, takes the one from the
//! block keeping the fewest: the first that qualified was mostly a hole
//! punched in a block kept nearly whole, which the next sweep fetched as a
//! run of its own (NPB MG class B at half and a quarter: 28% fewer runs
//! replayed, for 1-2% fewer pages). How the old page was admitted does not protect it
//! (the set to gather was formed in an earlier phase, at that phase's
//! distances), except that a page that came alone (a hash table's, a
//! graph's random reads) is displaced so only from a block that keeps under
//! half as many main pages as the newcomer's. A newcomer that came alone
//! may itself displace a main page when its own block keeps at least 5/8
//! of its pages in main (`HOLE_KEPT`) and the old page's block
//! `HOLE_MARGIN` fewer. That rule finishes the gathering: once blocks are
//! mostly kept, their remaining holes are single pages that come alone,
//! and without it every block kept a few holes, each a fault of its own
//! (NPB CG class A at 70% of its footprint, replayed: 6.9x MIN in 280 k
//! runs; with it 3.9x in 160 k). Random reads rarely find a block that
//! full (GAPBS at a quarter: about 14 in 64). A hole a stream passes
//! through ([`Fetched::AloneInStream`]: the one absent page of a stream's
//! window, or a pipelined window's first page) looks as far as a window's
//! page does and takes the thinnest block's page: among only the first
//! `LOOK`, the hole mostly found no block `HOLE_MARGIN` thinner, and NPB MG
//! class B at half kept its holes (each a lone fault, a lone install and a
//! lone write-protect on the way out: 305 k of its first 500 k
//! write-protect calls covered one page). Demand pages without a stream
//! keep the short look: each displaced page leaves alone, and a graph
//! build's scattered writes, given the long look, displaced 2.9 times as
//! many for no fewer faults (GAPBS BFS `-g 19` at a quarter: 12% slower).
//! Even the streams' holes double that build's displacements, for 2.3%
//! more faults (docs/design.md, Replacement).
//!
//! Hints take precedence: SEQUENTIAL pages never enter main; READ_MOSTLY clean
//! pages get a second pass; pinned pages are skipped by the caller.
//!
//! The policy is pure bookkeeping over page numbers, so the same code runs in
//! the SIGBUS handler (under a spin lock) and in the simulation tests below,
//! which compare it with Belady's optimal policy.

use crate::sync::Ring;

/// One failed admission in TRICKLE displaces the oldest main page anyway.
pub const TRICKLE: u32 = 256;
/// Main entries examined for a colder one before an admission gives up.
const LOOK: usize = 8;
/// Main entries a page fetched in a window examines for the one to
/// displace: of those that qualify, it takes the one whose block keeps the
/// fewest main pages (see the module comment).
const LOOK_IN_RUN: usize = 64;
/// A block keeping at most this many main pages is thin enough: the look
/// stops at the first page from one that may be displaced.
const THIN: u16 = 8;
/// Pages per block whose main pages are counted (see the module comment):
/// a prefetch window's worth.
pub const BLOCK: usize = 64;
const BLOCK_SHIFT: u32 = BLOCK.trailing_zeros();
/// A page that came alone may displace a main page if its block keeps at
/// least this many main pages (5/8 of [`BLOCK`]) and the old page's block
/// [`HOLE_MARGIN`] fewer: it fills a hole in a block that is nearly kept
/// whole (see the module comment). Each such swap moves a kept page to a
/// block keeping at least a margin more, so swaps by this rule never undo
/// one another: two blocks cannot trade a page back and forth.
const HOLE_KEPT: u16 = 40;
const HOLE_MARGIN: u16 = 8;

/// Whether a main page from a block keeping `near` main pages may make room
/// for a hole in a block keeping `kept_here` (see [`HOLE_KEPT`]).
fn fills_hole(kept_here: u16, near: u16) -> bool {
    kept_here >= HOLE_KEPT && near + HOLE_MARGIN <= kept_here
}

/// Most entries the queues keep for pages evicted out of their turn (see
/// `page::STALE`), beyond one per resident page: the rings have room for
/// them. An entry lasts until its page comes back or the queues reach it,
/// about one pass of the queues: a budget's worth lets every eviction take
/// its block along (an eighth of it let 13% of GAPBS BFS's evictions do so).
pub fn stale_cap(budget: usize) -> usize {
    budget
}

/// Room in each ring beyond the resident and STALE pages' entries: an
/// entry left for a page evicted between its install and its admission
/// (`Runtime::evict_range` can take it there) lasts until the queues reach
/// it, and a full ring stops the program.
const SLACK: usize = crate::MAX_BATCH;

/// How an admitted page was fetched: alone (a demand page, a probe), or in
/// a window of a stream, whose pages may gather the kept set into blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fetched {
    Alone,
    InRun,
    /// Fetched for a stream but not as a run of five pages or more: the only
    /// absent page of its window (the rest kept), a pipelined window's first
    /// page (installed when the program reaches it), or a short window.
    /// Kept in the queues as [`Fetched::Alone`].
    AloneInStream,
}

/// Per-page auxiliary word: the page's eviction stamp (0 = never evicted).
pub trait Aux {
    fn aux(&self, p: u32) -> u32;
    fn set_aux(&self, p: u32, v: u32);
}

/// Page number `p` as the queues and the aux words keep it (32 bits).
///
/// Lossless: `p` is a page of the arena, and the configuration caps
/// `FARMEM_ARENA` at [`crate::config::MAX_ARENA`], 2^32 pages.
#[inline]
pub(crate) fn page_u32(p: usize) -> u32 {
    debug_assert!(p as u64 * 4096 < crate::config::MAX_ARENA);
    // In range: see above (no check in the fault path).
    #[allow(clippy::cast_possible_truncation)]
    let p = p as u32;
    p
}

/// What the caller says about an eviction candidate.
pub enum Take {
    /// Taken for eviction (the caller now owns it).
    Taken,
    /// Keep it resident; it goes to the back of its queue (pinned, busy, or
    /// given a second chance).
    Keep,
    /// Not resident any more: drop the entry.
    Drop,
    /// Keep it resident, in main from now on (a probation page only; a main
    /// page so answered goes to main's back, as with [`Take::Keep`]). See
    /// [`keeps_dirty`].
    Promote,
}

/// Main pages a block must keep (more than this, 3/4 of [`BLOCK`]) for a
/// dirty probation page inside it to be kept instead of evicted
/// ([`keeps_dirty`]). At half, GAPBS BFS `-g 20` at a quarter fetched 16%
/// more: a random writer's hot blocks qualified, and the pages kept there,
/// which no refault displaces, took main's room from its hot pages.
pub const DIRTY_KEPT: u16 = 48;

/// Whether a dirty probation page at the head of the queue stays, in main,
/// instead of leaving: both its neighbours are resident and dirty, and its
/// block keeps more than [`DIRTY_KEPT`] main pages (`kept_near`). Such a
/// page is a hole in a region the program keeps writing (NPB SP's and MG's
/// arrays between their kept parts): evicted, it costs a write-protect call
/// of its own (a TLB shootdown that interrupts every other CPU running the
/// program), a write-back, and, when the next sweep comes by, a lone fetch
/// of one page. Kept, it joins the run around it, and main, over its target
/// now, gives up its oldest page instead. A stream's pages do not qualify:
/// main keeps none of a streamed block. NPB SP class A at a quarter of its
/// footprint wrote back about a third as much and ran about 30% faster
/// (docs/benchmarks.md, eighteenth session).
pub fn keeps_dirty(kept_near: u16, left_dirty: bool, right_dirty: bool) -> bool {
    left_dirty && right_dirty && kept_near > DIRTY_KEPT
}

pub struct Queues {
    probation: Ring,
    main: Ring,
    /// Main's pages per block of [`BLOCK`] pages (pages past the end of the
    /// table are not counted, and read as an empty block).
    blocks: Box<[u16]>,
    main_target: usize,
    /// Eviction clock; stamps are never 0.
    clock: u32,
    failed: u32,
    /// Admissions into main, displacements, trickles: for statistics.
    pub promoted: u64,
    pub displaced: u64,
    /// Displacements that gathered the kept set (within `displaced`).
    pub gathered: u64,
    /// Dirty probation pages kept in main instead of evicted ([`keeps_dirty`]).
    pub kept_dirty: u64,
}

/// A queue entry: the page, and (in main) the distance it was admitted at
/// (31 bits) and whether it came in a stream's window (the top bit).
/// Kept in the entry, not in a per-page array, so that looking at the oldest
/// main pages reads the ring in order instead of missing the cache once per
/// page under the lock.
fn entry(p: u32, d: u32, fetched: Fetched) -> u64 {
    let run = u64::from(fetched == Fetched::InRun);
    p as u64 | u64::from(d.min(DIST_MAX)) << 32 | run << 63
}

/// Distances are kept in 31 bits (an eviction clock's worth: longer ones
/// read as this, still the longest).
const DIST_MAX: u32 = (1 << 31) - 1;

fn page_of(e: u64) -> u32 {
    (e & 0xFFFF_FFFF) as u32
}

fn dist_of(e: u64) -> u32 {
    ((e >> 32) as u32) & DIST_MAX
}

fn came_in_run(e: u64) -> bool {
    e >> 63 == 1
}

/// How `n` pages installed together, from page `first` to page `last`,
/// came: in a stream's window (more than one page, spanning five or more:
/// the absent pages of a window are scattered where pages were kept), alone
/// for a stream (`stream`: a window planned for a stream, or pipelined
/// ahead of one), or alone (a demand page, a probe).
pub fn fetched_as(first: u64, last: u64, n: usize, stream: bool) -> Fetched {
    if n > 1 && first.abs_diff(last) >= 4 {
        Fetched::InRun
    } else if stream {
        Fetched::AloneInStream
    } else {
        Fetched::Alone
    }
}

/// Count page `p` into main's blocks (`joined`) or out of them.
fn count(blocks: &mut [u16], p: u32, joined: bool) {
    if let Some(c) = blocks.get_mut((p >> BLOCK_SHIFT) as usize) {
        *c = if joined {
            c.saturating_add(1)
        } else {
            c.saturating_sub(1)
        };
    }
}

/// The refault distance of a page stamped `stamp` at clock `now`.
fn distance(now: u32, stamp: u32) -> u32 {
    now.wrapping_sub(stamp)
}

impl Queues {
    /// Queues for `budget` resident pages. Probation keeps 1/8 of the budget,
    /// at least `probation_min` pages (room for the prefetch windows of many
    /// streams, so prefetched pages live until they are used), at most half.
    ///
    /// Why 1/8: without hit information a page reused while in probation is
    /// not seen, so it must refault once to reach main; a larger probation
    /// spares recency-friendly programs (a merge sort, many concurrent
    /// streams) that refault, a smaller one keeps more of a loop. 1/8 costs a
    /// loop at most 1/8 of the budget against the optimum.
    pub fn new(budget: usize, probation_min: usize, npages: usize) -> Queues {
        let probation = (budget / 8).max(probation_min).min(budget / 2);
        Queues {
            probation: Ring::with_capacity(budget + stale_cap(budget) + SLACK),
            main: Ring::with_capacity(budget + stale_cap(budget) + SLACK),
            // A large table comes zeroed from the kernel: untouched blocks
            // cost no memory.
            blocks: vec![0; npages.div_ceil(BLOCK)].into_boxed_slice(),
            main_target: budget - probation,
            clock: 1,
            failed: 0,
            promoted: 0,
            kept_dirty: 0,
            displaced: 0,
            gathered: 0,
        }
    }

    /// Main's pages in the block of page `p`.
    pub fn kept_near(&self, p: u32) -> u16 {
        self.blocks
            .get((p >> BLOCK_SHIFT) as usize)
            .copied()
            .unwrap_or(0)
    }

    /// Push `e` to main's back, counted.
    fn main_push(&mut self, e: u64) -> bool {
        count(&mut self.blocks, page_of(e), true);
        self.main.push(e)
    }

    pub fn len(&self) -> usize {
        self.probation.len() + self.main.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn main_len(&self) -> usize {
        self.main.len()
    }

    /// A page just installed. `refault` holds its eviction stamp (0 = never
    /// evicted), or None for pages hinted SEQUENTIAL, which never enter main;
    /// `fetched` says how it came. Returns false if the queues are full (a
    /// broken invariant).
    pub fn admit(&mut self, p: u32, refault: Option<u32>, fetched: Fetched) -> bool {
        let stamp = refault.unwrap_or(0);
        if stamp == 0 {
            return self.probation.push(entry(p, 0, fetched));
        }
        let d = distance(self.clock, stamp).max(1);
        if self.main.len() < self.main_target {
            self.promoted += 1;
            return self.main_push(entry(p, d, fetched));
        }
        // Main is full: displace a main page admitted at a clearly longer
        // distance (twice as long: the pages of one loop refault at about the
        // same distance, and small differences must not churn the set), or,
        // for a page of a stream's window, a page from a block that keeps
        // fewer main pages than this page's block (gathering the kept set).
        //
        // The distance the old page was admitted at does not protect it:
        // pages kept from an earlier phase (CG's matrix, built by scattered
        // writes, then swept) were admitted at that phase's distances, and
        // requiring a comparable one froze CG class A's set as dust (1.5
        // pages a run fetched; 3.2 without it, in the replay). A page that
        // came alone (random reads: BFS's parent array) is gathered only
        // from a block keeping under half as many main pages: gathering it
        // from any poorer block cost the BFS-frontier test 8% more pages
        // fetched than demand paging.
        let kept_here = self.kept_near(p);
        let chosen = match fetched {
            Fetched::InRun => self.thinnest_to_displace(kept_here, d, false),
            Fetched::AloneInStream if kept_here >= HOLE_KEPT => {
                self.thinnest_to_displace(kept_here, d, true)
            }
            Fetched::Alone | Fetched::AloneInStream => self.first_to_displace(kept_here, d),
        };
        if let Some(old) = chosen {
            self.gathered += u64::from(dist_of(old) / 2 <= d);
            return self.displace(page_of(old), p, d, fetched);
        }
        self.failed += 1;
        if self.failed.is_multiple_of(TRICKLE) {
            if let Some(old) = self.main.pop() {
                return self.displace(page_of(old), p, d, fetched);
            }
        }
        self.probation.push(entry(p, 0, fetched))
    }

    /// For a page that came alone (refault distance `d`, its block keeping
    /// `kept_here` main pages): the first of the [`LOOK`] oldest main
    /// entries admitted at over twice its distance, or a hole's to fill (see
    /// [`HOLE_KEPT`]), taken out of main. The ones examined before it go to
    /// main's back, as a clock hand passes them.
    ///
    /// The old page's block count is read only for a hole in a nearly kept
    /// block: a scattered cache miss under the lock on the fault path,
    /// which random reads (whose blocks keep few pages) do not pay.
    fn first_to_displace(&mut self, kept_here: u16, d: u32) -> Option<u64> {
        for _ in 0..LOOK.min(self.main.len()) {
            let old = self.main.pop()?;
            let colder = dist_of(old) / 2 > d;
            let hole =
                kept_here >= HOLE_KEPT && fills_hole(kept_here, self.kept_near(page_of(old)));
            if colder || hole {
                return Some(old);
            }
            self.main.push(old);
        }
        None
    }

    /// For a page fetched in a window (refault distance `d`, its block
    /// keeping `kept_here` main pages): of the [`LOOK_IN_RUN`] oldest main
    /// entries, those admitted at over twice its distance or sitting in a
    /// block that keeps fewer main pages (gathering; an old page that came
    /// alone only among the first [`LOOK`], and from a block keeping under
    /// half as many, as before), the one whose block keeps the fewest,
    /// taken out of main. The entries before it go to main's back, those
    /// after it stay where they were; with none, the first [`LOOK`] go to
    /// the back, as a failed look always moved them.
    ///
    /// Taking the first that qualifies, as a page that came alone does,
    /// mostly punched a hole in a block kept nearly whole: the oldest main
    /// pages of a loop sit in such blocks, and a colder one among them
    /// qualifies before any thin block's page is seen. NPB MG class B at
    /// half kept about 540 of its main blocks at 48-63 of 64 pages, and
    /// each hole cost its own run (7.5 pages a run fetched, replayed).
    /// Gathering pages that came alone from all 64 took a random reader's
    /// pages too often: the simulated BFS frontier (`farmem-sim`) fetched
    /// 18,060 pages against 17,154 for demand paging (the old rule 17,923,
    /// this one 17,833).
    ///
    /// Most looks fail (a loop's refaults, main full: NPB CG class A
    /// admitted 6% of its refaults), so what a failed look costs is what
    /// counts. With one thread (`FARMEM_BREAKDOWN`), reading 64 entries in
    /// order and their blocks' counts took an admission from 51-61 to
    /// 117-122 ns a page; moving all 64 to main's back on a failed look
    /// as well, to 190-198.
    ///
    /// `hole`: the newcomer is a stream's hole in a block kept nearly whole
    /// ([`Fetched::AloneInStream`], its block keeping at least
    /// [`HOLE_KEPT`]): an old page qualifies from a block keeping
    /// [`HOLE_MARGIN`] fewer, as in [`Queues::first_to_displace`], an old
    /// page that came alone only among the first [`LOOK`].
    fn thinnest_to_displace(&mut self, kept_here: u16, d: u32, hole: bool) -> Option<u64> {
        let mut best: Option<(usize, u16)> = None;
        let (a, b) = self.main.front(LOOK_IN_RUN);
        let n = a.len() + b.len();
        // The ring's two slices read in order, not an indexed walk: this
        // runs for every page of a window while main is full.
        for (i, &old) in a.iter().chain(b).enumerate() {
            let near = self.kept_near(page_of(old));
            let colder = dist_of(old) / 2 > d;
            let gather = if hole {
                fills_hole(kept_here, near) && (came_in_run(old) || i < LOOK)
            } else {
                near < kept_here && (came_in_run(old) || (i < LOOK && near < kept_here / 2))
            };
            if (colder || gather) && best.is_none_or(|(_, fewest)| near < fewest) {
                best = Some((i, near));
                if near <= THIN {
                    break;
                }
            }
        }
        self.main.rotate(best.map_or(n.min(LOOK), |(i, _)| i));
        best.and_then(|_| self.main.pop())
    }

    fn displace(&mut self, old: u32, p: u32, d: u32, fetched: Fetched) -> bool {
        self.displaced += 1;
        self.promoted += 1;
        count(&mut self.blocks, old, false);
        // The displaced page is the next to leave.
        self.probation.push_front(entry(old, 0, Fetched::Alone))
            && self.main_push(entry(p, d, fetched))
    }

    /// Choose up to `victims.len()` pages to evict, calling `take` on each
    /// candidate (with whether it comes from main, and how many main pages
    /// its block keeps) in order: probation first, main when probation is
    /// empty or main is over its target. Returns how many were taken, and the stamp
    /// the caller must give each of them (see [`Aux`]) before they can
    /// refault — outside the lock: the stamps are scattered cache misses.
    pub fn evict(
        &mut self,
        victims: &mut [u32],
        mut take: impl FnMut(u32, bool, u16) -> Take,
    ) -> (usize, u32) {
        let mut n = 0;
        for from_main in [false, true] {
            let mut examined = 0;
            loop {
                if n == victims.len() {
                    break;
                }
                let use_main =
                    from_main || self.probation.len() == 0 || self.main.len() > self.main_target;
                let q = if use_main {
                    &mut self.main
                } else {
                    &mut self.probation
                };
                if examined >= q.len() {
                    break;
                }
                let Some(e) = q.pop() else { break };
                examined += 1;
                let p = page_of(e);
                let kept_near = self.blocks.get((p >> BLOCK_SHIFT) as usize).copied();
                match take(p, use_main, kept_near.unwrap_or(0)) {
                    Take::Taken => {
                        victims[n] = p;
                        n += 1;
                        if use_main {
                            count(&mut self.blocks, p, false);
                        }
                    }
                    Take::Keep => {
                        q.push(e);
                    }
                    Take::Promote if use_main => {
                        q.push(e);
                    }
                    Take::Promote => {
                        // Kept at distance 1: no refaulting page finds it
                        // colder, so it leaves when main's own turn comes
                        // (or is gathered). Kept at the longest distance,
                        // or at main's size, refaults took its place and
                        // SP class A at a quarter lost most of the gain
                        // (157 and 180 s against 118 s; 173 s without).
                        self.promoted += 1;
                        self.kept_dirty += 1;
                        // Main's ring has room for every resident page.
                        let pushed = self.main_push(entry(p, 1, Fetched::Alone));
                        debug_assert!(pushed, "main's ring is full");
                    }
                    Take::Drop => {
                        if use_main {
                            count(&mut self.blocks, p, false);
                        }
                    }
                }
            }
        }
        // In range: n <= victims.len(), one eviction round (at most MAX_ROUND).
        #[allow(clippy::cast_possible_truncation)]
        let taken = n as u32;
        self.clock = self.clock.wrapping_add(taken).max(1);
        (n, self.clock)
    }

    /// The eviction clock now.
    pub fn clock(&self) -> u32 {
        self.clock
    }

    /// Stamp `p`, evicted outside [`Queues::evict`], with the eviction clock.
    pub fn stamp(&self, p: u32, aux: &impl Aux) {
        aux.set_aux(p, self.clock);
    }

    /// Call `f` on every entry's page, probation's first.
    pub fn for_each(&self, mut f: impl FnMut(u32)) {
        self.probation.for_each(|e| f(page_of(e)));
        self.main.for_each(|e| f(page_of(e)));
    }

    /// Keep only the pages for which `keep` holds (freed ranges, DONTNEED).
    pub fn retain(&mut self, mut keep: impl FnMut(u32) -> bool) {
        self.probation.retain(|e| keep(page_of(e)));
        let blocks = &mut self.blocks;
        self.main.retain(|e| {
            let k = keep(page_of(e));
            if !k {
                count(blocks, page_of(e), false);
            }
            k
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::collections::{HashMap, HashSet};

    impl Queues {
        /// Main's pages as the blocks count them.
        fn counted(&self) -> usize {
            self.blocks.iter().map(|&c| usize::from(c)).sum()
        }
    }

    struct Vaux(Vec<Cell<u32>>);
    impl Aux for Vaux {
        fn aux(&self, p: u32) -> u32 {
            self.0[p as usize].get()
        }
        fn set_aux(&self, p: u32, v: u32) {
            self.0[p as usize].set(v)
        }
    }

    /// Misses of the policy on `trace` with `budget` resident pages, evicting
    /// one page at a time, every miss a demand fault (no prefetch).
    fn misses(trace: &[u32], budget: usize, fifo: bool) -> usize {
        let npages = *trace.iter().max().unwrap() as usize + 1;
        let aux = Vaux((0..npages).map(|_| Cell::new(0)).collect());
        let mut q = Queues::new(budget, 1, npages);
        let mut resident = HashSet::new();
        let mut misses = 0;
        for &p in trace {
            if resident.contains(&p) {
                continue;
            }
            misses += 1;
            if resident.len() == budget {
                let mut v = [0u32; 1];
                let (n, stamp) = q.evict(&mut v, |_, _, _| Take::Taken);
                assert_eq!(n, 1);
                aux.set_aux(v[0], stamp);
                resident.remove(&v[0]);
            }
            let stamp = if fifo { None } else { Some(aux.aux(p)) };
            assert!(q.admit(p, stamp, Fetched::Alone));
            resident.insert(p);
            assert_eq!(q.len(), resident.len());
            assert_eq!(q.counted(), q.main_len());
        }
        misses
    }

    /// Belady's MIN: evict the resident page used furthest in the future.
    fn opt_misses(trace: &[u32], budget: usize) -> usize {
        let mut next_use = vec![usize::MAX; trace.len()];
        let mut last: HashMap<u32, usize> = HashMap::new();
        for i in (0..trace.len()).rev() {
            next_use[i] = last.get(&trace[i]).copied().unwrap_or(usize::MAX);
            last.insert(trace[i], i);
        }
        let mut resident: HashMap<u32, usize> = HashMap::new();
        let mut misses = 0;
        for (i, &p) in trace.iter().enumerate() {
            if let Some(n) = resident.get_mut(&p) {
                *n = next_use[i];
                continue;
            }
            misses += 1;
            if resident.len() == budget {
                let (&victim, _) = resident.iter().max_by_key(|(_, &n)| n).unwrap();
                resident.remove(&victim);
            }
            resident.insert(p, next_use[i]);
        }
        misses
    }

    fn cyclic(n: u32, rounds: usize) -> Vec<u32> {
        (0..rounds).flat_map(|_| 0..n).collect()
    }

    /// A small hot set read at random between the pages of a long scan
    /// (PageRank: rank arrays and an edge array).
    fn scan_plus_hot(hot: u32, scan: u32, rounds: usize, seed: u64) -> Vec<u32> {
        let mut x = seed | 1;
        let mut t = Vec::new();
        for _ in 0..rounds {
            for s in 0..scan {
                t.push(hot + s);
                for _ in 0..3 {
                    t.push(below(&mut x, hot));
                }
            }
        }
        t
    }

    /// The next of xorshift state `x` (never 0), reduced below `n`.
    fn below(x: &mut u64, n: u32) -> u32 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        u32::try_from(*x % u64::from(n)).unwrap()
    }

    /// The design's promise on a loop of `n` pages: one round longer than
    /// the optimum to learn it (the first refaults fill main), then per round
    /// at most the optimum's misses plus what probation holds (1/8 of the
    /// budget) plus a little trickle.
    fn loop_bound(opt: usize, n: usize, b: usize, rounds: usize) -> usize {
        opt + n + rounds * (b / 8 + b / 32 + 2)
    }

    #[test]
    fn cyclic_sweeps_come_close_to_optimal() {
        let b = 200;
        for n in [300u32, 400, 800] {
            let t = cyclic(n, 12);
            let (ours, fifo, opt) = (misses(&t, b, false), misses(&t, b, true), opt_misses(&t, b));
            // FIFO misses every access of a loop larger than the budget.
            assert_eq!(fifo, t.len(), "n={n}");
            assert!(
                ours <= loop_bound(opt, n as usize, b, 12),
                "n={n}: ours {ours} opt {opt} fifo {fifo}"
            );
            // At least half of what any policy can save over FIFO is saved.
            assert!(
                fifo - ours >= (fifo - opt) / 2,
                "n={n}: ours {ours} opt {opt} fifo {fifo}"
            );
        }
    }

    #[test]
    fn a_scan_does_not_flush_the_hot_set() {
        let b = 200;
        let t = scan_plus_hot(100, 2000, 4, 7);
        let (ours, fifo, opt) = (misses(&t, b, false), misses(&t, b, true), opt_misses(&t, b));
        // The least any policy can do is the scan itself plus the hot set once.
        assert!(
            (ours as f64) <= 1.15 * opt as f64,
            "ours {ours} opt {opt} fifo {fifo}"
        );
        assert!(fifo as f64 >= 1.5 * opt as f64, "fifo {fifo} opt {opt}");
    }

    #[test]
    fn a_dirty_hole_in_a_kept_block_stays_and_main_gives_its_oldest() {
        // Main keeps 56 of block 0's 64 pages; page 60, a dirty hole between
        // dirty neighbours, heads probation.
        let mut q = Queues::new(64, 1, 256);
        for p in 0..56 {
            assert!(q.admit(p, Some(1), Fetched::InRun));
        }
        assert!(q.admit(60, None, Fetched::Alone));
        assert!(q.admit(100, None, Fetched::Alone));
        assert_eq!((q.main_len(), q.kept_near(60)), (56, 56));
        let mut asked = Vec::new();
        let mut v = [0u32; 1];
        let (n, _) = q.evict(&mut v, |p, from_main, kept_near| {
            asked.push((p, from_main, kept_near));
            if !from_main && keeps_dirty(kept_near, true, true) {
                Take::Promote
            } else {
                Take::Taken
            }
        });
        // 60 joined main, which was over its target then and gave up its
        // oldest page, not probation's next one.
        assert_eq!(asked, [(60, false, 56), (0, true, 57)]);
        assert_eq!((n, v[0]), (1, 0));
        assert_eq!((q.main_len(), q.kept_near(60), q.kept_dirty), (56, 56, 1));
        assert_eq!(q.len(), 57);
        assert_eq!(q.counted(), q.main_len());
        // Probation's 100, in a block main keeps none of, is not kept.
        let (n, _) = q.evict(&mut v, |p, from_main, kept_near| {
            assert_eq!((p, from_main, kept_near), (100, false, 0));
            if keeps_dirty(kept_near, true, true) {
                Take::Promote
            } else {
                Take::Taken
            }
        });
        assert_eq!((n, v[0]), (1, 100));
    }

    #[test]
    fn only_holes_between_dirty_pages_of_mostly_kept_blocks_stay() {
        assert!(keeps_dirty(DIRTY_KEPT + 1, true, true));
        assert!(!keeps_dirty(DIRTY_KEPT, true, true));
        assert!(!keeps_dirty(64, true, false));
        assert!(!keeps_dirty(64, false, true));
    }

    #[test]
    fn a_working_set_that_fits_stays() {
        let t = cyclic(150, 10);
        assert_eq!(misses(&t, 200, false), 150);
    }

    /// A loop fetched in windows, as the fault path fetches a stream.
    struct Windows {
        q: Queues,
        aux: Vaux,
        resident: HashSet<u32>,
        budget: usize,
    }

    impl Windows {
        fn new(npages: u32, budget: usize) -> Windows {
            Windows {
                q: Queues::new(budget, 1, npages as usize),
                aux: Vaux((0..npages).map(|_| Cell::new(0)).collect()),
                resident: HashSet::new(),
                budget,
            }
        }

        /// Bring the absent pages of `window` in together (evicting first),
        /// for a stream if `stream`; returns the pages fetched and the runs
        /// they came in.
        fn fetch(&mut self, window: &[u32], stream: bool) -> (usize, usize) {
            let list: Vec<u32> = window
                .iter()
                .copied()
                .filter(|p| !self.resident.contains(p))
                .collect();
            let (Some(&first), Some(&last)) = (list.first(), list.last()) else {
                return (0, 0);
            };
            while self.resident.len() + list.len() > self.budget {
                let mut v = [0u32; 8];
                let want = (self.resident.len() + list.len() - self.budget).min(8);
                let (k, stamp) = self.q.evict(&mut v[..want], |_, _, _| Take::Taken);
                assert!(k > 0);
                for &x in &v[..k] {
                    self.aux.set_aux(x, stamp);
                    self.resident.remove(&x);
                }
            }
            let fetched = fetched_as(u64::from(first), u64::from(last), list.len(), stream);
            for &p in &list {
                assert!(self.q.admit(p, Some(self.aux.aux(p)), fetched));
                self.resident.insert(p);
            }
            assert_eq!(self.q.len(), self.resident.len());
            (
                list.len(),
                1 + list.windows(2).filter(|w| w[1] != w[0] + 1).count(),
            )
        }

        /// Runs of consecutive pages in the resident set.
        fn kept_runs(&self) -> usize {
            let mut kept: Vec<u32> = self.resident.iter().copied().collect();
            kept.sort_unstable();
            1 + kept.windows(2).filter(|x| x[1] != x[0] + 1).count()
        }

        /// The resident set is dust: at most `per` pages a run.
        fn assert_dust(&self, per: usize) {
            let dust = self.kept_runs();
            assert!(
                dust * per >= self.resident.len(),
                "{dust} runs of {} kept",
                self.resident.len()
            );
        }

        /// Forty sweeps of `0..n` in windows of `w`; the last must have
        /// gathered the kept set (four pages a run fetched or more) and still
        /// miss only what a loop must, plus what probation holds.
        fn sweeps_gather(&mut self, n: u32, w: u32) {
            let sweeps: Vec<(usize, usize)> = (0..40).map(|_| self.sweep(n, w)).collect();
            let last = sweeps[sweeps.len() - 1];
            assert!(last.1 * 4 <= last.0, "pages, runs per sweep {sweeps:?}");
            let bound = (n as usize - self.budget) + self.budget / 8 + self.budget / 16;
            assert!(last.0 <= bound, "pages per sweep {sweeps:?}, bound {bound}");
        }

        /// One sweep of `0..n` in windows of `w` pages: pages and runs fetched.
        fn sweep(&mut self, n: u32, w: u32) -> (usize, usize) {
            let mut total = (0, 0);
            for start in (0..n).step_by(w as usize) {
                let window: Vec<u32> = (start..(start + w).min(n)).collect();
                let (f, r) = self.fetch(&window, true);
                total = (total.0 + f, total.1 + r);
            }
            total
        }
    }

    #[test]
    fn windows_gather_a_dusty_kept_set_into_runs() {
        let (n, b, w) = (2048u32, 1024usize, 64u32);
        let mut l = Windows::new(n, b);
        // A kept set made of dust: the loop first swept at a stride of three
        // (every third page, then the next), in windows of 16. (Three such
        // rounds already gather it to about 5 pages a run.)
        for offset in 0..3 {
            let pages: Vec<u32> = (offset..n).step_by(3).collect();
            for window in pages.chunks(16) {
                l.fetch(window, false);
            }
        }
        l.assert_dust(4);
        // Without gathering, 1.9 pages a run on this loop: 1,153 pages in
        // 600 runs.
        l.sweeps_gather(n, w);
        assert!(l.q.gathered > 0);
    }

    /// A kept set formed in an earlier phase of scattered single pages
    /// (CG's matrix built by scattered writes, then swept): its pages came
    /// alone, at that phase's short distances, and the loop that follows
    /// must still gather it into runs.
    #[test]
    fn a_loop_gathers_a_set_kept_from_scattered_faults() {
        let (n, b, w) = (2048u32, 1024usize, 64u32);
        let mut l = Windows::new(n, b);
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..20_000 {
            l.fetch(&[below(&mut x, n)], false);
        }
        l.assert_dust(2);
        // Without gathering pages that came alone: 2.2 pages a run.
        l.sweeps_gather(n, w);
    }

    /// A page fetched in a window takes the place of the main page, among
    /// the oldest, whose block keeps the fewest, not of the first that may
    /// be displaced: that one sits in a block kept nearly whole, and taking
    /// it would punch a hole that the next sweep fetches as a run of its own.
    #[test]
    fn windows_displace_from_the_thinnest_block() {
        let b = |k: u32| k * u32::try_from(BLOCK).unwrap();
        let mut q = Queues::new(1024, 1, 4096);
        // Main (896 pages), oldest first: 48 of block 2, 8 of block 1, 60 of
        // block 0, then blocks 3..15 whole and 12 pages of block 15.
        let order = [
            b(2)..b(2) + 48,
            b(1)..b(1) + 8,
            b(0)..b(0) + 60,
            b(3)..b(15) + 12,
        ];
        for p in order.iter().cloned().flatten() {
            assert!(q.admit(p, Some(1), Fetched::InRun));
        }
        assert_eq!(q.main_len(), 896);
        // Block 0's next page, in a window: blocks 2 and 1 both keep fewer,
        // and block 1 keeps the fewest.
        assert!(q.admit(b(0) + 60, Some(1), Fetched::InRun));
        assert_eq!(q.gathered, 1);
        assert_eq!(
            (q.kept_near(b(0)), q.kept_near(b(1)), q.kept_near(b(2))),
            (61, 7, 48)
        );
        // The entries passed over went to main's back, the rest stayed: the
        // oldest main page is now block 1's next.
        assert_eq!(
            q.main.front(1).0.first().copied().map(page_of),
            Some(b(1) + 1)
        );
        assert_eq!((q.main_len(), q.counted()), (896, 896));
    }

    /// Once main keeps blocks nearly whole, their holes are single pages
    /// that come alone: such a page takes the place of a main page from a
    /// block keeping clearly fewer, and a lone page of a thin block (random
    /// reads) takes no one's.
    #[test]
    fn lone_pages_fill_holes_in_blocks_kept_nearly_whole() {
        let b = |k: u32| k * u32::try_from(BLOCK).unwrap();
        // Main (896 pages) filled in `order`, the first the oldest.
        let main_of = |order: &[std::ops::Range<u32>]| {
            let mut q = Queues::new(1024, 1, 4096);
            for p in order.iter().cloned().flatten() {
                assert!(q.admit(p, Some(1), Fetched::InRun));
            }
            assert_eq!(q.main_len(), 896);
            q
        };
        // Block 1 keeps 16 (the oldest), block 0 keeps 56 (holes at
        // 56..64), blocks 2..15 the rest.
        let mut q = main_of(&[b(1)..b(1) + 16, b(0)..b(0) + 56, b(2)..b(2) + 824]);
        // A lone page of block 1 (16 kept) finds no place.
        assert!(q.admit(b(1) + 40, Some(1), Fetched::Alone));
        assert_eq!((q.gathered, q.kept_near(b(1))), (0, 16));
        // Each hole of block 0 takes the place of one of block 1's pages.
        for (i, hole) in (b(0) + 56..b(0) + 64).enumerate() {
            assert!(q.admit(hole, Some(1), Fetched::Alone));
            assert_eq!(q.gathered, i as u64 + 1);
        }
        assert_eq!((q.kept_near(b(0)), q.kept_near(b(1))), (64, 8));
        assert_eq!((q.main_len(), q.counted()), (896, 896));

        // Blocks kept almost as well do not trade pages: a hole of block 0
        // (56 kept) leaves block 1's pages (52 kept, the oldest) in place.
        let mut q = main_of(&[b(1)..b(1) + 52, b(0)..b(0) + 56, b(2)..b(2) + 788]);
        assert!(q.admit(b(0) + 60, Some(1), Fetched::Alone));
        assert_eq!(
            (q.gathered, q.kept_near(b(0)), q.kept_near(b(1))),
            (0, 56, 52)
        );
    }

    /// A stream's hole in a block kept nearly whole looks past the first
    /// [`LOOK`] of main (whose blocks are kept about as well) and takes the
    /// thinnest block's page behind them; a demand page without a stream,
    /// in the same block, looks at the first `LOOK` only and takes none.
    #[test]
    fn a_streams_hole_looks_as_far_as_a_window() {
        let b = |k: u32| k * u32::try_from(BLOCK).unwrap();
        let main_of = || {
            let mut q = Queues::new(1024, 1, 4096);
            // The oldest: 20 pages of block 1 (it keeps 52), then 8 pages of
            // block 2 (it keeps 8), then block 0 with holes at 56..64.
            let order = [
                b(1)..b(1) + 20,
                b(2)..b(2) + 8,
                b(1) + 20..b(1) + 52,
                b(0)..b(0) + 56,
                b(3)..b(15) + 12,
            ];
            for p in order.iter().cloned().flatten() {
                assert!(q.admit(p, Some(1), Fetched::InRun));
            }
            assert_eq!(q.main_len(), 896);
            q
        };
        let mut q = main_of();
        assert!(q.admit(b(0) + 60, Some(1), Fetched::Alone));
        assert_eq!((q.gathered, q.kept_near(b(0))), (0, 56));

        let mut q = main_of();
        assert!(q.admit(b(0) + 60, Some(1), Fetched::AloneInStream));
        assert_eq!(
            (
                q.gathered,
                q.kept_near(b(0)),
                q.kept_near(b(1)),
                q.kept_near(b(2))
            ),
            (1, 57, 52, 7)
        );
        assert_eq!((q.main_len(), q.counted()), (896, 896));
        // A stream's page in a block kept thinly keeps the short look.
        assert!(q.admit(b(2) + 40, Some(1), Fetched::AloneInStream));
        assert_eq!((q.gathered, q.kept_near(b(2))), (1, 7));
    }

    use proptest::prelude::*;
    proptest! {
        /// On loops of any length and any budget, the policy keeps its promise
        /// (see `loop_bound`).
        #[test]
        fn loops_of_any_size(b in 20usize..120, extra in 1u32..300, rounds in 4usize..10) {
            let n = u32::try_from(b).unwrap() + extra;
            let t = cyclic(n, rounds);
            let ours = misses(&t, b, false);
            let opt = opt_misses(&t, b);
            prop_assert!(ours <= loop_bound(opt, n as usize, b, rounds), "b={} n={} ours {} opt {}", b, n, ours, opt);
        }

        /// Windows of any length at any place, for a stream or not, with
        /// evictions between them and pages freed now and then (`retain`):
        /// the queues hold exactly the resident pages, and the blocks count
        /// exactly main's.
        #[test]
        fn windows_keep_the_block_counts(
            windows in proptest::collection::vec((0u32..300, 1u32..20, 0u32..4, any::<bool>()), 1..300),
            b in 8usize..80,
        ) {
            let mut l = Windows::new(320, b);
            for (start, len, free, stream) in windows {
                let w: Vec<u32> = (start..start + len).collect();
                l.fetch(&w[..(len as usize).min(b)], stream);
                if free == 0 {
                    // Free the window's pages, as a program's free() would.
                    let gone: HashSet<u32> = w.iter().copied().collect();
                    l.q.retain(|p| !gone.contains(&p));
                    l.resident.retain(|p| !gone.contains(p));
                }
                prop_assert_eq!(l.q.len(), l.resident.len());
                prop_assert_eq!(l.q.counted(), l.q.main_len());
            }
        }

        #[test]
        fn random_traces_keep_the_invariants(trace in proptest::collection::vec(0u32..64, 1..400), b in 1usize..40) {
            let m = misses(&trace, b, false);
            prop_assert!(m >= opt_misses(&trace, b));
            prop_assert!(m <= trace.len());
        }
    }
}
