//! `farmem trace`: read a policy trace (`farmem run --trace FILE`): what
//! prefetch brought and wasted, by reason, and the pages fetched against
//! Belady's MIN at the same budget, with LRU (every hit seen) and farmem's
//! policy replayed beside it.

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
    /// touched. A program that sizes itself from the budget must be given
    /// the run's size in both. Without it, MIN is not computed.
    #[arg(long)]
    refs: Option<PathBuf>,
    /// The budget for MIN and the replay (default: the traced run's).
    #[arg(long, value_parser = parse_budget)]
    budget: Option<u64>,
    /// Also break the pages fetched down by range of the arena, SIZE each
    /// (e.g. 8M): references, Belady's MIN, this run and the replay in each
    /// range, so that the arrays a policy loses pages on stand out. The run
    /// and the reference string must place their allocations alike (the
    /// same program on the same input). Needs --refs.
    #[arg(long, value_name = "SIZE", value_parser = parse_range)]
    by_range: Option<u64>,
}

/// Ranges shown at most: past that a table stops being read.
const MAX_RANGES: usize = 256;

fn parse_range(s: &str) -> Result<u64, String> {
    let b = parse_size(s)?;
    if b < 4096 || !b.is_multiple_of(4096) {
        return Err(format!(
            "a range is a whole number of 4K pages (e.g. 8M), not {s}"
        ));
    }
    Ok(b / 4096)
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
    if a.by_range.is_some() && a.refs.is_none() {
        bail!("--by-range compares the run with MIN, which needs the reference string: pass --refs too (see --help)");
    }
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
    println!("  given back by the program    {}", pages(s.released));
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
    let min_by_id = sim::min_fetches_by_page(&refs, b);
    let min: u64 = min_by_id.iter().map(|&c| u64::from(c)).sum();
    let (replay, replay_by_page) = sim::replay_by_page(&refs, b, sim::Settings::of(&h));
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
    if !h.releases || !rh.releases {
        println!("  (a trace made before farmem recorded the pages a program gives back: freed pages stay alive to MIN, LRU and the replay; record it again)");
    }
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
    let lru = sim::lru_fetches(&refs, b);
    println!(
        "  LRU seeing every hit         {}  = {} MIN  (what hardware access bits allow; none reach user space here)",
        pages(lru),
        ratio(lru)
    );
    println!(
        "  farmem's policy, replayed    {}  = {} MIN  (prefetched {}, wasted {}, reused from the hold {}, streams caught by eviction {})",
        pages(replay.fetched),
        ratio(replay.fetched),
        replay.prefetched,
        pct(replay.prefetch_wasted, replay.prefetched),
        replay.hold_reused,
        replay.streams_caught
    );
    println!(
        "  runs fetched, replayed       {} ({:.1} pages a run: each run costs a request, an install and an unmap)",
        replay.runs,
        replay.fetched as f64 / replay.runs.max(1) as f64
    );
    println!(
        "  main pages displaced         {} (each leaves alone: a write-protect call of its own if dirty)",
        replay.displaced
    );
    if let Some(range) = a.by_range {
        let mut rows = Ranges::new(range);
        for &id in &refs.pages {
            rows.row(refs.page_of[id as usize]).references += 1;
        }
        for (&page, &n) in refs.page_of.iter().zip(&min_by_id) {
            rows.row(page).min += u64::from(n);
        }
        for (&page, &n) in &replay_by_page {
            rows.row(page).replayed += n;
        }
        for &r in &records {
            if let Some(page) = brought_in(r) {
                rows.row(page).run += 1;
            }
        }
        rows.print()?;
    }
    Ok(())
}

/// The page a trace record brought in, if it did: a demand fault served by
/// a fetch (or zero-filled), or a prefetch. What "this run brought in"
/// counts, page by page.
fn brought_in(r: u64) -> Option<u64> {
    let (kind, page, detail) = trace::decode(r)?;
    let fault = matches!(kind, trace::Kind::FaultRead | trace::Kind::FaultWrite);
    (fault && detail & trace::FAULT_FROM_HOLD == 0 || kind == trace::Kind::Prefetch).then_some(page)
}

/// An offset in the largest unit that divides it (`1100M`, not `1.1G`):
/// range edges must not be rounded.
fn exact_size(b: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("T", 1 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ];
    match UNITS.iter().find(|&&(_, m)| b >= m && b.is_multiple_of(m)) {
        Some((u, m)) => format!("{}{u}", b / m),
        None => b.to_string(),
    }
}

/// One range's counts.
#[derive(Default)]
struct Row {
    references: u64,
    min: u64,
    run: u64,
    replayed: u64,
}

/// Counts by range of `pages` arena pages.
struct Ranges {
    pages: u64,
    rows: std::collections::BTreeMap<u64, Row>,
}

impl Ranges {
    fn new(pages: u64) -> Ranges {
        Ranges {
            pages,
            rows: std::collections::BTreeMap::new(),
        }
    }

    fn row(&mut self, page: u64) -> &mut Row {
        self.rows.entry(page / self.pages).or_default()
    }

    fn print(&self) -> Result<()> {
        if self.rows.len() > MAX_RANGES {
            bail!(
                "{} ranges of {} hold references or fetches, more than {MAX_RANGES} rows: pass a larger --by-range",
                self.rows.len(),
                format_size(self.pages * 4096)
            );
        }
        let at = |i: u64| exact_size(i * self.pages * 4096);
        println!(
            "  by range of {} (offsets in the arena; pages brought in):",
            format_size(self.pages * 4096)
        );
        println!(
            "    {:<15} {:>12} {:>10} {:>10} {:>10} {:>8}",
            "range", "references", "MIN", "this run", "replayed", "run/MIN"
        );
        let mut excess = 0u64;
        let mut worst: Option<(u64, u64)> = None;
        for (&i, r) in &self.rows {
            let over = r.run.saturating_sub(r.min);
            excess += over;
            if worst.is_none_or(|(_, w)| over > w) {
                worst = Some((i, over));
            }
            let ratio = if r.min == 0 {
                "-".to_string()
            } else {
                format!("{:.2}x", r.run as f64 / r.min as f64)
            };
            println!(
                "    {:<15} {:>12} {:>10} {:>10} {:>10} {:>8}",
                format!("{}-{}", at(i), at(i + 1)),
                r.references,
                r.min,
                r.run,
                r.replayed,
                ratio
            );
        }
        if let Some((i, over)) = worst.filter(|&(_, o)| o > 0) {
            println!(
                "  where the run brought in more than MIN, {excess} pages more; {}-{} holds {over} of them ({})",
                at(i),
                at(i + 1),
                pct(over, excess)
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::exact_size;

    #[test]
    fn range_edges_are_exact() {
        assert_eq!(exact_size(0), "0");
        assert_eq!(exact_size(1100 << 20), "1100M");
        assert_eq!(exact_size(3 << 30), "3G");
        assert_eq!(exact_size(12 << 10), "12K");
        assert_eq!(exact_size((1 << 30) + 4096), "1048580K");
    }
}
