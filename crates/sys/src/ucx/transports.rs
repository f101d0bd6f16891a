//! Which UCX transports a context may hold, read from what UCX says it
//! gave the context.

/// Which UCX transports a [`Context`](super::Context) may use: only those
/// whose RMA the NIC or the kernel checks, so that a remote key is a
/// capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transports {
    /// RDMA verbs: UCX 1.13's aliases `rc` (`rc_mlx5`, `rc_verbs`) and `dc`
    /// (`dc_mlx5`), whose gets and puts the NIC checks against its rkeys.
    /// The aliases bring `ud_mlx5`/`ud_verbs` as auxiliary transports
    /// (`:aux`), which UCX uses for connection set-up only and never picks
    /// for a lane; a `ud` that is not auxiliary is refused.
    Verbs,
    /// [`Transports::Verbs`] and, on one host, UCX's `posix` shared memory:
    /// a test path, so that the UCX code runs on machines without RDMA.
    /// What it trusts: a peer reaches a posix segment by opening
    /// `/proc/<pid>/fd/<fd>` (`POSIX_USE_PROC_LINK=y`; the name is unlinked
    /// at once), which the kernel allows the same uid only (ptrace access
    /// rules). So any process of the same user can read and write the
    /// memory, as it could with ptrace anyway; never `sysv` (group-readable
    /// segments) or `cma` (`PR_SET_PTRACER_ANY`).
    PosixTestPath,
}

impl Transports {
    /// The value of UCX's `TLS` setting.
    pub fn tls(self) -> &'static str {
        match self {
            Transports::Verbs => "rc,dc",
            Transports::PosixTestPath => "rc,dc,posix",
        }
    }

    /// Whether a context may hold transport `tl` (`aux`: for connection
    /// set-up only).
    pub fn allows(self, tl: &str, aux: bool) -> bool {
        match tl {
            "rc_mlx5" | "rc_verbs" | "dc_mlx5" => true,
            "ud_mlx5" | "ud_verbs" => aux,
            "posix" => self == Transports::PosixTestPath,
            _ => false,
        }
    }

    /// The transports of `resources` this list does not allow, as
    /// `tl/device` names (empty: all allowed).
    pub fn unexpected(self, resources: &[Resource]) -> Vec<String> {
        resources
            .iter()
            .filter(|r| !self.allows(&r.tl, r.aux))
            .map(|r| format!("{}/{}{}", r.tl, r.dev, if r.aux { " (aux)" } else { "" }))
            .collect()
    }
}

/// One transport resource of a context (`ucp_context_print_info`'s
/// `resource` lines): every worker of the context opens its interfaces on
/// these and no others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    pub tl: String,
    pub dev: String,
    /// For connection set-up only (`flags a-`).
    pub aux: bool,
}

/// The resources listed in `ucp_context_print_info`'s text: lines of the
/// form `#      resource 0  :  md 0  dev 0  flags -- posix/memory`.
pub fn parse_resources(text: &str) -> Vec<Resource> {
    text.lines()
        .filter_map(|l| {
            let rest = l.trim_start_matches('#').trim_start();
            let rest = rest.strip_prefix("resource")?;
            let after = &rest[rest.find("flags ")? + "flags ".len()..];
            let (flags, name) = after.split_once(char::is_whitespace)?;
            let (tl, dev) = name.trim().split_once('/')?;
            Some(Resource {
                tl: tl.to_string(),
                dev: dev.to_string(),
                aux: flags.starts_with('a'),
            })
        })
        .collect()
}
