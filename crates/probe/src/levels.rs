//! Cache levels found in a latency curve.
//!
//! A level shows as a *plateau*: consecutive working-set sizes whose load
//! latency stays within a tolerance of the plateau's running median. Points
//! between plateaus (a working set that half fits) are transitions and belong
//! to no level. Adjacent plateaus closer than the tolerance are merged, so
//! noise cannot split one level in two.
//!
//! The plateaus are named L1, L2, … in order. The last one is "DRAM" when it
//! reaches twice the last-level cache's size and starts above half of it, or
//! when that size is unknown; otherwise it is a cache too.

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
#[derive(Debug, Clone, Copy, Default)]
pub struct Known {
    /// Size of the last-level cache: tells a final cache plateau from DRAM.
    pub llc_bytes: Option<u64>,
    /// Number of data cache levels: a curve cannot show more. TLB misses make
    /// latency climb inside a large cache and can split its plateau in two;
    /// the closest neighbours are merged until the count fits.
    pub cache_levels: Option<usize>,
}

/// Find the levels of `curve` (sorted by bytes).
pub fn detect(curve: &[Point], known: Known) -> Vec<Level> {
    let llc_bytes = known.llc_bytes;
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
    // The last plateau is DRAM when it reaches well past the last-level cache
    // (twice its size) and starts above half of it. (Random chasing meets
    // conflict misses, so DRAM latency shows a little before the LLC's
    // size; a sweep that stops inside the LLC never reaches twice it.)
    let last_is_dram = merged.len() > 1
        && llc_bytes.is_none_or(|llc| {
            merged
                .last()
                .is_some_and(|&(s, e)| curve[e - 1].bytes >= 2 * llc && curve[s].bytes > llc / 2)
        });
    if let Some(levels) = known.cache_levels {
        let allowed = levels + last_is_dram as usize;
        let median_of =
            |r: &(usize, usize)| med(&curve[r.0..r.1].iter().map(|p| p.ns).collect::<Vec<_>>());
        // Merge the closest neighbours (smallest latency ratio) until the
        // count fits. DRAM can split too: beyond the LLC, 4 KiB pages add
        // TLB misses as the working set grows.
        while merged.len() > allowed.max(1) {
            let Some(k) = (0..merged.len() - 1).min_by(|&a, &b| {
                let ra = median_of(&merged[a + 1]) / median_of(&merged[a]);
                let rb = median_of(&merged[b + 1]) / median_of(&merged[b]);
                ra.total_cmp(&rb)
            }) else {
                break;
            };
            merged[k].1 = merged[k + 1].1;
            merged.remove(k + 1);
        }
    }
    merged
        .iter()
        .enumerate()
        .map(|(k, &(s, e))| {
            let vals: Vec<f64> = curve[s..e].iter().map(|p| p.ns).collect();
            let name = if last_is_dram && k == merged.len() - 1 {
                "DRAM".to_string()
            } else {
                format!("L{}", k + 1)
            };
            Level {
                name,
                bytes: curve[e - 1].bytes,
                ns: med(&vals),
            }
        })
        .collect()
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

    /// A machine with a 32M last-level cache and `cache_levels` known.
    fn known(cache_levels: Option<usize>) -> Known {
        Known {
            llc_bytes: Some(32 << 20),
            cache_levels,
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
        let l = detect(&c, known(None));
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
            Known {
                llc_bytes: Some(2 << 20),
                cache_levels: None,
            },
        );
        assert_eq!(names(&l), ["L1", "L2", "DRAM"]);
    }

    #[test]
    fn sweep_that_stops_inside_the_llc_names_no_dram() {
        let c = curve(&SEED001, 16 << 20, |_| 1.0);
        let l = detect(&c, known(None));
        assert_eq!(names(&l), ["L1", "L2", "L3"]);
    }

    #[test]
    fn a_sloped_dram_is_one_level() {
        // DRAM latency climbing 115 -> 180 ns from 64M to 1G (TLB misses).
        let c = sloped(|b| b >= 64 << 20, 64 << 20, 115.0, 65.0);
        let l = detect(&c, known(Some(3)));
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
        let l = detect(&c, known(Some(3)));
        assert_eq!(names(&l), ["L1", "L2", "L3", "DRAM"]);
        // A sweep that stops at 64M ends on the L3 plateau only when L3 is
        // larger; here too it must not call the last cache plateau DRAM.
        let c = curve(
            &[(32 << 10, 1.0), (1 << 20, 3.2), (u64::MAX, 12.0)],
            64 << 20,
            |_| 1.0,
        );
        let l = detect(&c, known(Some(3)));
        assert_eq!(names(&l), ["L1", "L2", "L3"]);
    }

    #[test]
    fn a_single_outlier_does_not_split_a_level() {
        let c = curve(&SEED001, 1 << 30, |i| if i == 20 { 1.6 } else { 1.0 });
        assert_eq!(names(&detect(&c, known(None))), ["L1", "L2", "L3", "DRAM"]);
    }

    #[test]
    fn a_sloped_l3_is_one_level_when_the_machine_says_three() {
        // L3 latency climbing 9 -> 14 ns from 2M to 32M (TLB misses).
        let c = sloped(|b| b > (3 << 19) && b <= 32 << 20, 2 << 20, 9.0, 5.0);
        let unknown = detect(&c, known(None));
        assert!(
            unknown.len() > 4,
            "without the hint the slope splits: {unknown:?}"
        );
        let l = detect(&c, known(Some(3)));
        assert_eq!(names(&l), ["L1", "L2", "L3", "DRAM"]);
        assert_eq!(l[2].bytes, 32 << 20);
    }

    proptest! {
        /// ±8% noise on every point: still four levels, each latency within
        /// 10% of the truth.
        #[test]
        fn noisy_curves(noise in proptest::collection::vec(0.92f64..1.08, 64)) {
            let c = curve(&SEED001, 1 << 30, |i| noise[i % noise.len()]);
            let l = detect(&c, known(None));
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
            let l = detect(&c, Known::default());
            prop_assert!(l.len() <= c.len() / MIN_POINTS);
            prop_assert!(l.windows(2).all(|w| w[0].bytes < w[1].bytes));
        }
    }
}
