//! Counters and the fault-latency histogram. All updates are relaxed atomics,
//! safe inside the SIGBUS handler.
//!
//! Every fault bumps several counters, each striped ([`Counter`]) so that
//! faulting threads do not fight over one cache line.

use crate::cost::{Phase, Phases};
pub use crate::counter::Counter;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Log-linear histogram: 4 sub-buckets per power of two of nanoseconds.
const SUB: usize = 4;
/// Up to 2^63 ns; larger values land in the last bucket.
pub const BUCKETS: usize = 62 * SUB;

/// Copies of the histogram that threads record into (by thread number),
/// summed when read. Every fault records its latency, and two threads
/// faulting at once land in the same few buckets: one shared copy made
/// that `lock add` the dearest instruction of the fault handler (a fifth
/// of its own time in GAPBS BFS's graph build; docs/benchmarks.md).
pub const HIST_STRIPES: usize = 8;

#[repr(C, align(64))]
struct HistStripe([AtomicU64; BUCKETS]);

#[repr(C)]
pub struct Histogram {
    stripes: [HistStripe; HIST_STRIPES],
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            stripes: [const { HistStripe([const { AtomicU64::new(0) }; BUCKETS]) }; HIST_STRIPES],
        }
    }
}

/// Values below 8 ns get a bucket each; above, 4 per power of two.
fn bucket_of(ns: u64) -> usize {
    if ns < 8 {
        return farmem_sys::usize_from(ns);
    }
    let log = 63 - ns.leading_zeros() as usize; // >= 3
    let sub = ((ns >> (log - 2)) & 3) as usize;
    ((log - 1) * SUB + sub).min(BUCKETS - 1)
}

/// Upper edge of a bucket, ns.
fn bucket_high(b: usize) -> u64 {
    if b < 8 {
        return b as u64;
    }
    let log = b / SUB + 1;
    let sub = (b % SUB) as u64;
    ((4 + sub + 1) << (log - 2)) - 1
}

