//! `farmem run`: an unmodified program started on far memory through the
//! preloaded shim (`libfarmem_preload.so`).
//!
//! Everything is settled before the program starts, so that a bad value
//! costs one clear line and no run: the settings (this process's `FARMEM_*`
//! variables with the flags on top) are validated, an `@DIR` rendezvous is
//! waited for once (the program gets the servers found), the servers are
//! checked to answer, or the embedded server is started. The program then
//! gets the settings in its environment, the shim preloaded, the terminal's
//! signals, and any termination signal sent to `farmem`.

pub mod outside;

use farmem_runtime::config::Config;
use farmem_runtime::jvm::{jvm_env_options, jvm_uses_zgc, ZGC_REFUSED};
use farmem_runtime::{EmbeddedServer, RuntimeError};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus};

/// A program's far-memory setting-up, done: what it will be given.
#[derive(Debug)]
pub struct Prepared {
    /// Variables for the program, `FARMEM_*` and the allocator hints.
    pub vars: Vec<(String, String)>,
    /// The rendezvous's result, when the servers came from one.
    pub found: Option<farmem_rendezvous::Found>,
    server: Option<EmbeddedServer>,
    /// The settings, resolved.
    cfg: Config,
}

fn set(vars: &mut Vec<(String, String)>, k: &str, v: String) {
    vars.retain(|(n, _)| n != k);
    vars.push((k.to_string(), v));
}

/// Settle the settings `env` (this process's variables; only `FARMEM_*`
/// and `TCMALLOC_SKIP_SBRK` are read) with `flags` (`FARMEM_*` name and
/// value) on top, as described in the module's comment. `found` hears
/// what a rendezvous found before the servers are checked.
pub fn prepare(
    env: impl Iterator<Item = (String, String)>,
    flags: &[(String, String)],
    found: impl FnOnce(&farmem_rendezvous::Found),
) -> Result<Prepared, LaunchError> {
    let mut vars = Vec::new();
    let mut skip_sbrk_set = false;
    for (k, v) in env {
        skip_sbrk_set |= k == "TCMALLOC_SKIP_SBRK";
        if k.starts_with("FARMEM_") {
            vars.push((k, v));
        }
    }
    for (k, v) in flags {
        set(&mut vars, k, v.clone());
    }
    let parsed = Config::from_vars(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map_err(RuntimeError::from)?;
    let (cfg, rendezvous) = parsed.resolved().map_err(RuntimeError::from)?;
    if let Some(f) = &rendezvous {
        found(f);
        let list: Vec<String> = f.servers.iter().map(ToString::to_string).collect();
        set(&mut vars, "FARMEM_SERVERS", list.join(","));
    }
    if let Some(t) = cfg.trace() {
        // Said now, not at the program's first far allocation. "%p" is the
        // pid of each process that writes one.
        let t = farmem_runtime::trace::path_for(t, std::process::id());
        let existed = t.exists();
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&t)
            .map_err(|e| RuntimeError::Trace(t.clone(), e))?;
        if !existed {
            let _ = std::fs::remove_file(&t);
        }
    }
    let mut server = None;
    if cfg.file().is_none() {
        if cfg.servers().is_empty() {
            // `farmem serve` in a child process of its own, started the way
            // the runtime starts it for C API programs (it exits when this
            // process does).
            let s = farmem_runtime::spawn_embedded_server(cfg.embedded_capacity())?;
            set(&mut vars, "FARMEM_SERVERS", s.addr.to_string());
            server = Some(s);
        } else {
            // The servers answer now rather than in the middle of the run.
            let one = cfg.with("CONNS", "1").map_err(RuntimeError::from)?;
            farmem_runtime::backend::RemoteBackend::connect(&one, cfg.servers(), 1)
                .map_err(LaunchError::Servers)?;
        }
    }
    // tcmalloc grows its heap with sbrk first, and the brk heap cannot be
    // far memory; told to skip it, tcmalloc maps its heap with mmap, which
    // goes far. Other programs ignore the variable; a user's own setting wins.
    if !skip_sbrk_set {
        set(&mut vars, "TCMALLOC_SKIP_SBRK", "true".into());
    }
    Ok(Prepared {
        vars,
        found: rendezvous,
        server,
        cfg,
    })
}

/// Why the program could not be started, or run to its end.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// A setting refused, a rendezvous not met, the embedded server not
    /// started.
    #[error(transparent)]
    Settings(#[from] RuntimeError),
    #[error("checking the memory servers: {0}")]
    Servers(farmem_runtime::backend::BackendError),
    #[error("cannot run {cmd}: {source}")]
    Spawn { cmd: String, source: std::io::Error },
    #[error("waiting for the program: {0}")]
    Wait(std::io::Error),
    #[error("{0} is statically linked: farmem reaches a program's memory through the dynamic loader (LD_PRELOAD), which a static binary never runs, so none of it would go far; build it dynamically linked (Go: CGO_ENABLED=1 and -ldflags=-linkmode=external), or run it without farmem run")]
    Static(String),
    #[error("{0}")]
    Collector(&'static str),
}

/// Refuse a program `farmem run` cannot reach: an ELF executable with no
/// program interpreter (statically linked, static-pie included). Scripts,
/// dynamically linked programs and anything unreadable here pass (the
/// exec reports what is wrong with those).
pub fn check_reachable(program: &str) -> Result<(), LaunchError> {
    let path = if program.contains('/') {
        Some(std::path::PathBuf::from(program))
    } else {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(program))
                .find(|p| p.is_file())
        })
    };
    let Some(path) = path else { return Ok(()) };
    let Ok(head) = read_head(&path) else {
        return Ok(());
    };
    if elf_is_static(&head) == Some(true) {
        return Err(LaunchError::Static(path.display().to_string()));
    }
    Ok(())
}

