//! Cache levels found in a latency curve.
//!
//! A level shows as a *plateau*: consecutive working-set sizes whose load
//! latency stays within a tolerance of the plateau's running median. Points
//! between plateaus (a working set that half fits) are transitions and belong
//! to no level. Adjacent plateaus closer than the tolerance are merged, so
//! noise cannot split one level in two.
//!
//! Names come from the machine's own cache sizes (sysfs) where it reports
//! them; the curve confirms and measures. A plateau is the cache level
//! whose reported size its first point fits in; a second plateau of the
//! same level is the same cache (TLB misses step the latency up inside a
//! large cache) unless it is [`BEYOND`] times slower, which no cache is than
//! itself: then the cache was only partly visible (a VM's share of a shared
//! L3: here the step to DRAM comes at 4-6M of a reported 32M) and memory
//! begins. A plateau starting past the last-level cache is memory too.
//! Everything from memory's first plateau on is one level, "DRAM".
//!
//! Without reported sizes, the plateaus are named L1, L2, … in order, and
//! the last one is "DRAM" when there is more than one.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub bytes: u64,
    pub ns: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Level {
    pub name: String,
    /// The largest working set measured on this level's plateau.
    pub bytes: u64,
    /// The plateau's median latency.
    pub ns: f64,
}

/// Latencies within this factor of a plateau's median belong to it.
const TOLERANCE: f64 = 1.22;
/// Plateaus need this many points (transitions are usually one or two).
const MIN_POINTS: usize = 2;

fn med(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    crate::median(&mut s)
}

/// What the machine says about its caches, when it says anything.
#[derive(Debug, Clone, Default)]
pub struct Known {
    /// Data (or unified) cache sizes, L1 first, as the machine reports
    /// them; empty when it does not.
    pub caches: Vec<u64>,
}

/// A plateau this many times slower than the cache level its size names
/// is memory: the cache was only partly visible. (Memory is 5-10x a
/// last-level cache; TLB misses inside a cache add well under 2x.)
pub const BEYOND: f64 = 4.0;

/// Find the levels of `curve` (sorted by bytes).
pub fn detect(curve: &[Point], known: &Known) -> Vec<Level> {
    let merged = plateaus(curve);
    let named = if known.caches.is_empty() {
        by_order(&merged)
    } else {
        by_size(curve, &merged, &known.caches)
    };
    named
        .into_iter()
        .map(|(name, s, e)| Level {
            name,
            bytes: curve[e - 1].bytes,
            ns: med(&curve[s..e].iter().map(|p| p.ns).collect::<Vec<_>>()),
        })
        .collect()
}

fn median_of(curve: &[Point], r: (usize, usize)) -> f64 {
    med(&curve[r.0..r.1].iter().map(|p| p.ns).collect::<Vec<_>>())
}

/// Without sizes: L1, L2, … in order; the last of several is DRAM.
fn by_order(merged: &[(usize, usize)]) -> Vec<(String, usize, usize)> {
    merged
        .iter()
        .enumerate()
        .map(|(k, &(s, e))| {
            let name = if merged.len() > 1 && k == merged.len() - 1 {
                "DRAM".to_string()
            } else {
                format!("L{}", k + 1)
            };
            (name, s, e)
        })
        .collect()
}

/// With the machine's cache sizes: each plateau named by the level its
/// first point fits in, confirmed by its latency (module docs).
fn by_size(
    curve: &[Point],
    merged: &[(usize, usize)],
    caches: &[u64],
) -> Vec<(String, usize, usize)> {
    // (level index, start, end, median ns)
    let mut caches_seen: Vec<(usize, usize, usize, f64)> = Vec::new();
    let mut memory: Option<(usize, usize)> = None;
    for &(s, e) in merged {
        if let Some(m) = memory.as_mut() {
            m.1 = e;
            continue;
        }
        let ns = median_of(curve, (s, e));
        let Some(k) = caches.iter().position(|&size| curve[s].bytes <= size) else {
            memory = Some((s, e));
            continue;
        };
        match caches_seen.last_mut() {
            Some(last) if last.0 == k => {
                if ns >= BEYOND * last.3 {
                    memory = Some((s, e));
                } else {
                    last.2 = e;
                    last.3 = median_of(curve, (last.1, e));
                }
            }
            _ => caches_seen.push((k, s, e, ns)),
        }
    }
    let mut out: Vec<(String, usize, usize)> = caches_seen
        .into_iter()
        .map(|(k, s, e, _)| (format!("L{}", k + 1), s, e))
        .collect();
    if let Some((s, e)) = memory {
        out.push(("DRAM".to_string(), s, e));
    }
    out
}