impl Histogram {
    pub fn record(&self, ns: u64) {
        let stripe = &self.stripes[crate::counter::thread_number() % HIST_STRIPES];
        stripe.0[bucket_of(ns)].fetch_add(1, Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.counts().iter().sum()
    }

    /// Each bucket's count.
    pub fn counts(&self) -> [u64; BUCKETS] {
        std::array::from_fn(|i| self.stripes.iter().map(|s| s.0[i].load(Relaxed)).sum())
    }

    /// The value below which fraction `q` of the samples fall (bucket upper
    /// edge, so within 25% of the true value), or 0 with no samples.
    pub fn quantile(&self, q: f64) -> u64 {
        quantile_of(&self.counts(), q)
    }

    pub fn reset(&self) {
        for b in self.stripes.iter().flat_map(|s| &s.0) {
            b.store(0, Relaxed);
        }
    }
}

/// [`Histogram::quantile`] of bucket counts taken earlier (or the
/// difference of two such, for an interval).
pub fn quantile_of(counts: &[u64], q: f64) -> u64 {
    let n: u64 = counts.iter().sum();
    if n == 0 {
        return 0;
    }
    // A fraction of the count; the cast saturates (negative or NaN: 0), then clamped.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let target = ((q * n as f64).ceil() as u64).clamp(1, n);
    let mut seen = 0;
    for (i, b) in counts.iter().enumerate() {
        seen += b;
        if seen >= target {
            return bucket_high(i);
        }
    }
    bucket_high(BUCKETS - 1)
}

#[repr(C)]
#[derive(Default)]
pub struct Stats {
    /// Faults on missing pages (demand fetches).
    pub faults: Counter,
    /// Write faults on clean pages (first write after fetch).
    pub wp_faults: Counter,
    pub pages_fetched: Counter,
    pub pages_zero_filled: Counter,
    pub pages_written_back: Counter,
    pub evictions: Counter,
    /// Of those, pages evicted while the faulting thread's own request was
    /// on the wire (see `Runtime::refill`).
    pub evicted_overlapped: Counter,
    /// Of those, pages that left with a lone dirty victim of their block
    /// (see `Runtime::take_neighbours`).
    pub evicted_with_block: Counter,
    /// Of those, pages that came back before the queues reached their old
    /// entry (still STALE when admitted again): a block taken too early.
    pub block_back_soon: Counter,
    /// Write-protect calls made to evict dirty pages (one per run of
    /// consecutive pages; each flushes the TLB of every CPU running a thread
    /// of the program), and of those, calls that covered a single page.
    pub protect_calls: Counter,
    pub protect_lone: Counter,
    /// Of `protect_lone`, calls for a page whose two neighbours stayed
    /// resident and dirty: a hole punched in a run the program keeps
    /// writing, which its next pass fetches alone.
    pub protect_hole: Counter,
    /// System calls that unmapped evicted pages (one per batch where the
    /// kernel takes ranges in one call, one per run where it does not).
    pub unmap_calls: Counter,
    /// Pages moved out into the bin at eviction and moved in from it at
    /// install (see `recycle`), and the calls that moved them (each a TLB
    /// flush, as a write-protect is).
    pub recycled_out: Counter,
    pub recycled_in: Counter,
    pub move_out_calls: Counter,
    pub move_in_calls: Counter,
    /// Moves the kernel reported short of what it moved (see
    /// `farmem_sys::uffd::Uffd::move_pages`), counted from the page tables.
    pub moves_misreported: Counter,
    pub prefetched: Counter,
    /// Of those, pages requested ahead without waiting (pipelined streams).
    pub prefetch_async: Counter,
    /// Faults that caught a stream where eviction had taken the windows
    /// fetched ahead of it (see `readahead`).
    pub streams_caught: Counter,
    /// Clean pages made writable ahead of a write stream (see `dirty`).
    pub wp_ahead: Counter,
    pub prefetch_used: Counter,
    pub prefetch_wasted: Counter,
    /// Pages evicted into the hold, and of those, pages the program touched
    /// there (reused: reinstalled locally and protected).
    pub held: Counter,
    pub hold_reused: Counter,
    /// System calls that pinned far buffers.
    pub io_pins: Counter,
    /// Faults that found the page already resolved by another thread.
    pub spurious: Counter,
    /// Times a system call waited for others' pins to stay within the limit.
    pub pin_waits: Counter,
    pub fault_ns: Histogram,
    /// Own time per part of the page path (`FARMEM_BREAKDOWN`).
    pub phases: Phases,
}

/// A plain copy of the counters, for `fm_stats` and printing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub faults: u64,
    pub wp_faults: u64,
    pub bytes_fetched: u64,
    pub pages_zero_filled: u64,
    pub bytes_written_back: u64,
    pub evictions: u64,
    /// Of `evictions`, pages evicted while a fault's request was on the wire.
    pub evicted_overlapped: u64,
    pub evicted_with_block: u64,
    /// Of `evicted_with_block`, pages that came back while still STALE.
    pub block_back_soon: u64,
    /// Write-protect calls that evicted dirty pages, and of those, the ones
    /// that covered a single page: each is a TLB shootdown.
    pub protect_calls: u64,
    pub protect_lone: u64,
    /// Of `protect_lone`, pages between two resident dirty pages (holes).
    pub protect_hole: u64,
    /// System calls that unmapped evicted pages: each is a TLB shootdown.
    pub unmap_calls: u64,
    /// Pages recycled (moved out at eviction, moved in at install) and the
    /// moves' calls: each is a TLB shootdown.
    pub recycled_out: u64,
    pub recycled_in: u64,
    pub move_out_calls: u64,
    pub move_in_calls: u64,
    /// Moves the kernel reported short of what it moved.
    pub moves_misreported: u64,
    pub prefetched: u64,
    /// Of `prefetched`, pages requested ahead without waiting.
    pub prefetch_async: u64,
    /// Faults that caught a stream where eviction had taken its windows.
    pub streams_caught: u64,
    /// Clean pages made writable ahead of a write stream, sparing a fault each.
    pub wp_ahead: u64,
    pub prefetch_used: u64,
    pub prefetch_wasted: u64,
    /// Pages evicted into the hold, and reinstalled from it (see `hold`).
    pub held: u64,
    pub hold_reused: u64,
    pub io_pins: u64,
    pub spurious_faults: u64,
    /// System calls that waited for the pin limit.
    pub pin_waits: u64,
    /// Refaulting pages admitted to the protected queue, how many of those
    /// displaced a protected page, and how many of those displacements
    /// gathered the kept set into blocks (see `replacement`).
    pub promoted: u64,
    pub displaced: u64,
    pub gathered: u64,
    /// Dirty probation pages kept in main instead of evicted
    /// (`replacement::keeps_dirty`).
    pub kept_dirty: u64,
    pub resident_bytes: u64,
    pub budget_bytes: u64,
    pub fault_p50_ns: u64,
    pub fault_p90_ns: u64,
    pub fault_p99_ns: u64,
    pub fault_max_ns: u64,
    /// Own nanoseconds per [`Phase`], all zero unless `FARMEM_BREAKDOWN`.
    pub phase_ns: [u64; Phase::COUNT],
}

