//! Configuration: from `FARMEM_*` environment variables or an `fm_init`
//! string of `key=value` words. Every value is validated; an error names the
//! variable, the bad value and what is expected. docs/configuration.md is the
//! reference for each variable.

use farmem_wire::ServerAddr;
use std::path::{Path, PathBuf};
use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ConfigError {
    #[error("{name}={value:?}: {why}")]
    Invalid {
        name: String,
        value: String,
        why: String,
    },
    #[error("unknown setting {0:?}; known: {known}", known = known_names())]
    Unknown(String),
    #[error("FARMEM_SERVERS and FARMEM_FILE are both set; choose one backend")]
    TwoBackends,
    #[error("FARMEM_SERVERS=@{dir}: {why}")]
    Rendezvous { dir: String, why: String },
}

/// One `FARMEM_*` setting as users see it: its name without the prefix,
/// its default and its meaning as documented, and the `farmem run` flag that
/// sets it, if any. The table in docs/configuration.md is this table
/// (`farmem config --markdown` prints it; a test checks they agree), the
/// parser refuses any other name, and `farmem run` maps its flags through it.
#[derive(Debug, Clone, Copy)]
pub struct OptionDoc {
    pub key: &'static str,
    pub default: &'static str,
    pub meaning: &'static str,
    pub run_flag: Option<RunFlag>,
}

/// The `farmem run` flag of a setting: the CLI builds its flags from these.
#[derive(Debug, Clone, Copy)]
pub struct RunFlag {
    pub long: &'static str,
    /// The flag's one-line help.
    pub help: &'static str,
    /// A flag without a value, which sets the variable to `1`.
    pub switch: bool,
}

/// Make `Config` and everything derived from its settings out of one table
/// (`table.rs`): per setting, its `FARMEM_` name, field, type and default;
/// its documented default and meaning and `farmem run` flag (the
/// [`OPTIONS`] entry); a parser from the variable's text (why not, as a
/// `String`, when it fails); how the value prints; and its getter.
macro_rules! settings {
    ($(
        $(#[doc = $doc:literal])*
        $key:literal => $field:ident: $ty:ty = $default:expr;
            documented $documented:literal, $meaning:literal;
            flag $flag:expr;
            parse $parse:expr;
            show $show:expr;
            get $getter:ident -> $ret:ty = $get:expr;
    )*) => {
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct Config {
            $( $(#[doc = $doc])* pub(crate) $field: $ty, )*
        }

        impl Default for Config {
            fn default() -> Config {
                Config { $( $field: $default, )* }
            }
        }

        /// Every variable farmem reads.
        pub const OPTIONS: &[$crate::config::OptionDoc] = &[
            $( $crate::config::OptionDoc { key: $key, default: $documented, meaning: $meaning, run_flag: $flag }, )*
        ];

        /// Reading a configuration. Its fields are private to the runtime: a
        /// `Config` is validated when it is parsed ([`Config::from_env`],
        /// [`Config::from_str_config`]) and nothing changes it afterwards; a
        /// caller that needs a different value derives a new, validated one
        /// with [`Config::with`].
        impl Config {
            $(
                $(#[doc = $doc])*
                pub fn $getter(&self) -> $ret {
                    ($get)(&self.$field)
                }
            )*

            /// Apply one setting, `key` upper case and without `FARMEM_`.
            pub(super) fn set_key(
                &mut self,
                key: &str,
                v: &str,
            ) -> Result<(), $crate::config::ConfigError> {
                match key {
                    $( $key => {
                        self.$field = ($parse)(v)
                            .map_err(|why: String| $crate::config::invalid($key, v, why))?;
                    } )*
                    _ => return Err($crate::config::ConfigError::Unknown(format!("FARMEM_{key}"))),
                }
                Ok(())
            }

            /// Each option's value here, as `FARMEM_` would spell it, in
            /// the order of [`OPTIONS`] (what `farmem config` prints).
            pub fn values(&self) -> Vec<(&'static str, String)> {
                vec![ $( ($key, ($show)(&self.$field)), )* ]
            }
        }
    };
}

mod parse;
mod show;
mod table;
#[cfg(test)]
mod tests;

pub use parse::parse_log_level;
pub use table::{Config, OPTIONS};

pub fn options_markdown() -> String {
    let mut out = String::from("| variable | default | meaning |\n|---|---|---|\n");
    for o in OPTIONS {
        out.push_str(&format!(
            "| `FARMEM_{}` | {} | {} |\n",
            o.key, o.default, o.meaning
        ));
    }
    out
}

fn known_names() -> String {
    OPTIONS.iter().map(|o| o.key).collect::<Vec<_>>().join(", ")
}

/// What happens to system calls a program makes without the C library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawSyscalls {
    /// Syscall user dispatch sends them through farmem's table (default).
    Dispatch,
    /// They run unchecked (a far buffer among them fails with EFAULT).
    Allow,
}

/// `FARMEM_TRANSPORT`: how pages move to and from memory servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Auto,
    Socket,
    Ucx,
    /// Sealed memory files passed over a Unix socket (one host).
    Memfd,
}

/// `FARMEM_REDUNDANCY`: how far pages survive a lost memory server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redundancy {
    /// As `FARMEM_REPLICAS` says (the default).
    Replicas(usize),
    /// Reed-Solomon: every `data` pages in a row get `parity` parity pages,
    /// each of the `data + parity` on a different server.
    Erasure { data: usize, parity: usize },
}

/// Most data pages in an erasure-coded row (`FARMEM_REDUNDANCY=ec:K+M`).
pub const MAX_EC_DATA: usize = 12;
/// Most parity pages in an erasure-coded row.
pub const MAX_EC_PARITY: usize = 4;

/// `FARMEM_INTEGRITY`: what each far page's check value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Integrity {
    /// CRC32C: catches corruption, not a server that forges pages.
    Crc32c,
    /// A keyed MAC (the BLAKE3 keyed hash under a key only this process
    /// holds, 64 bits kept): a server cannot forge, swap or replay a page.
    Mac,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileDirect {
    Auto,
    On,
    Off,
}

/// `FARMEM_SERVERS`: where far pages live when no file is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Servers {
    /// None named: farmem starts its own server on this machine.
    Embedded,
    /// These servers; pages are striped across them.
    List(Vec<ServerAddr>),
    /// The servers published in this rendezvous directory (`@DIR`), found
    /// by [`Config::resolved`].
    Rendezvous(PathBuf),
}

