
#[test]
fn tmpx_fractional_figures() {
    use farmem_runtime::trace::{self, Kind};
    for step in [33_800u64, 84_872, 424_360] {
        for back in [false, true] {
            let t: Vec<u64> = (0..2)
                .flat_map(|_| {
                    (0..20_000u64).map(move |k| {
                        let k = if back { 20_000 - k } else { k };
                        BASE * 4096 * 4 + 24 + k * step
                    })
                })
                .collect();
            let recs: Vec<u64> = t
                .iter()
                .map(|&a| {
                    let r = trace::encode(Kind::FaultRead, a / 4096, 0);
                    if CELLS_ON { r | ((a % 4096) / 16) << 40 } else { r }
                })
                .collect();
            let refs = Refs::from_records(&recs);
            let ours = replay(&refs, 2000, set(PREFETCH, HOLD));
            let min = min_fetches(&refs, 2000);
            println!("FIG step {step} back {back}: refs {} faults {} fetched {} min {} waste {:.3}", t.len(), ours.faults, ours.fetched, min, ours.waste());
        }
    }
}
