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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// The `farmem run` flags that set a `FARMEM_*` variable are exactly the
    /// ones the options table names.
    #[test]
    fn run_flags_match_the_options_table() {
        let cmd = crate::Cli::command();
        let run = cmd.find_subcommand("run").expect("a run subcommand");
        let mut flags: Vec<String> = run
            .get_arguments()
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .filter(|l| l != "--help")
            .collect();
        flags.sort();
        let mut table: Vec<String> = farmem_runtime::config::OPTIONS
            .iter()
            .filter_map(|o| o.run_flag.map(String::from))
            .collect();
        table.sort();
        assert_eq!(flags, table);
    }
}