/// Refuse a JVM set to use a collector farmem cannot page (see
/// [`ZGC_REFUSED`]). `cmd` is the program and its arguments.
pub fn check_jvm(cmd: &[String]) -> Result<(), LaunchError> {
    let is_java = cmd
        .first()
        .and_then(|c| Path::new(c).file_name())
        .is_some_and(|n| n == "java");
    if is_java && jvm_uses_zgc(cmd[1..].iter().map(String::as_str), &jvm_env_options()) {
        return Err(LaunchError::Collector(ZGC_REFUSED));
    }
    Ok(())
}

/// The ELF header and program headers (the first 64 KiB hold them).
fn read_head(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::with_capacity(64 << 10);
    std::fs::File::open(path)?
        .take(64 << 10)
        .read_to_end(&mut buf)?;
    Ok(buf)
}

/// Whether a 64-bit little-endian ELF executable has no `PT_INTERP`;
/// None when `head` is not one (a script, another format).
pub fn elf_is_static(head: &[u8]) -> Option<bool> {
    const PT_INTERP: u32 = 3;
    const ET_EXEC: u16 = 2;
    const ET_DYN: u16 = 3;
    if head.len() < 64 || &head[..4] != b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return None;
    }
    let u16_at = |o: usize| head.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| {
        head.get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |o: usize| {
        head.get(o..o + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes)
    };
    let kind = u16_at(16)?;
    if kind != ET_EXEC && kind != ET_DYN {
        return None;
    }
    let phoff = usize::try_from(u64_at(32)?).ok()?;
    let phentsize = usize::from(u16_at(54)?);
    let phnum = usize::from(u16_at(56)?);
    if phentsize < 4 {
        return None;
    }
    let mut has_interp = false;
    for i in 0..phnum {
        has_interp |= u32_at(phoff + i * phentsize)? == PT_INTERP;
    }
    // A shared library (ET_DYN with no interpreter and no entry) is not
    // run directly; an ET_DYN without PT_INTERP that is run is static-pie.
    Some(!has_interp)
}