impl Servers {
    /// A list, or the embedded server when it is empty.
    pub fn from_list(list: Vec<ServerAddr>) -> Servers {
        if list.is_empty() {
            Servers::Embedded
        } else {
            Servers::List(list)
        }
    }

    /// The servers named; empty for the embedded server and before a
    /// rendezvous is resolved.
    pub fn list(&self) -> &[ServerAddr] {
        match self {
            Servers::List(l) => l,
            Servers::Embedded | Servers::Rendezvous(_) => &[],
        }
    }

    pub fn rendezvous(&self) -> Option<&Path> {
        match self {
            Servers::Rendezvous(d) => Some(d),
            Servers::Embedded | Servers::List(_) => None,
        }
    }

    /// As `FARMEM_SERVERS` would spell it.
    pub fn show(&self) -> String {
        match self {
            Servers::Embedded => "(embedded)".into(),
            Servers::List(l) => l
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(","),
            Servers::Rendezvous(d) => format!("@{}", d.display()),
        }
    }
}

pub const MAX_BATCH: usize = 64;
/// Most pages one eviction round takes: the victims it chooses (at most
/// half of it, [`MAX_EVICT_BATCH`]) and the dirty pages that leave with
/// their blocks. Its page lists live on the stack of the faulting thread:
/// with them the fault path needs 72–80 KiB of a thread's stack, against
/// 48–64 KiB at 64 (tests/stack.rs runs it on 128 KiB).
pub const MAX_ROUND: usize = 256;
/// The largest `FARMEM_EVICT_BATCH`: a round always leaves as much room
/// again for blocks.
pub const MAX_EVICT_BATCH: usize = MAX_ROUND / 2;
/// The smallest round `FARMEM_EVICT_BATCH=auto` chooses.
const AUTO_ROUND_MIN: usize = 32;

/// Victims an eviction round chooses at least, for a queue budget of
/// `budget_pages`: `FARMEM_EVICT_BATCH`, or under `auto` (None) a 64th of
/// the budget between 32 and [`MAX_EVICT_BATCH`]. Each round costs one
/// unmap call and a TLB shootdown however many pages it takes, so large
/// budgets evict in large rounds; a small budget keeps rounds small, since
/// pages evicted ahead of need are pages the loop could have kept (NPB CG
/// class W at 1,421 pages fetched 21% more at rounds of 128 than of 32).
pub fn eviction_round(setting: Option<u32>, budget_pages: usize) -> usize {
    match setting {
        Some(n) => farmem_sys::usize_from(u64::from(n)).clamp(1, MAX_EVICT_BATCH),
        None => (budget_pages / 64).clamp(AUTO_ROUND_MIN, MAX_EVICT_BATCH),
    }
}
/// Most copies of a far page (`FARMEM_REPLICAS`).
pub const MAX_REPLICAS: usize = 3;

/// The largest `FARMEM_ARENA`: 2^32 pages of 4 KiB. The replacement queues
/// and the per-page aux words number pages in 32 bits, so no page of the
/// arena may need more.
pub const MAX_ARENA: u64 = (1 << 32) * 4096;

/// The log levels `FARMEM_LOG` and `farmem serve --log-level` take, least
/// to most.
pub const LOG_LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

pub use farmem_sys::units::{format_size, parse_size};

pub(crate) fn invalid(name: &str, value: &str, why: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        name: format!("FARMEM_{name}"),
        value: value.into(),
        why: why.into(),
    }
}

impl Config {
    /// How far pages survive a lost server: `FARMEM_REDUNDANCY`, or else
    /// `FARMEM_REPLICAS` copies.
    pub fn redundancy(&self) -> Redundancy {
        self.redundancy
            .unwrap_or(Redundancy::Replicas(self.replicas))
    }