impl Stats {
    /// `policy` is (promoted, displaced, gathered, kept dirty) from the
    /// replacement queues.
    pub fn snapshot(
        &self,
        resident_bytes: u64,
        budget_bytes: u64,
        policy: (u64, u64, u64, u64),
    ) -> Snapshot {
        let page = farmem_sys::PAGE_SIZE as u64;
        Snapshot {
            faults: self.faults.get(),
            wp_faults: self.wp_faults.get(),
            bytes_fetched: self.pages_fetched.get() * page,
            pages_zero_filled: self.pages_zero_filled.get(),
            bytes_written_back: self.pages_written_back.get() * page,
            evictions: self.evictions.get(),
            evicted_overlapped: self.evicted_overlapped.get(),
            evicted_with_block: self.evicted_with_block.get(),
            block_back_soon: self.block_back_soon.get(),
            protect_calls: self.protect_calls.get(),
            protect_lone: self.protect_lone.get(),
            protect_hole: self.protect_hole.get(),
            unmap_calls: self.unmap_calls.get(),
            recycled_out: self.recycled_out.get(),
            recycled_in: self.recycled_in.get(),
            move_out_calls: self.move_out_calls.get(),
            move_in_calls: self.move_in_calls.get(),
            moves_misreported: self.moves_misreported.get(),
            prefetched: self.prefetched.get(),
            prefetch_async: self.prefetch_async.get(),
            streams_caught: self.streams_caught.get(),
            wp_ahead: self.wp_ahead.get(),
            prefetch_used: self.prefetch_used.get(),
            prefetch_wasted: self.prefetch_wasted.get(),
            held: self.held.get(),
            hold_reused: self.hold_reused.get(),
            io_pins: self.io_pins.get(),
            spurious_faults: self.spurious.get(),
            pin_waits: self.pin_waits.get(),
            promoted: policy.0,
            displaced: policy.1,
            gathered: policy.2,
            kept_dirty: policy.3,
            resident_bytes,
            budget_bytes,
            fault_p50_ns: self.fault_ns.quantile(0.50),
            fault_p90_ns: self.fault_ns.quantile(0.90),
            fault_p99_ns: self.fault_ns.quantile(0.99),
            fault_max_ns: self.fault_ns.quantile(1.0),
            phase_ns: self.phases.get(),
        }
    }
}

impl Snapshot {
    /// Pages brought in: fetched or zero-filled.
    pub fn pages_in(&self) -> u64 {
        self.bytes_fetched / farmem_sys::PAGE_SIZE as u64 + self.pages_zero_filled
    }

