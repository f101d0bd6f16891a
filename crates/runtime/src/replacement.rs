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
}

pub struct Queues {
    probation: Ring,
    main: Ring,
    main_target: usize,
    /// Eviction clock; stamps are never 0.
    clock: u32,
    failed: u32,
    /// Admissions into main, displacements, trickles: for statistics.
    pub promoted: u64,
    pub displaced: u64,
}

/// A queue entry: the page, and (in main) the distance it was admitted at.
/// Kept in the entry, not in a per-page array, so that looking at the oldest
/// main pages reads the ring in order instead of missing the cache once per
/// page under the lock.
fn entry(p: u32, d: u32) -> u64 {
    p as u64 | (d as u64) << 32
}

fn page_of(e: u64) -> u32 {
    (e & 0xFFFF_FFFF) as u32
}

fn dist_of(e: u64) -> u32 {
    (e >> 32) as u32
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
    pub fn new(budget: usize, probation_min: usize) -> Queues {
        let probation = (budget / 8).max(probation_min).min(budget / 2);
        Queues {
            probation: Ring::with_capacity(budget),
            main: Ring::with_capacity(budget),
            main_target: budget - probation,
            clock: 1,
            failed: 0,
            promoted: 0,
            displaced: 0,
        }
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
    /// evicted), or None for pages hinted SEQUENTIAL, which never enter main.
    /// Returns false if the queues are full (a broken invariant).
    pub fn admit(&mut self, p: u32, refault: Option<u32>) -> bool {
        let stamp = refault.unwrap_or(0);
        if stamp == 0 {
            return self.probation.push(entry(p, 0));
        }
        let d = distance(self.clock, stamp).max(1);
        if self.main.len() < self.main_target {
            self.promoted += 1;
            return self.main.push(entry(p, d));
        }
        // Main is full: displace a main page admitted at a clearly longer
        // distance (twice as long: the pages of one loop refault at about the
        // same distance, and small differences must not churn the set).
        for _ in 0..LOOK.min(self.main.len()) {
            let Some(old) = self.main.pop() else { break };
            if dist_of(old) / 2 > d {
                return self.displace(page_of(old), p, d);
            }
            self.main.push(old);
        }
        self.failed += 1;
        if self.failed.is_multiple_of(TRICKLE) {
            if let Some(old) = self.main.pop() {
                return self.displace(page_of(old), p, d);
            }
        }
        self.probation.push(entry(p, 0))
    }

    fn displace(&mut self, old: u32, p: u32, d: u32) -> bool {
        self.displaced += 1;
        self.promoted += 1;
        // The displaced page is the next to leave.
        self.probation.push_front(entry(old, 0)) && self.main.push(entry(p, d))
    }

    /// Choose up to `victims.len()` pages to evict, calling `take` on each
    /// candidate (and whether it comes from main) in order: probation first, main when probation is empty or
    /// main is over its target. Returns how many were taken, and the stamp
    /// the caller must give each of them (see [`Aux`]) before they can
    /// refault — outside the lock: the stamps are scattered cache misses.
    pub fn evict(
        &mut self,
        victims: &mut [u32],
        mut take: impl FnMut(u32, bool) -> Take,
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
                match take(p, use_main) {
                    Take::Taken => {
                        victims[n] = p;
                        n += 1;
                    }
                    Take::Keep => {
                        q.push(e);
                    }
                    Take::Drop => {}
                }
            }
        }
        // In range: n <= victims.len(), one eviction batch (at most MAX_BATCH).
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

    /// Keep only the pages for which `keep` holds (freed ranges, DONTNEED).
    pub fn retain(&mut self, mut keep: impl FnMut(u32) -> bool) {
        self.probation.retain(|e| keep(page_of(e)));
        self.main.retain(|e| keep(page_of(e)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::collections::{HashMap, HashSet};

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
        let mut q = Queues::new(budget, 1);
        let mut resident = HashSet::new();
        let mut misses = 0;
        for &p in trace {
            if resident.contains(&p) {
                continue;
            }
            misses += 1;
            if resident.len() == budget {
                let mut v = [0u32; 1];
                let (n, stamp) = q.evict(&mut v, |_, _| Take::Taken);
                assert_eq!(n, 1);
                aux.set_aux(v[0], stamp);
                resident.remove(&v[0]);
            }
            let stamp = if fifo { None } else { Some(aux.aux(p)) };
            assert!(q.admit(p, stamp));
            resident.insert(p);
            assert_eq!(q.len(), resident.len());
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
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    t.push(u32::try_from(x % u64::from(hot)).unwrap());
                }
            }
        }
        t
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
    fn a_working_set_that_fits_stays() {
        let t = cyclic(150, 10);
        assert_eq!(misses(&t, 200, false), 150);
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

        #[test]
        fn random_traces_keep_the_invariants(trace in proptest::collection::vec(0u32..64, 1..400), b in 1usize..40) {
            let m = misses(&trace, b, false);
            prop_assert!(m >= opt_misses(&trace, b));
            prop_assert!(m <= trace.len());
        }
    }
}
