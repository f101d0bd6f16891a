//! The least far traffic any replacement policy must move in a built-in
//! workload's timed region at a budget, and the far tier's bandwidth
//! ceiling that turns it into the least time.

use crate::workload::{Options, Workload};
use crate::{field, BenchError};
use serde::{Deserialize, Serialize};

/// The far tier's bandwidth ceiling: `farmem probe far`'s throughput with
/// 4 MiB transfers (pipelined) against the embedded server, which is where
/// `farmem run` keeps pages in this harness.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Ceiling {
    pub read_mbps: f64,
    pub write_mbps: f64,
    pub transfer_bytes: u64,
}

impl Ceiling {
    pub fn measure(quick: bool) -> Result<Ceiling, BenchError> {
        use farmem_runtime::backend::RemoteBackend;
        use farmem_runtime::config::Config;
        let err = |e: &dyn std::fmt::Display| BenchError::Ceiling(e.to_string());
        let cfg = Config::from_env().map_err(|e| err(&e))?;
        let set: usize = if quick { 16 << 20 } else { 64 << 20 };
        let server =
            farmem_runtime::spawn_embedded_server(cfg.embedded_capacity()).map_err(|e| err(&e))?;
        let remote = RemoteBackend::connect(
            &cfg,
            std::slice::from_ref(&server.addr),
            (set / farmem_sys::PAGE_SIZE) as u64,
        )
        .map_err(|e| err(&e))?;
        let t = farmem_probe::far::ceiling(&remote, set, set).map_err(|e| err(&e))?;
        Ok(Ceiling {
            read_mbps: t.read_mbps,
            write_mbps: t.write_mbps,
            transfer_bytes: t.transfer_bytes,
        })
    }

    /// Seconds to move `b` at this ceiling, one direction after the other
    /// (on one machine the two share the CPU that moves them).
    pub fn seconds(&self, b: &Bound) -> f64 {
        b.fetched as f64 / (self.read_mbps * 1e6) + b.written_back as f64 / (self.write_mbps * 1e6)
    }
}

/// A workload's timed region as rounds that each touch every byte of a
/// working set: the shape a traffic bound needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    /// Rounds in the timed region.
    pub rounds: u64,
    /// Bytes every round touches (reads or writes).
    pub touched: u64,
    /// Of those, bytes never written before the first round (their first
    /// touch needs no fetch).
    pub fresh_first: u64,
    /// Rounds that write, and the bytes each of them writes.
    pub writing_rounds: u64,
    pub dirtied: u64,
}

/// The least far traffic any replacement policy moves over `s` with `budget`
/// bytes resident. Every round touches `touched` bytes and at most `budget`
/// of them can be resident when it starts, so it fetches at least
/// `touched - budget` (the first round less what was never written). Of the
/// `dirtied` bytes a writing round writes, at most `budget` are still
/// resident when it ends, so at least `dirtied - budget` left dirty during
/// that round: each was written back once, in that round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    pub fetched: u64,
    pub written_back: u64,
}

pub fn traffic_bound(s: &Shape, budget: u64) -> Bound {
    if s.rounds == 0 {
        return Bound {
            fetched: 0,
            written_back: 0,
        };
    }
    let per_round = s.touched.saturating_sub(budget);
    let first = s
        .touched
        .saturating_sub(s.fresh_first)
        .saturating_sub(budget);
    Bound {
        fetched: first + (s.rounds - 1) * per_round,
        written_back: s.writing_rounds * s.dirtied.saturating_sub(budget),
    }
}