    /// The counters between `before` and this snapshot (quantiles and
    /// levels are this snapshot's).
    pub fn since(&self, before: &Snapshot) -> Snapshot {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        Snapshot {
            faults: d(self.faults, before.faults),
            wp_faults: d(self.wp_faults, before.wp_faults),
            bytes_fetched: d(self.bytes_fetched, before.bytes_fetched),
            pages_zero_filled: d(self.pages_zero_filled, before.pages_zero_filled),
            bytes_written_back: d(self.bytes_written_back, before.bytes_written_back),
            evictions: d(self.evictions, before.evictions),
            evicted_overlapped: d(self.evicted_overlapped, before.evicted_overlapped),
            evicted_with_block: d(self.evicted_with_block, before.evicted_with_block),
            block_back_soon: d(self.block_back_soon, before.block_back_soon),
            protect_calls: d(self.protect_calls, before.protect_calls),
            protect_lone: d(self.protect_lone, before.protect_lone),
            protect_hole: d(self.protect_hole, before.protect_hole),
            unmap_calls: d(self.unmap_calls, before.unmap_calls),
            recycled_out: d(self.recycled_out, before.recycled_out),
            recycled_in: d(self.recycled_in, before.recycled_in),
            move_out_calls: d(self.move_out_calls, before.move_out_calls),
            move_in_calls: d(self.move_in_calls, before.move_in_calls),
            moves_misreported: d(self.moves_misreported, before.moves_misreported),
            prefetched: d(self.prefetched, before.prefetched),
            prefetch_async: d(self.prefetch_async, before.prefetch_async),
            streams_caught: d(self.streams_caught, before.streams_caught),
            wp_ahead: d(self.wp_ahead, before.wp_ahead),
            prefetch_used: d(self.prefetch_used, before.prefetch_used),
            prefetch_wasted: d(self.prefetch_wasted, before.prefetch_wasted),
            held: d(self.held, before.held),
            hold_reused: d(self.hold_reused, before.hold_reused),
            io_pins: d(self.io_pins, before.io_pins),
            spurious_faults: d(self.spurious_faults, before.spurious_faults),
            pin_waits: d(self.pin_waits, before.pin_waits),
            promoted: d(self.promoted, before.promoted),
            displaced: d(self.displaced, before.displaced),
            gathered: d(self.gathered, before.gathered),
            kept_dirty: d(self.kept_dirty, before.kept_dirty),
            phase_ns: std::array::from_fn(|i| d(self.phase_ns[i], before.phase_ns[i])),
            ..*self
        }
    }

    /// Where the time went, per page moved: each phase's own time, per page
    /// brought in for the incoming phases and per page evicted for the
    /// outgoing ones. Empty when nothing was timed (`FARMEM_BREAKDOWN` off).
    pub fn render_breakdown(&self) -> String {
        let total: u64 = self.phase_ns.iter().sum();
        if total == 0 {
            return String::new();
        }
        let (pin, pout) = (self.pages_in(), self.evictions);
        let mut t = format!(
            "  where the time went (FARMEM_BREAKDOWN): {pin} pages in, {pout} out, {} faults\n    {:<24} {:>12} {:>10}\n",
            self.faults, "part", "total ms", "ns/page"
        );
        for ph in Phase::ALL {
            let ns = self.phase_ns[ph as usize];
            let per = if ph.outgoing() { pout } else { pin };
            let per_page = if per == 0 {
                0.0
            } else {
                ns as f64 / per as f64
            };
            t.push_str(&format!(
                "    {:<24} {:>12.1} {:>10.0}\n",
                ph.name(),
                ns as f64 / 1e6,
                per_page
            ));
        }
        let moved = pin.max(pout).max(1);
        t.push_str(&format!(
            "    {:<24} {:>12.1} {:>10.0}  (per page in or out, the larger)\n",
            "all of farmem",
            total as f64 / 1e6,
            total as f64 / moved as f64
        ));
        t
    }