/// The plateaus of `curve`, `[start, end)` index ranges, neighbours within
/// the tolerance merged.
fn plateaus(curve: &[Point]) -> Vec<(usize, usize)> {
    let mut plateaus: Vec<(usize, usize)> = Vec::new(); // [start, end)
    let mut i = 0;
    while i < curve.len() {
        let mut j = i + 1;
        let mut vals = vec![curve[i].ns];
        while j < curve.len() {
            let m = med(&vals);
            let x = curve[j].ns;
            if x > m * TOLERANCE || x < m / TOLERANCE {
                // One outlier in a long run does not end it if the next point
                // is back in range.
                let back = curve
                    .get(j + 1)
                    .is_some_and(|n| n.ns <= m * TOLERANCE && n.ns >= m / TOLERANCE);
                if back && vals.len() >= 3 {
                    j += 1;
                    continue;
                }
                break;
            }
            vals.push(x);
            j += 1;
        }
        if j - i >= MIN_POINTS {
            plateaus.push((i, j));
        }
        i = j;
    }
    // Merge neighbours that are really one level.
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for p in plateaus {
        if let Some(last) = merged.last_mut() {
            let a = med(&curve[last.0..last.1]
                .iter()
                .map(|p| p.ns)
                .collect::<Vec<_>>());
            let b = med(&curve[p.0..p.1].iter().map(|p| p.ns).collect::<Vec<_>>());
            if b / a < TOLERANCE {
                last.1 = p.1;
                continue;
            }
        }
        merged.push(p);
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Sizes 4K..max in steps of 2 and 1.5, like the real sweep.
    fn sizes(max: u64) -> Vec<u64> {
        let mut v = Vec::new();
        let mut b = 4096u64;
        while b <= max {
            v.push(b);
            if b * 3 / 2 <= max {
                v.push(b * 3 / 2);
            }
            b *= 2;
        }
        v
    }

    /// A machine: (capacity, latency) per level, the last one unbounded.
    /// Between levels the latency blends over one step.
    fn curve(levels: &[(u64, f64)], max: u64, noise: impl Fn(usize) -> f64) -> Vec<Point> {
        sizes(max)
            .into_iter()
            .enumerate()
            .map(|(i, b)| {
                let mut ns = levels.last().unwrap().1;
                for w in 0..levels.len() {
                    let (cap, lat) = levels[w];
                    if b <= cap {
                        ns = lat;
                        break;
                    }
                    if b <= cap * 3 / 2 && w + 1 < levels.len() {
                        ns = (lat + levels[w + 1].1) / 2.0;
                        break;
                    }
                }
                Point {
                    bytes: b,
                    ns: ns * noise(i),
                }
            })
            .collect()
    }

    fn names(l: &[Level]) -> Vec<&str> {
        l.iter().map(|l| l.name.as_str()).collect()
    }

    const SEED001: [(u64, f64); 4] = [
        (32 << 10, 1.6),
        (1 << 20, 7.0),
        (32 << 20, 18.0),
        (u64::MAX, 90.0),
    ];

    /// SEED001's machine as sysfs reports it: 32K, 1M, 32M.
    fn known() -> Known {
        Known {
            caches: vec![32 << 10, 1 << 20, 32 << 20],
        }
    }

    /// SEED001's curve with the points `within` climbing from `ns` by
    /// `rise` ns per 16x from `from` bytes (a level's TLB misses).
    fn sloped(within: impl Fn(u64) -> bool, from: u64, ns: f64, rise: f64) -> Vec<Point> {
        curve(&SEED001, 1 << 30, |_| 1.0)
            .into_iter()
            .map(|p| {
                if within(p.bytes) {
                    let f = (p.bytes as f64 / from as f64).log2() / 4.0;
                    Point {
                        bytes: p.bytes,
                        ns: ns + rise * f,
                    }
                } else {
                    p
                }
            })
            .collect()
    }

    #[test]
    fn clean_four_level_machine() {
        let c = curve(&SEED001, 1 << 30, |_| 1.0);
        let l = detect(&c, &known());
        assert_eq!(names(&l), ["L1", "L2", "L3", "DRAM"]);
        assert!((l[0].ns - 1.6).abs() < 0.01 && (l[3].ns - 90.0).abs() < 0.01);
        assert_eq!(l[0].bytes, 32 << 10);
        assert_eq!(l[1].bytes, 1 << 20);
        assert_eq!(l[2].bytes, 32 << 20);
    }

    #[test]
    fn machine_without_l3() {
        let c = curve(
            &[(64 << 10, 1.2), (2 << 20, 6.0), (u64::MAX, 80.0)],
            512 << 20,
            |_| 1.0,
        );
        let l = detect(
            &c,
            &Known {
                caches: vec![64 << 10, 2 << 20],
            },
        );
        assert_eq!(names(&l), ["L1", "L2", "DRAM"]);
    }

    #[test]
    fn sweep_that_stops_inside_the_llc_names_no_dram() {
        let c = curve(&SEED001, 16 << 20, |_| 1.0);
        let l = detect(&c, &known());
        assert_eq!(names(&l), ["L1", "L2", "L3"]);
    }

    #[test]
    fn a_sloped_dram_is_one_level() {
        // DRAM latency climbing 115 -> 180 ns from 64M to 1G (TLB misses).
        let c = sloped(|b| b >= 64 << 20, 64 << 20, 115.0, 65.0);
        let l = detect(&c, &known());
        assert_eq!(names(&l), ["L1", "L2", "L3", "DRAM"]);
        assert!((l[0].ns - 1.6).abs() < 0.01, "{l:?}");
    }

    #[test]
    fn dram_showing_before_the_llc_size_is_still_dram() {
        // Conflict misses: DRAM latency from 24M although the L3 is 32M.
        let c = curve(
            &[
                (32 << 10, 1.0),
                (1 << 20, 3.2),
                (12 << 20, 12.0),
                (u64::MAX, 150.0),
            ],
            256 << 20,
            |_| 1.0,
        );
        let l = detect(&c, &known());
        assert_eq!(names(&l), ["L1", "L2", "L3", "DRAM"]);
        // A sweep that stops at 64M ends on the L3 plateau only when L3 is
        // larger; here too it must not call the last cache plateau DRAM.
        let c = curve(
            &[(32 << 10, 1.0), (1 << 20, 3.2), (u64::MAX, 12.0)],
            64 << 20,
            |_| 1.0,
        );
        let l = detect(&c, &known());
        assert_eq!(names(&l), ["L1", "L2", "L3"]);
    }

    #[test]
    fn a_single_outlier_does_not_split_a_level() {
        let c = curve(&SEED001, 1 << 30, |i| if i == 20 { 1.6 } else { 1.0 });
        assert_eq!(names(&detect(&c, &known())), ["L1", "L2", "L3", "DRAM"]);
    }

    #[test]
    fn a_sloped_l3_is_one_level_when_the_machine_gives_its_size() {
        // L3 latency climbing 9 -> 14 ns from 2M to 32M (TLB misses).
        let c = sloped(|b| b > (3 << 19) && b <= 32 << 20, 2 << 20, 9.0, 5.0);
        let l = detect(&c, &known());
        assert_eq!(names(&l), ["L1", "L2", "L3", "DRAM"]);
        assert_eq!(l[2].bytes, 32 << 20);
    }

    /// Fourteen real curves from a VM whose shared 32M L3 is only partly
    /// visible (the step to DRAM at 4-8M), as sysfs reports it: every run
    /// gets the same names, each level where the curve puts it.
    #[test]
    fn a_vm_with_a_partly_visible_l3_is_named_the_same_every_run() {
        #[derive(serde::Deserialize)]
        struct Fixture {
            caches: Vec<u64>,
            curves: Vec<Vec<(u64, f64)>>,
        }
        let f: Fixture =
            serde_json::from_str(include_str!("../fixtures/latency-vm-partial-l3.json")).unwrap();
        assert!(f.curves.len() >= 10);
        let known = Known { caches: f.caches };
        for raw in &f.curves {
            let c: Vec<Point> = raw.iter().map(|&(bytes, ns)| Point { bytes, ns }).collect();
            let l = detect(&c, &known);
            assert_eq!(names(&l), ["L1", "L2", "L3", "DRAM"], "{l:?}");
            assert_eq!(l[0].bytes, 48 << 10, "{l:?}");
            assert!(l[0].ns < 1.5 && (2.5..5.0).contains(&l[1].ns), "{l:?}");
            assert!((2 << 20..=8 << 20).contains(&l[2].bytes), "{l:?}");
            assert!((8.0..20.0).contains(&l[2].ns) && l[3].ns > 100.0, "{l:?}");
        }
        // Without the sizes, the same curves are named by order alone.
        let c: Vec<Point> = f.curves[0]
            .iter()
            .map(|&(bytes, ns)| Point { bytes, ns })
            .collect();
        assert_eq!(detect(&c, &Known::default()).last().unwrap().name, "DRAM");
    }

    proptest! {
        /// ±8% noise on every point: still four levels, each latency within
        /// 10% of the truth.
        #[test]
        fn noisy_curves(noise in proptest::collection::vec(0.92f64..1.08, 64)) {
            let c = curve(&SEED001, 1 << 30, |i| noise[i % noise.len()]);
            let l = detect(&c, &known());
            prop_assert_eq!(names(&l), vec!["L1", "L2", "L3", "DRAM"]);
            for (lv, (_, truth)) in l.iter().zip(SEED001.iter()) {
                prop_assert!((lv.ns / truth - 1.0).abs() < 0.10, "{} measured {} truth {}", lv.name, lv.ns, truth);
            }
        }

        /// Any curve: levels come out in increasing size, never empty names,
        /// and never more levels than points / MIN_POINTS.
        #[test]
        fn arbitrary_curves_are_well_formed(ns in proptest::collection::vec(0.5f64..500.0, 1..40)) {
            let c: Vec<Point> = ns.iter().enumerate().map(|(i, &n)| Point { bytes: 4096 << i.min(40), ns: n }).collect();
            let l = detect(&c, &Known::default());
            prop_assert!(l.len() <= c.len() / MIN_POINTS);
            prop_assert!(l.windows(2).all(|w| w[0].bytes < w[1].bytes));
        }
    }
}
