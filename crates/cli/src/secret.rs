//! `farmem secret`: the shared secret that memory servers and their clients
//! prove to each other they hold (see `farmem_wire::auth`).

use anyhow::{bail, Result};
use farmem_runtime::config::Config;
use farmem_wire::auth::{self, Secret};
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum Cmd {
    /// Write a new secret: 32 random bytes, mode 0600, at FILE (default:
    /// FARMEM_SECRET_FILE, else ~/.config/farmem/secret). Every server and
    /// client must read the same file: put it in a home directory shared by
    /// the cluster's nodes, or copy it to each.
    Init {
        #[arg(long, value_name = "FILE")]
        path: Option<PathBuf>,
        /// Replace an existing secret (clients and servers holding the old
        /// one are then refused until they get the new file).
        #[arg(long)]
        force: bool,
    },
    /// Check the secret this environment would use, and print its path.
    Check {
        #[arg(long, value_name = "FILE")]
        path: Option<PathBuf>,
    },
}

/// The file named by --path or FARMEM_SECRET_FILE, else the default.
fn chosen(path: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(p) = path.or(Config::from_env()?.secret_file().map(PathBuf::from)) {
        return Ok(p);
    }
    match std::env::var_os("HOME") {
        Some(h) => Ok(auth::default_path(&PathBuf::from(h))),
        None => bail!("HOME is not set; name the file with --path or FARMEM_SECRET_FILE"),
    }
}

pub fn run(c: Cmd) -> Result<()> {
    match c {
        Cmd::Init { path, force } => {
            let p = chosen(path)?;
            let mut key = [0u8; auth::SECRET_LEN];
            if !farmem_sys::process::random_bytes(&mut key) {
                bail!("getrandom failed: no random bytes for the secret");
            }
            auth::write_secret(&p, &key, force)?;
            println!(
                "farmem secret: wrote {} ({} random bytes, mode 0600). Servers on other than loopback need it; every client must read the same file (FARMEM_SECRET_FILE, or this default path in a shared home).",
                p.display(),
                auth::SECRET_LEN
            );
        }
        Cmd::Check { path } => {
            let p = chosen(path)?;
            Secret::load(&p)?;
            println!("farmem secret: {} is usable", p.display());
        }
    }
    Ok(())
}