/// The shape of a built-in workload's timed region at `size`, as `command`
/// runs it (`line`: its result line, for the figures it reports itself).
/// None when the result line lacks a figure the shape needs.
pub fn shape_of(w: Workload, size: u64, o: &Options, line: &str) -> Option<Shape> {
    let num = |k: &str| field(line, k).and_then(|v| v.parse::<u64>().ok());
    // Only allocations of at least `farmem run`'s threshold (1 MiB, the
    // default the harness runs with) are far memory; smaller arrays stay in
    // plain memory and cost no far traffic.
    let far = |bytes: u64| if bytes >= 1 << 20 { bytes } else { 0 };
    match w {
        // The write passes (the first over never-written memory) and a
        // reread; the timed figure is the whole run.
        Workload::Memwrite => Some(Shape {
            rounds: num("passes")? + 1,
            touched: far(size),
            fresh_first: far(size),
            writing_rounds: num("passes")?,
            dirtied: far(size),
        }),
        // Two grids; a round reads one and writes the other: 8 steps, one
        // step per round (naive, spatial) or 4 per round (temporal,
        // wavefront). Only the input grid is written at set-up: the first
        // round's output grid is fresh (calloc'd), and writing it fetches
        // nothing.
        //
        // The blocked variants' buffers count too, where their allocations
        // are far memory (`buffer_bytes` and the block in the line; a line
        // without them counts none: a looser bound, still a bound). Only
        // what every round is sure to touch counts, at the fewest steps a
        // round takes (the last may take fewer than T):
        // - wavefront's one ring: levels 0 to ts-1 keep three planes each,
        //   every round, in the same ring: touched and written every
        //   round, fresh only in the first;
        // - temporal's two buffers a thread: some thread takes the largest
        //   block and writes that many planes of both of its buffers, but
        //   which thread varies (`schedule(dynamic)`), so its buffers may
        //   be fresh in any round: they count as written, never as
        //   fetched.
        // At 4x the buffers are sized to half the budget; without them the
        // bound on writes was as loose again.
        Workload::Stencil7 => {
            let n = num("n")?;
            let plane = n * n * 8;
            let grid = far(n * plane);
            let steps = num("steps")?;
            let blocked = matches!(o.variant(), "temporal" | "wavefront");
            let (rounds, least_steps, t) = if blocked {
                let t = num("T").filter(|&t| t > 0)?;
                let rounds = steps.div_ceil(t);
                (
                    rounds,
                    steps.saturating_sub(rounds.saturating_sub(1) * t),
                    t,
                )
            } else {
                (steps, 0, 0)
            };
            let is_far = |bytes: Option<u64>| bytes.is_some_and(|b| far(b) > 0);
            let (ring, pair) = match o.variant() {
                "wavefront" if is_far(num("buffer_bytes")) => (least_steps * n.min(3) * plane, 0),
                "temporal" => match num("block") {
                    Some(block) if block > 0 && is_far(Some((block + 2 * t) * plane)) => {
                        (0, 2 * largest_block(n, block, least_steps) * plane)
                    }
                    _ => (0, 0),
                },
                _ => (0, 0),
            };
            Some(Shape {
                rounds,
                touched: 2 * grid + ring,
                fresh_first: grid + ring,
                writing_rounds: rounds,
                dirtied: grid + ring + pair,
            })
        }
        // 14 arrays touched every iteration; p and wrk2 written.
        Workload::Himeno => {
            let (i, j, k) = field(line, "grid").and_then(|g| {
                let mut it = g.split('x').map(|v| v.parse::<u64>().ok());
                Some((it.next()??, it.next()??, it.next()??))
            })?;
            let array = far(i * j * k * 4);
            Some(Shape {
                rounds: num("iterations")?,
                touched: 14 * array,
                fresh_first: 0,
                writing_rounds: num("iterations")?,
                dirtied: 2 * array,
            })
        }
        // Every iteration streams the edges (4 B each) and offsets (8 B a
        // vertex) and touches the per-vertex arrays: rank and contribution
        // (8 B each, rewritten) and out-degree (4 B).
        Workload::Pagerank => {
            let (nv, m) = (num("vertices")?, num("edges")?);
            let rewritten = 2 * far(nv * 8);
            Some(Shape {
                rounds: num("iterations")?,
                touched: rewritten + far(nv * 4) + far((nv + 1) * 8) + far(m * 4),
                fresh_first: 0,
                writing_rounds: num("iterations")?,
                dirtied: rewritten,
            })
        }
        // The first level visits every vertex but the root: its level and
        // offsets, and at least its first in-edge. With in-degrees below
        // 2D (124 bytes), every page of the edges holds some vertex's first
        // edge, so that level touches the whole footprint. Later levels
        // revisit only the vertices not yet reached: one pass is the least
        // (loose). Nothing need be written back.
        Workload::Bfs => {
            let (nv, m) = (num("vertices")?, num("edges")?);
            Some(Shape {
                rounds: 1,
                touched: far(nv * 4) + far((nv + 1) * 8) + far(m * 4),
                fresh_first: 0,
                writing_rounds: 0,
                dirtied: 0,
            })
        }
        // Any sort reads every key, and leaves every page of its array
        // changed: one pass is the least (glibc's merge sort makes several,
        // through a buffer as large again, so this bound is loose).
        Workload::Qsort => {
            let keys = far(num("keys")? * 4);
            Some(Shape {
                rounds: 1,
                touched: keys,
                fresh_first: 0,
                writing_rounds: 1,
                dirtied: keys,
            })
        }
        // Read-only loads along a random chain: every page the timed loads
        // touch (the workload counts them afterwards) that was not resident.
        // Only compulsory misses; reuse misses are not counted, so the
        // bound is loose.
        Workload::Chase => Some(Shape {
            rounds: 1,
            touched: far(size).min(num("pages_touched")? * 4096),
            fresh_first: 0,
            writing_rounds: 0,
            dirtied: 0,
        }),
    }
}

