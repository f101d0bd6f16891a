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
        println!("{name:<26} {:<24} ({from})", readable(&value));
    }
    Ok(())
}

/// A size as people read it, with the exact value beside it when rounded
/// (`12342046K` is `11.8G (12342046K)`); anything else as it is.
fn readable(value: &str) -> String {
    let is_size = value.len() > 1
        && value.ends_with(['K', 'M', 'G', 'T'])
        && value[..value.len() - 1].bytes().all(|b| b.is_ascii_digit());
    match farmem_runtime::config::parse_size(value) {
        Ok(b) if is_size => {
            let shown = farmem_runtime::config::format_size(b);
            if shown == value {
                shown
            } else {
                format!("{shown} ({value})")
            }
        }
        _ => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_read_as_people_read_them() {
        assert_eq!(super::readable("12342046K"), "11.8G (12342046K)");
        assert_eq!(super::readable("256M"), "256M");
        assert_eq!(super::readable("2048M"), "2G (2048M)");
        assert_eq!(super::readable("auto"), "auto");
        assert_eq!(super::readable("120"), "120");
    }
}
