//! `farmem run -- CMD`: run an unmodified program with its large allocations
//! in far memory, through the preloaded shim (libfarmem_preload.so).

use anyhow::{bail, Context, Result};
use farmem_runtime::config::{RunFlag, OPTIONS};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    flags: Flags,
    /// The program and its arguments.
    #[arg(required = true, last = true)]
    cmd: Vec<String>,
}

/// The settings given as flags, `(FARMEM_* name, value)`: one flag for each
/// entry of the options table that names one (`config::OPTIONS`), so the
/// flags, the environment and docs/configuration.md cannot drift apart.
#[derive(Debug, Default, Clone)]
struct Flags(Vec<(String, String)>);

fn flag_id(f: &RunFlag) -> &'static str {
    f.long.trim_start_matches("--")
}

impl clap::FromArgMatches for Flags {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Flags, clap::Error> {
        let mut set = Vec::new();
        for o in OPTIONS {
            let Some(f) = &o.run_flag else { continue };
            let value = if f.switch {
                m.get_flag(flag_id(f)).then(|| "1".to_string())
            } else {
                m.get_one::<String>(flag_id(f)).cloned()
            };
            set.extend(value.map(|v| (format!("FARMEM_{}", o.key), v)));
        }
        Ok(Flags(set))
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Flags::from_arg_matches(m)?;
        Ok(())
    }
}

impl clap::Args for Flags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        OPTIONS.iter().fold(cmd, |cmd, o| {
            let Some(f) = &o.run_flag else { return cmd };
            let arg = clap::Arg::new(flag_id(f))
                .long(flag_id(f))
                .help(format!("{} (FARMEM_{})", f.help, o.key));
            cmd.arg(if f.switch {
                arg.action(clap::ArgAction::SetTrue)
            } else {
                arg.value_name(o.key)
            })
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Flags::augment_args(cmd)
    }
}

/// libfarmem_preload.so: next to the farmem binary (a build tree), or in
/// `../lib/farmem` from it (the Debian package: `/usr/lib/farmem`).
fn shim_path() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find the farmem binary's path")?;
    let p = crate::installed::beside(&exe, "libfarmem_preload.so");
    if !p.exists() {
        bail!(
            "{} is missing; build it with `cargo build --release` (it is installed next to the farmem binary, or in ../lib/farmem from it)",
            p.display()
        );
    }
    Ok(p)
}

pub fn run(a: Args) -> Result<()> {
    let shim = shim_path()?;
    farmem_launch::check_reachable(&a.cmd[0])?;
    farmem_launch::check_jvm(&a.cmd)?;
    let p = farmem_launch::prepare(std::env::vars(), &a.flags.0, |found| {
        let list: Vec<String> = found.servers.iter().map(|a| a.to_string()).collect();
        let job = if found.job.is_empty() {
            "(unnamed)"
        } else {
            &found.job
        };
        eprintln!(
            "farmem: {} servers of job {job} from the rendezvous: {}",
            list.len(),
            list.join(",")
        );
        for why in &found.ignored {
            eprintln!("farmem: rendezvous: passed over {why}");
        }
    })?;
    let status = p.run(&a.cmd, &shim, std::env::var("LD_PRELOAD").ok())?;
    if let Some(code) = status.code() {
        std::process::exit(code);
    }
    if let Some(sig) = status.signal() {
        // Die the same way, so the caller sees the same status.
        farmem_sys::signal::set_default(sig);
        farmem_sys::signal::raise(sig);
        std::process::exit(128 + sig);
    }
    std::process::exit(1)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    /// Every flag the options table names is a flag of `farmem run`, and
    /// sets its variable.
    #[test]
    fn flags_come_from_the_options_table() {
        let cli = crate::Cli::try_parse_from([
            "farmem",
            "run",
            "--local",
            "64M",
            "--stats",
            "--servers",
            "unix:@x",
            "--",
            "true",
        ])
        .unwrap();
        let crate::Cmd::Run(a) = cli.cmd else {
            panic!("not run")
        };
        let mut set = a.flags.0.clone();
        set.sort();
        let want = [
            ("FARMEM_LOCAL", "64M"),
            ("FARMEM_SERVERS", "unix:@x"),
            ("FARMEM_STATS", "1"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(set, want);
        let with_flag = farmem_runtime::config::OPTIONS
            .iter()
            .filter(|o| o.run_flag.is_some());
        for o in with_flag {
            let f = o.run_flag.unwrap();
            let mut argv = vec!["farmem", "run", f.long];
            if !f.switch {
                argv.push("1");
            }
            argv.extend(["--", "true"]);
            assert!(crate::Cli::try_parse_from(argv).is_ok(), "{}", f.long);
        }
    }
}