/// Planes in the largest of stencil7's temporal blocks, `block` planes of
/// an `n`-plane grid each, with `ts` halo planes a side clamped at the
/// grid's faces (as `temporal()` copies them into its buffers).
fn largest_block(n: u64, block: u64, ts: u64) -> u64 {
    (0..n)
        .step_by(usize::try_from(block.max(1)).unwrap_or(usize::MAX))
        .map(|z0| (z0 + block + ts).min(n) - z0.saturating_sub(ts))
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-computed cases: a loop of 8 pages over 3 rounds with 2 pages
    /// resident must fetch 6 a round (rounds after a first that finds its
    /// pages fresh), and a working set that fits moves nothing.
    #[test]
    fn traffic_bound_by_hand() {
        let page = 4096;
        let memwrite = Shape {
            rounds: 4,
            touched: 8 * page,
            fresh_first: 8 * page,
            writing_rounds: 3,
            dirtied: 8 * page,
        };
        // Pass 1 fills fresh pages; passes 2, 3 and the reread each fetch
        // the 6 pages that could not stay; passes 1-3 each leave 6 dirty
        // pages that the next round reads.
        assert_eq!(
            traffic_bound(&memwrite, 2 * page),
            Bound {
                fetched: 18 * page,
                written_back: 18 * page
            }
        );
        // Everything fits: nothing moves.
        assert_eq!(
            traffic_bound(&memwrite, 8 * page),
            Bound {
                fetched: 0,
                written_back: 0
            }
        );
        // Two grids of 4 pages, 2 rounds, both written before: each round
        // fetches 8 - 3, and writes back 4 - 3 of its 4-page output (only 3
        // pages can still be resident when it ends).
        let stencil = Shape {
            rounds: 2,
            touched: 8 * page,
            fresh_first: 0,
            writing_rounds: 2,
            dirtied: 4 * page,
        };
        assert_eq!(
            traffic_bound(&stencil, 3 * page),
            Bound {
                fetched: 10 * page,
                written_back: 2 * page
            }
        );
    }

    fn args(v: &[&str]) -> Options {
        Options {
            variant: v
                .iter()
                .position(|&a| a == "--variant")
                .map(|i| v[i + 1].to_string()),
            ..Options::default()
        }
    }

    /// The shapes added last, by hand, with 4 KiB pages.
    #[test]
    fn qsort_chase_bfs_and_stencil_shapes_by_hand() {
        let page = 4096u64;
        let bound = |w: Workload, size: u64, a: &[&str], line: &str, budget: u64| {
            traffic_bound(&shape_of(w, size, &args(a), line).unwrap(), budget * page)
        };
        // qsort: 1,000 pages of keys, 250 resident: 750 must come back in,
        // and 750 changed pages must go out.
        assert_eq!(
            bound(Workload::Qsort, 0, &["qsort"], "result keys=1024000", 250),
            Bound {
                fetched: 750 * page,
                written_back: 750 * page
            }
        );
        // chase: 300 pages touched, 100 resident: 200 fetched, none written.
        assert_eq!(
            bound(
                Workload::Chase,
                64 << 20,
                &["chase"],
                "result pages_touched=300",
                100
            ),
            Bound {
                fetched: 200 * page,
                written_back: 0
            }
        );
        // bfs: 262,144 vertices, 4,194,304 edges: levels 1 MiB, offsets
        // 2 MiB and 8 bytes, edges 16 MiB; 300 pages resident. (Arrays
        // under 1 MiB would not be far memory, and would not count.)
        let nv = 262_144u64;
        let line = format!("result vertices={nv} edges=4194304");
        let all = nv * 4 + (nv + 1) * 8 + 4_194_304 * 4;
        assert_eq!(
            bound(Workload::Bfs, 0, &["bfs"], &line, 300),
            Bound {
                fetched: all - 300 * page,
                written_back: 0
            }
        );
        // stencil7, 2 grids of n = 64 (512 pages each), 8 steps, T = 4: two
        // rounds. Round 1 writes a fresh grid: 1,024 - 512 - 256 = 256
        // fetched; round 2 fetches 1,024 - 256 = 768. Each round leaves at
        // least 512 - 256 dirty pages behind.
        for v in ["temporal", "wavefront"] {
            assert_eq!(
                bound(
                    Workload::Stencil7,
                    0,
                    &["stencil7", "--variant", v],
                    "result n=64 steps=8 T=4",
                    256
                ),
                Bound {
                    fetched: 1024 * page,
                    written_back: 512 * page
                },
                "{v}"
            );
        }
        // temporal with buffers of 40 planes (block 32 + 2T: 1.25 MiB each,
        // far memory) for 2 threads: both blocks take 36 planes (32 and 4
        // of halo, the other 4 clamped at the grid's face), so a round is
        // sure to write 2 x 36 planes of one thread's buffers (576 pages),
        // fresh or not: the fetches stay 1,024 pages, and each round leaves
        // at least 512 + 576 - 256 dirty pages behind.
        let with_buffers = "result n=64 steps=8 T=4 block=32 buffer_bytes=5242880";
        assert_eq!(
            bound(
                Workload::Stencil7,
                0,
                &["stencil7", "--variant", "temporal"],
                with_buffers,
                256
            ),
            Bound {
                fetched: 1024 * page,
                written_back: 2 * (512 + 576 - 256) * page
            }
        );
        // Blocks of 8 planes make buffers of 16 planes (512 KiB): under
        // farmem run's 1 MiB threshold, plain memory, so they do not count.
        assert_eq!(
            bound(
                Workload::Stencil7,
                0,
                &["stencil7", "--variant", "temporal"],
                "result n=64 steps=8 T=4 block=8 buffer_bytes=2097152",
                256
            ),
            Bound {
                fetched: 1024 * page,
                written_back: 512 * page
            }
        );
        // wavefront at n = 128 (a plane is 32 pages, a grid 4,096): its
        // ring of 3T = 12 planes (1.5 MiB) is far memory, and every round
        // touches all of it, fresh only in round 1. With 1,024 pages
        // resident: round 1 fetches 8,576 - 4,480 - 1,024 = 3,072, round 2
        // 8,576 - 1,024 = 7,552; each round leaves 4,096 + 384 - 1,024
        // dirty pages behind.
        let ring = |steps: u64| format!("result n=128 steps={steps} T=4 buffer_bytes=1572864");
        let wave = ["stencil7", "--variant", "wavefront"];
        assert_eq!(
            bound(Workload::Stencil7, 0, &wave, &ring(8), 1024),
            Bound {
                fetched: (3072 + 7552) * page,
                written_back: 2 * (4096 + 384 - 1024) * page
            }
        );
        // With 6 steps the last round takes 2: only levels 0 and 1 (6
        // planes, 192 pages) are sure to be touched every round.
        assert_eq!(
            bound(Workload::Stencil7, 0, &wave, &ring(6), 1024),
            Bound {
                fetched: (3072 + 8192 + 192 - 1024) * page,
                written_back: 2 * (4096 + 192 - 1024) * page
            }
        );
        // At n = 64 the same ring is 384 KiB: plain memory, not counted.
        assert_eq!(
            bound(
                Workload::Stencil7,
                0,
                &wave,
                "result n=64 steps=8 T=4 buffer_bytes=393216",
                256
            ),
            Bound {
                fetched: 1024 * page,
                written_back: 512 * page
            }
        );
        // The naive sweep allocates none, whatever the line says.
        assert_eq!(
            bound(
                Workload::Stencil7,
                0,
                &["stencil7", "--variant", "naive"],
                with_buffers,
                256
            ),
            Bound {
                fetched: (256 + 7 * 768) * page,
                written_back: 8 * 256 * page
            }
        );
    }

    /// The largest temporal block, halo included, clamped at the faces.
    #[test]
    fn largest_block_by_hand() {
        // 10 planes in blocks of 4, halo 2: [0,4) takes 0..6 (6), [4,8)
        // takes 2..10 (8), [8,10) takes 6..10 (4).
        assert_eq!(largest_block(10, 4, 2), 8);
        // One block covers the grid: the grid itself.
        assert_eq!(largest_block(10, 16, 4), 10);
        assert_eq!(largest_block(0, 4, 2), 0);
    }

    /// The bound is never above what an optimal policy (Belady's MIN) does
    /// on the round-robin trace it describes.
    #[test]
    fn bound_is_below_min_on_cyclic_traces() {
        for (n, b, rounds) in [(8usize, 2usize, 3usize), (10, 7, 4), (5, 5, 2), (12, 1, 3)] {
            let trace: Vec<usize> = (0..rounds).flat_map(|_| 0..n).collect();
            // MIN misses, with the first touch of every page free (fresh).
            let mut resident: Vec<usize> = Vec::new();
            let mut fetched = 0u64;
            for (i, &p) in trace.iter().enumerate() {
                if resident.contains(&p) {
                    continue;
                }
                if i >= n {
                    fetched += 1;
                }
                if resident.len() == b {
                    let next = |q: usize| {
                        trace[i + 1..]
                            .iter()
                            .position(|&x| x == q)
                            .unwrap_or(usize::MAX)
                    };
                    let (k, _) = resident
                        .iter()
                        .enumerate()
                        .max_by_key(|(_, &q)| next(q))
                        .unwrap();
                    resident.remove(k);
                }
                resident.push(p);
            }
            let s = Shape {
                rounds: rounds as u64,
                touched: n as u64,
                fresh_first: n as u64,
                writing_rounds: 0,
                dirtied: 0,
            };
            let bound = traffic_bound(&s, b as u64).fetched;
            assert!(
                bound <= fetched,
                "n={n} b={b}: bound {bound} > MIN {fetched}"
            );
        }
    }
}
