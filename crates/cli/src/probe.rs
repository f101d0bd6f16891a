//! `farmem probe`: the memory ladder, from L1 to another machine's RAM.

use crate::output::Output;
use crate::progress::Bars;
use anyhow::Result;
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use farmem_probe::chase::PageMode;
use farmem_probe::machine::Machine;
use farmem_probe::suite::{self, Params, What};
use std::path::PathBuf;

fn what_parser() -> impl TypedValueParser<Value = What> {
    let values = What::ALL.map(|w| PossibleValue::new(w.name()).help(w.help()));
    PossibleValuesParser::new(values).map(|s| s.parse::<What>().expect("one of the listed names"))
}

#[derive(clap::Args)]
pub struct Args {
    /// What to measure.
    #[arg(value_parser = what_parser(), default_value = "all")]
    what: What,
    /// Largest working set of the latency sweep.
    #[arg(long, default_value = "1G", value_parser = crate::size_arg)]
    max: u64,
    /// Pages for latency and bandwidth buffers: 4k, thp or huge.
    #[arg(long, default_value = "4k")]
    pages: PageMode,
    /// Thread counts for bandwidth, e.g. 1,2 (default: 1 and every CPU).
    #[arg(long, value_delimiter = ',')]
    threads: Vec<usize>,
    /// Memory servers to measure, host:port,... or @DIR (a rendezvous
    /// directory); default: the embedded loopback server. Given more than
    /// once, each set is a far tier of its own (e.g. 1, 2 and 4 servers
    /// side by side on one plot).
    #[arg(long)]
    servers: Vec<String>,
    /// SSD file to measure as a far tier (default for `all`: /var/tmp).
    #[arg(long)]
    file: Option<PathBuf>,
    /// Fewer repeats and smaller sizes (a smoke run).
    #[arg(long)]
    quick: bool,
    /// The figure: latency against working set, and far throughput against
    /// transfer size (with `loaded`: latency against bandwidth drawn).
    #[command(flatten)]
    out: Output,
    /// Traffic mixes for `loaded`, R:W with -nt for non-temporal stores
    /// (default: 1:0,3:1,2:1,1:1,3:1-nt,2:1-nt,1:1-nt).
    #[arg(long, value_delimiter = ',')]
    mix: Vec<farmem_probe::loaded::Mix>,
    /// Also write everything measured as one HTML page (`farmem report`).
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
}

pub fn run(a: Args) -> Result<()> {
    a.out.check()?;
    let machine = Machine::detect();
    let p = Params {
        what: a.what,
        max: a.max,
        pages: a.pages,
        threads: a.threads.clone(),
        servers: a.servers.clone(),
        file: a.file.clone(),
        quick: a.quick,
        mixes: a.mix.clone(),
    };
    let r = suite::run(&p, &machine, &mut Bars::default())?;
    a.out
        .figure(|p| farmem_report::probe::figure::write(p, &r))?;
    if let Some(path) = &a.report {
        // Through the JSON, as `farmem report` reads it.
        let d = farmem_report::Doc::from_value(serde_json::to_value(&r)?)?;
        farmem_report::html::write_html(&[(PathBuf::from("farmem probe"), d)], path)?;
        eprintln!("farmem report: wrote {}", path.display());
    }
    a.out.print(
        &r,
        || farmem_report::probe::csv(&r),
        || farmem_report::probe::text(&r),
    )
}