    /// A short human table.
    pub fn render(&self) -> String {
        use crate::config::format_size as sz;
        let us = |ns: u64| format!("{:.1} µs", ns as f64 / 1000.0);
        let breakdown = self.render_breakdown();
        format!(
            "farmem stats\n\
             \x20 faults (missing / first write) {:>12} / {} (+{} made writable ahead)\n\
             \x20 fetched from backend           {:>12}\n\
             \x20 zero-filled pages              {:>12}\n\
             \x20 written back                   {:>12}\n\
             \x20 evicted pages                  {:>12} ({} while a fetch was on the wire, {} with a block, {} of them back soon)\n\
             \x20 eviction calls (protect / unmap){:>11} / {} ({} protects of a single page, {} of them holes between dirty pages)\n\
             \x20 recycled pages (out / in)      {:>12} / {} ({} / {} moves, {} misreported by the kernel)\n\
             \x20 prefetched (used / wasted)     {:>12} ({} / {})\n\
             \x20 of which pipelined            {:>12} (streams caught by eviction: {})\n\
             \x20 held / reused from the hold    {:>12} / {}\n\
             \x20 spurious faults                {:>12}\n\
             \x20 protected (in / displ. / gath.){:>12} / {} / {} ({} dirty pages kept)\n\
             \x20 resident / budget              {:>12} / {}\n\
             \x20 fault latency p50/p90/p99/max  {:>12} / {} / {} / {}\n{breakdown}",
            self.faults,
            self.wp_faults,
            self.wp_ahead,
            sz(self.bytes_fetched),
            self.pages_zero_filled,
            sz(self.bytes_written_back),
            self.evictions,
            self.evicted_overlapped,
            self.evicted_with_block,
            self.block_back_soon,
            self.protect_calls,
            self.unmap_calls,
            self.protect_lone,
            self.protect_hole,
            self.recycled_out,
            self.recycled_in,
            self.move_out_calls,
            self.move_in_calls,
            self.moves_misreported,
            self.prefetched,
            self.prefetch_used,
            self.prefetch_wasted,
            self.prefetch_async,
            self.streams_caught,
            self.held,
            self.hold_reused,
            self.spurious_faults,
            self.promoted,
            self.displaced,
            self.gathered,
            self.kept_dirty,
            sz(self.resident_bytes),
            sz(self.budget_bytes),
            us(self.fault_p50_ns),
            us(self.fault_p90_ns),
            us(self.fault_p99_ns),
            us(self.fault_max_ns),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_within_a_bucket() {
        let h = Histogram::default();
        for v in 1..=1000u64 {
            h.record(v * 100);
        }
        let p50 = h.quantile(0.5) as f64;
        assert!((p50 - 50_000.0).abs() / 50_000.0 < 0.26, "{p50}");
        let p99 = h.quantile(0.99) as f64;
        assert!((p99 - 99_000.0).abs() / 99_000.0 < 0.26, "{p99}");
        assert_eq!(Histogram::default().quantile(0.5), 0);
    }

    /// Threads record into their own copies (more threads than copies
    /// here); a reading sums them all, and a reset clears them all.
    #[test]
    fn a_histogram_recorded_by_many_threads_reads_as_one() {
        let h = Histogram::default();
        std::thread::scope(|s| {
            for t in 0..(2 * HIST_STRIPES as u64 + 3) {
                let h = &h;
                s.spawn(move || {
                    for v in 0..1000u64 {
                        h.record(1000 * (t + 1) + v);
                    }
                });
            }
        });
        let n = (2 * HIST_STRIPES as u64 + 3) * 1000;
        assert_eq!(h.count(), n);
        assert_eq!(h.counts().iter().sum::<u64>(), n);
        // Threads 1..=19 recorded 1,000..20,000 ns: the median is near 10,000.
        let p50 = h.quantile(0.5) as f64;
        assert!((p50 - 10_500.0).abs() / 10_500.0 < 0.3, "{p50}");
        assert!(
            h.stripes
                .iter()
                .filter(|s| s.0.iter().any(|b| b.load(Relaxed) > 0))
                .count()
                > 1
        );
        h.reset();
        assert_eq!(h.count(), 0);
    }

    #[test]
    fn bucket_edges_are_monotonic() {
        for b in 1..BUCKETS - 1 {
            assert!(bucket_high(b) < bucket_high(b + 1));
        }
        for ns in [0u64, 1, 3, 4, 5, 7, 8, 100, 1 << 20, u64::MAX / 4] {
            assert!(bucket_high(bucket_of(ns)) >= ns);
        }
    }
}