    /// Copies of every far page (1 with erasure coding, whose parity is
    /// not a copy).
    pub fn copies(&self) -> usize {
        match self.redundancy() {
            Redundancy::Replicas(n) => n,
            Redundancy::Erasure { .. } => 1,
        }
    }

    /// This configuration with one setting changed (`name` without the
    /// `FARMEM_` prefix, any case), validated as parsing validates it: the
    /// value, then the whole.
    pub fn with(&self, name: &str, value: &str) -> Result<Config, ConfigError> {
        let mut c = self.clone();
        c.set(name, value)?;
        c.check()?;
        Ok(c)
    }

    /// This configuration with `servers` (addresses already parsed, so
    /// valid) instead of its own servers or rendezvous.
    pub fn with_servers(&self, servers: &[ServerAddr]) -> Config {
        Config {
            servers: Servers::from_list(servers.to_vec()),
            ..self.clone()
        }
    }

    /// The same settings with `FARMEM_TRANSPORT` replaced (the preload
    /// shim's choice where UCX cannot be set up safely).
    pub fn with_transport(mut self, t: Transport) -> Config {
        self.transport = t;
        self
    }

    /// A rendezvous directory (`@DIR`) to take the servers from; `servers`
    /// is empty until [`Config::resolved`] fills it.
    pub fn rendezvous(&self) -> Option<&Path> {
        self.servers.rendezvous()
    }

    /// Apply one setting (`name` without the `FARMEM_` prefix, any case).
    fn set(&mut self, name: &str, value: &str) -> Result<(), ConfigError> {
        self.set_key(&name.to_ascii_uppercase(), value)
    }

    fn check(&self) -> Result<(), ConfigError> {
        if self.servers != Servers::Embedded && self.file.is_some() {
            return Err(ConfigError::TwoBackends);
        }
        match self.redundancy {
            Some(Redundancy::Replicas(n)) if self.replicas != 1 && self.replicas != n => {
                return Err(invalid(
                    "REPLICAS",
                    &self.replicas.to_string(),
                    format!("FARMEM_REDUNDANCY=replicas:{n} says otherwise; set one of them"),
                ))
            }
            Some(Redundancy::Erasure { data, parity }) if self.replicas != 1 => {
                return Err(invalid(
                    "REPLICAS",
                    &self.replicas.to_string(),
                    format!("FARMEM_REDUNDANCY=ec:{data}+{parity} keeps parity, not copies; set one of them"),
                ))
            }
            _ => {}
        }
        if self.local_bytes >= self.arena_bytes {
            return Err(invalid(
                "LOCAL",
                &format_size(self.local_bytes),
                format!(
                    "the budget must be smaller than FARMEM_ARENA ({})",
                    format_size(self.arena_bytes)
                ),
            ));
        }
        Ok(())
    }

    /// Read every `FARMEM_*` variable from `vars` (the environment).
    pub fn from_vars<I, K, V>(vars: I) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut c = Config::default();
        for (k, v) in vars {
            if let Some(name) = k.as_ref().strip_prefix("FARMEM_") {
                c.set(name, v.as_ref())?;
            }
        }
        c.check()?;
        Ok(c)
    }

    /// This configuration with an `@DIR` rendezvous replaced by the servers
    /// published there, waiting for them (see `farmem_rendezvous::wait`),
    /// and what was found; unchanged, and `None`, when no rendezvous was
    /// asked for.
    pub fn resolved(&self) -> Result<(Config, Option<farmem_rendezvous::Found>), ConfigError> {
        let Some(dir) = self.servers.rendezvous() else {
            return Ok((self.clone(), None));
        };
        let timeout = std::time::Duration::from_secs(self.rendezvous_timeout_s);
        let found = farmem_rendezvous::wait(dir, timeout).map_err(|e| ConfigError::Rendezvous {
            dir: dir.display().to_string(),
            why: e.to_string(),
        })?;
        Ok((self.with_servers(&found.servers), Some(found)))
    }

    /// Read this process's `FARMEM_*` variables.
    ///
    /// The environment is read and validated once per process; later calls
    /// (the `farmem run` shim's constructor, its first far allocation, the C
    /// API) get the same result.
    pub fn from_env() -> Result<Config, ConfigError> {
        static PARSED: std::sync::OnceLock<Result<Config, ConfigError>> =
            std::sync::OnceLock::new();
        PARSED
            .get_or_init(|| {
                Config::from_vars(
                    std::env::vars_os()
                        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
                )
            })
            .clone()
    }

    /// Parse an `fm_init` string: whitespace-separated `key=value` words,
    /// keys as the variables without `FARMEM_` (e.g. `local=256M servers=h:1,h:2`).
    /// Environment variables are not read.
    pub fn from_str_config(s: &str) -> Result<Config, ConfigError> {
        let mut c = Config::default();
        for word in s.split_whitespace() {
            let (k, v) = word.split_once('=').ok_or_else(|| ConfigError::Invalid {
                name: word.into(),
                value: String::new(),
                why: "expected key=value".into(),
            })?;
            c.set(k, v)?;
        }
        c.check()?;
        Ok(c)
    }
}
