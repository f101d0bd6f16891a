//! `farmem trace`: read a policy trace (`farmem run --trace FILE`): what
//! prefetch brought and wasted, by reason, and the pages fetched against
//! Belady's MIN at the same budget, with farmem's policy replayed beside it.

use anyhow::{bail, Context, Result};
use farmem_runtime::config::{format_size, parse_size};
use farmem_runtime::trace::{self, Why};
use farmem_sim::{self as sim, Refs, Summary};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The trace of the run to explain.
    file: PathBuf,
    /// The program's page reference string: a trace of the same program on
    /// the same input recorded with prefetch off at the smallest budget
    /// (`FARMEM_PREFETCH=0 farmem run --local 1M --trace REFS -- ...`). Its
    /// faults are every reference but those to the last few hundred pages
    /// touched. Without it, MIN is not computed.
    #[arg(long)]
    refs: Option<PathBuf>,
    /// The budget for MIN and the replay (default: the traced run's).
    #[arg(long, value_parser = parse_budget)]
    budget: Option<u64>,
}

fn parse_budget(s: &str) -> Result<u64, String> {
    let b = parse_size(s)?;
    if b < 4096 {
        return Err("the budget must be at least one page (4K)".into());
    }
    Ok(b / 4096)
}

fn pct(a: u64, b: u64) -> String {
    if b == 0 {
        "-".into()
    } else {
        format!("{:.0}%", 100.0 * a as f64 / b as f64)
    }
}

fn pages(n: u64) -> String {
    format!("{n} ({})", format_size(n * 4096))
}

pub fn run(a: Args) -> Result<()> {
    let (h, records) =
        trace::read(&a.file).with_context(|| format!("reading {}", a.file.display()))?;
    let s = Summary::of(&records);
    let prefetched = s.prefetched_total();
    println!(
        "{}: budget {} (hold {}%), prefetch window {} pages, {} records",
        a.file.display(),
        format_size(h.budget_pages * 4096),
        h.hold_percent,
        h.prefetch_pages,
        records.len()
    );
    println!("  demand faults                {}", s.faults);
    println!(
        "  write hits, prefetch waits   {} / {}",
        s.write_hits, s.prefetch_waits
    );
    let fetched = s.faults - s.from_hold + prefetched;
    println!("  brought in (fetched or zero) {}", pages(fetched));
    println!("  of the faults, from the hold {}", s.from_hold);
    println!("  prefetched                   {}", pages(prefetched));
    for (i, name) in Why::NAMES.iter().enumerate() {
        if s.prefetched[i] > 0 {
            println!(
                "    {name:<12} {:>12}  wasted {:>10} ({})",
                s.prefetched[i],
                s.wasted_by_why[i],
                pct(s.wasted_by_why[i], s.prefetched[i])
            );
        }
    }
    println!(
        "  prefetched used / wasted     {} / {} ({} of prefetched pages wasted)",
        s.prefetch_used,
        s.wasted,
        pct(s.wasted, prefetched)
    );
    println!(
        "  evicted, written back        {} / {}",
        s.evicted, s.written_back
    );
    let Some(refs_path) = &a.refs else {
        println!("  (MIN needs the reference string: pass --refs, see --help)");
        return Ok(());
    };
    let (rh, rrec) =
        trace::read(refs_path).with_context(|| format!("reading {}", refs_path.display()))?;
    if rh.prefetch_pages > 1 {
        bail!(
            "{} was recorded with prefetch on (window {}): its faults are not the reference string; record it with FARMEM_PREFETCH=0",
            refs_path.display(),
            rh.prefetch_pages
        );
    }
    let refs = Refs::from_records(&rrec);
    let budget = a.budget.unwrap_or(h.budget_pages);
    let b = farmem_sys::usize_from(budget);
    let min = sim::min_fetches(&refs, b);
    let replay = sim::replay(&refs, b, sim::Settings::of(&h));
    let ratio = |x: u64| {
        if min == 0 {
            "-".into()
        } else {
            format!("{:.2}x", x as f64 / min as f64)
        }
    };
    println!(
        "reference string {}: {} references to {} pages (recorded at a budget of {}: references to the last pages touched are hidden; MIN hits them anyway at this budget)",
        refs_path.display(),
        refs.len(),
        refs.distinct,
        format_size(rh.budget_pages * 4096)
    );
    println!("  at a budget of {}:", format_size(budget * 4096));
    println!("  Belady's MIN fetches         {}", pages(min));
    if a.file == *refs_path {
        println!("  (the run and the reference string are one trace)");
    }
    println!(
        "  this run brought in          {}  = {} MIN",
        pages(fetched),
        ratio(fetched)
    );
    println!(
        "  farmem's policy, replayed    {}  = {} MIN  (prefetched {}, wasted {}, reused from the hold {})",
        pages(replay.fetched),
        ratio(replay.fetched),
        replay.prefetched,
        pct(replay.prefetch_wasted, replay.prefetched),
        replay.hold_reused
    );
    println!(
        "  runs fetched, replayed       {} ({:.1} pages a run: each run costs a request, an install and an unmap)",
        replay.runs,
        replay.fetched as f64 / replay.runs.max(1) as f64
    );
    Ok(())
}
