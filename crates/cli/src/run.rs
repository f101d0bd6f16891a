//! `farmem run -- CMD`: run an unmodified program with its large allocations
//! in far memory, through the preloaded shim (libfarmem_preload.so).

use anyhow::{bail, Context, Result};
use farmem_runtime::config::{Config, RunFlag, OPTIONS};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::Command;

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

/// libfarmem_preload.so next to the farmem binary.
fn shim_path() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find the farmem binary's path")?;
    let p = exe.with_file_name("libfarmem_preload.so");
    if !p.exists() {
        bail!(
            "{} is missing; build it with `cargo build --release` (it is installed next to the farmem binary)",
            p.display()
        );
    }
    Ok(p)
}

pub fn run(a: Args) -> Result<()> {
    // The environment first, then the flags on top; all validated here, before
    // the program starts, so a bad value costs one clear line and no run.
    let mut vars: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k.starts_with("FARMEM_"))
        .collect();
    for (k, v) in &a.flags.0 {
        set_var(&mut vars, k, v.clone());
    }
    let parsed = Config::from_vars(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
    // An @DIR rendezvous is waited for here, once; the program gets the
    // servers it found.
    let (cfg, found) = parsed.resolved()?;
    if let Some(found) = found {
        let list: Vec<String> = found.servers.iter().map(|a| a.to_string()).collect();
        eprintln!(
            "farmem: {} servers of job {} from the rendezvous: {}",
            list.len(),
            if found.job.is_empty() {
                "(unnamed)"
            } else {
                &found.job
            },
            list.join(",")
        );
        for why in &found.ignored {
            eprintln!("farmem: rendezvous: passed over {why}");
        }
        set_var(&mut vars, "FARMEM_SERVERS", list.join(","));
    }
    let shim = shim_path()?;

    // Check the servers answer now rather than in the middle of the run.
    let mut _server = None;
    if cfg.file().is_none() {
        if cfg.servers().is_empty() {
            // The embedded server: `farmem serve` in a child process of its
            // own, started the way the runtime starts it for C API programs
            // (it exits when this process does).
            let server = farmem_runtime::spawn_embedded_server(cfg.embedded_capacity())?;
            set_var(&mut vars, "FARMEM_SERVERS", server.addr.to_string());
            _server = Some(server);
        } else {
            farmem_runtime::backend::RemoteBackend::connect(
                &cfg.with("CONNS", "1")?,
                cfg.servers(),
                1,
            )
            .context("checking the memory servers")?;
        }
    }

    // tcmalloc grows its heap with sbrk first, and the brk heap cannot be
    // far memory; told to skip it, tcmalloc maps its heap with mmap, which
    // goes far. Other programs ignore the variable; a user's own setting wins.
    if std::env::var_os("TCMALLOC_SKIP_SBRK").is_none() {
        set_var(&mut vars, "TCMALLOC_SKIP_SBRK", "true".to_string());
    }
    let mut cmd = Command::new(&a.cmd[0]);
    cmd.args(&a.cmd[1..]);
    for (k, v) in &vars {
        cmd.env(k, v);
    }
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(old) if !old.is_empty() => format!("{}:{old}", shim.display()),
        _ => shim.display().to_string(),
    };
    cmd.env("LD_PRELOAD", preload);
    // While the program runs, terminal signals reach it (same process group);
    // farmem itself ignores them so that it can report the program's status.
    // The child gets them reset to default before exec below.
    farmem_sys::signal::ignore(libc::SIGINT);
    farmem_sys::signal::ignore(libc::SIGQUIT);
    // SAFETY: the closure only calls async-signal-safe `signal`.
    unsafe {
        cmd.pre_exec(|| {
            farmem_sys::signal::set_default(libc::SIGINT);
            farmem_sys::signal::set_default(libc::SIGQUIT);
            Ok(())
        });
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => bail!("cannot run {}: {e}", a.cmd[0]),
    };
    // Termination signals sent to farmem (by `kill`, a batch system, a
    // supervisor) go to the program, which then exits and is reported.
    farmem_sys::process::forward_signals(
        child.id() as libc::pid_t,
        &[libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2],
    );
    let status = child.wait().context("waiting for the program")?;
    if let Some(s) = _server {
        s.stop();
    }
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

fn set_var(vars: &mut Vec<(String, String)>, k: &str, v: String) {
    vars.retain(|(n, _)| n != k);
    vars.push((k.to_string(), v));
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
