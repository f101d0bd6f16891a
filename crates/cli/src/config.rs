//! `farmem config`: the `FARMEM_*` settings this environment gives, validated
//! as the runtime will read them, or the documented table of all of them.

use anyhow::Result;
use farmem_runtime::config::{options_markdown, Config};

#[derive(clap::Args)]
pub struct Args {
    /// Print the table of every setting, its default and meaning (the one in
    /// docs/configuration.md) instead of this environment's values.
    #[arg(long)]
    markdown: bool,
}

pub fn run(a: Args) -> Result<()> {
    if a.markdown {
        print!("{}", options_markdown());
        return Ok(());
    }
    let cfg = Config::from_env()?;
    let set: Vec<String> = std::env::vars()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with("FARMEM_"))
        .collect();
    for (key, value) in cfg.values() {
        let name = format!("FARMEM_{key}");
        let from = if set.contains(&name) {
            "environment"
        } else {
            "default"
        };
        println!("{name:<26} {value:<24} ({from})");
    }
    Ok(())
}
