//! The hold (`FARMEM_HOLD`) at a budget whose eviction rounds are larger
//! than one recycling of the hold takes (128 victims against 64): every
//! victim from probation still goes through the hold, the pages held
//! longest making room. In a process of its own, for its budget.

#[allow(dead_code)]
mod common;
use common::{Region, PAGE};
use farmem_runtime::Runtime;
use std::sync::atomic::Ordering;

/// 16,384 pages, a tenth of them the hold: rounds of 128 victims.
const BUDGET: usize = 64 << 20;

fn rt() -> &'static Runtime {
    common::runtime(|| format!("local={BUDGET} arena=1G hold=10"))
}

/// A first sweep over three times the budget: its pages are all first
/// touches (probation's), so each victim enters the hold, and the pages
/// leaving for good are those the hold held longest. Were a round's victims
/// beyond one recycling's 64 sent away at once, fewer pages would have
/// been held than left for good.
#[test]
fn large_rounds_still_go_through_the_hold() {
    let pages = 3 * BUDGET / PAGE;
    let r = Region::new(rt(), pages * PAGE);
    for p in 0..pages {
        r.word(p * PAGE / 8).store(p as u64 + 1, Ordering::Relaxed);
    }
    let before = rt().snapshot();
    let mut sum = 0u64;
    for p in 0..pages {
        sum += r.word(p * PAGE / 8).load(Ordering::Relaxed);
    }
    let d = rt().snapshot().since(&before);
    assert_eq!(sum, (1..=pages as u64).sum::<u64>());
    assert!(d.evictions > pages as u64 / 2, "{d:?}");
    assert!(
        d.held >= d.evictions,
        "{} pages held, {} evicted for good: {d:?}",
        d.held,
        d.evictions
    );
}