impl Prepared {
    /// Run `cmd` with `shim` preloaded (before any `preload` already set),
    /// and wait for it; the embedded server, if any, stops afterwards.
    /// While it runs, this process ignores SIGINT and SIGQUIT (the
    /// terminal sends them to the program too) and forwards SIGTERM,
    /// SIGHUP, SIGUSR1 and SIGUSR2 to it; afterwards all six are back to
    /// their defaults.
    pub fn run(
        self,
        cmd: &[String],
        shim: &Path,
        preload: Option<String>,
    ) -> Result<ExitStatus, LaunchError> {
        let mut c = Command::new(&cmd[0]);
        c.args(&cmd[1..])
            .envs(self.vars.iter().map(|(k, v)| (k, v)));
        c.env(
            "LD_PRELOAD",
            match preload.filter(|p| !p.is_empty()) {
                Some(old) => format!("{}:{old}", shim.display()),
                None => shim.display().to_string(),
            },
        );
        // While the program runs, terminal signals reach it (same process
        // group); farmem itself ignores them so that it can report the
        // program's status. The child gets them reset before exec.
        farmem_sys::signal::ignore(libc::SIGINT);
        farmem_sys::signal::ignore(libc::SIGQUIT);
        // SAFETY: the closure only calls async-signal-safe `signal`.
        unsafe {
            c.pre_exec(|| {
                farmem_sys::signal::set_default(libc::SIGINT);
                farmem_sys::signal::set_default(libc::SIGQUIT);
                Ok(())
            });
        }
        let mut child = c.spawn().map_err(|source| LaunchError::Spawn {
            cmd: cmd[0].clone(),
            source,
        })?;
        // Termination signals sent to farmem (by `kill`, a batch system, a
        // supervisor) go to the program, which then exits and is reported.
        let forwarded = [libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2];
        farmem_sys::process::forward_signals(child.id() as libc::pid_t, &forwarded);
        let watch = crate::outside::Watch::start(child.id(), self.cfg.local_bytes());
        let status = child.wait();
        let peak = watch.finish();
        if self.cfg.stats_at_exit() {
            if let Some(p) = peak {
                let name = p
                    .command
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_string();
                let every = if p.longest_wait > crate::outside::INTERVAL {
                    format!(
                        "every {} s, up to {:.1} s apart when a look took long",
                        crate::outside::INTERVAL.as_secs(),
                        p.longest_wait.as_secs_f64()
                    )
                } else {
                    format!("every {} s", crate::outside::INTERVAL.as_secs())
                };
                farmem_sys::write_stderr(
                    format!(
                        "  local outside far memory (peak) {:>9}   pid {} {name}, sampled {every}\n",
                        farmem_runtime::config::format_size(p.bytes),
                        p.pid,
                    )
                    .as_bytes(),
                );
            }
        }
        // The program is gone: signals act on this process again.
        farmem_sys::process::stop_forwarding(&forwarded);
        farmem_sys::signal::set_default(libc::SIGINT);
        farmem_sys::signal::set_default(libc::SIGQUIT);
        if let Some(s) = self.server {
            s.stop();
        }
        status.map_err(LaunchError::Wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn flags_win_over_the_environment_and_everything_is_checked() {
        let file = std::env::temp_dir().join(format!("farmem-launch-{}", std::process::id()));
        let env = vars(&[
            ("FARMEM_LOCAL", "64M"),
            ("HOME", "/root"),
            ("FARMEM_FILE", file.to_str().unwrap()),
        ]);
        let p = prepare(
            env.clone().into_iter(),
            &vars(&[("FARMEM_LOCAL", "32M")]),
            |_| {},
        )
        .unwrap();
        let get = |k: &str| p.vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("FARMEM_LOCAL"), Some("32M"));
        assert_eq!(get("HOME"), None, "only farmem's variables are passed on");
        assert_eq!(get("TCMALLOC_SKIP_SBRK"), Some("true"));
        assert!(p.found.is_none() && p.server.is_none());
        // A user's own allocator setting wins.
        let mut mine = env.clone();
        mine.push(("TCMALLOC_SKIP_SBRK".into(), "false".into()));
        let p = prepare(mine.into_iter(), &[], |_| {}).unwrap();
        assert!(!p.vars.iter().any(|(k, _)| k == "TCMALLOC_SKIP_SBRK"));
        // A bad value stops it before anything runs, naming the variable.
        let e = prepare(env.into_iter(), &vars(&[("FARMEM_LOCAL", "lots")]), |_| {}).unwrap_err();
        assert!(e.to_string().contains("FARMEM_LOCAL"), "{e}");
    }

    #[test]
    fn the_program_gets_the_settings_and_its_status_is_returned() {
        let p = Prepared {
            vars: vars(&[("FARMEM_LOCAL", "32M")]),
            found: None,
            server: None,
            cfg: Config::from_vars([("FARMEM_LOCAL", "32M")]).unwrap(),
        };
        let cmd = ["sh", "-c", "test \"$FARMEM_LOCAL\" = 32M && exit 7"].map(String::from);
        // The shim's path is what the loader is told; a missing one it
        // reports and skips, which this test does not need.
        let status = p.run(&cmd, Path::new("/nonexistent.so"), None).unwrap();
        assert_eq!(status.code(), Some(7));
        let e = Prepared {
            vars: Vec::new(),
            found: None,
            server: None,
            cfg: Config::from_vars(std::iter::empty::<(&str, &str)>()).unwrap(),
        }
        .run(&["/no/such/program".to_string()], Path::new("/x.so"), None)
        .unwrap_err();
        assert!(e.to_string().contains("/no/such/program"), "{e}");
    }

    /// The ELF reader tells a static executable (no PT_INTERP) from a
    /// dynamic one, and passes what is not an ELF executable.
    #[test]
    fn static_executables_are_told_from_dynamic_ones() {
        let dynamic = read_head(Path::new("/bin/sh")).unwrap();
        assert_eq!(elf_is_static(&dynamic), Some(false));
        assert_eq!(elf_is_static(b"#!/bin/sh\necho hi\n"), None);
        // A minimal static executable: the header, one PT_LOAD.
        let mut h = vec![0u8; 64 + 56];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2;
        h[5] = 1;
        h[16] = 2; // ET_EXEC
        h[32] = 64; // e_phoff
        h[54] = 56; // e_phentsize
        h[56] = 1; // e_phnum
        h[64] = 1; // PT_LOAD
        assert_eq!(elf_is_static(&h), Some(true));
        h[64] = 3; // PT_INTERP
        assert_eq!(elf_is_static(&h), Some(false));
        // Program headers cut off: not read as static.
        assert_eq!(elf_is_static(&h[..66]), None);
        assert!(check_reachable("sh").is_ok());
        assert!(check_reachable("/no/such/program").is_ok());
    }

    #[test]
    fn a_jvm_set_to_use_zgc_is_refused() {
        let cmd = ["java", "-XX:+UseZGC", "Main"].map(String::from);
        assert!(check_jvm(&cmd)
            .unwrap_err()
            .to_string()
            .contains("UseParallelGC"));
        let cmd = ["/opt/jdk/bin/java", "-XX:+UseZGC"].map(String::from);
        assert!(check_jvm(&cmd).is_err());
        // Not a JVM: its arguments are its own.
        let cmd = ["echo", "-XX:+UseZGC"].map(String::from);
        assert!(check_jvm(&cmd).is_ok());
    }
}
