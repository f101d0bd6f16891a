//! Server addresses: the one parser of `HOST:PORT`, `unix:/PATH` and
//! `unix:@NAME`.

use thiserror::Error;

/// Where a memory server listens and clients connect: TCP `HOST:PORT` (a
/// name or an address, IPv6 in brackets: `[::1]:7070`), a Unix socket
/// `unix:/PATH`, or `unix:@NAME` in the abstract namespace (same machine
/// only, no file). The one parser of server addresses: `farmem serve
/// --listen`, `FARMEM_SERVERS`, `farmem run --servers` and the client.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ServerAddr {
    Tcp { host: String, port: u16 },
    Unix(String),
    UnixAbstract(String),
}

/// Why a string is not a [`ServerAddr`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{given:?} is not a server address: {why}; write host:port (e.g. 10.0.0.2:7070 or [::1]:7070), unix:/path or unix:@name")]
pub struct AddrError {
    pub given: String,
    pub why: &'static str,
}

/// The longest Unix socket path or abstract name (`sun_path` less its NUL).
pub const MAX_UNIX_NAME: usize = 107;

impl std::str::FromStr for ServerAddr {
    type Err = AddrError;
    fn from_str(s: &str) -> Result<ServerAddr, AddrError> {
        let bad = |why| AddrError {
            given: s.to_string(),
            why,
        };
        if let Some(rest) = s.strip_prefix("unix:") {
            let (name, abs) = match rest.strip_prefix('@') {
                Some(n) => (n, true),
                None => (rest, false),
            };
            if name.is_empty() {
                return Err(bad("the socket name is empty"));
            }
            if name.len() > MAX_UNIX_NAME {
                return Err(bad("a Unix socket name has at most 107 bytes"));
            }
            if name.contains('\0') {
                return Err(bad("a NUL byte in the socket name"));
            }
            return Ok(if abs {
                ServerAddr::UnixAbstract(name.into())
            } else {
                ServerAddr::Unix(name.into())
            });
        }
        let (host, port) = s.rsplit_once(':').ok_or_else(|| bad("no :PORT"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| bad("the port is not a number in 0..=65535"))?;
        let host = match host.strip_prefix('[') {
            Some(h) => {
                let h = h
                    .strip_suffix(']')
                    .ok_or_else(|| bad("an unclosed [ in the host"))?;
                h.parse::<std::net::Ipv6Addr>()
                    .map_err(|_| bad("not an IPv6 address inside [ ]"))?;
                h
            }
            None if host.contains(':') => return Err(bad("an IPv6 address needs brackets")),
            None => host,
        };
        if host.is_empty() {
            return Err(bad("the host is empty"));
        }
        if host
            .chars()
            .any(|c| c.is_whitespace() || c == ',' || c == '/')
        {
            return Err(bad("the host has a space, comma or slash"));
        }
        Ok(ServerAddr::Tcp {
            host: host.into(),
            port,
        })
    }
}

impl std::fmt::Display for ServerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerAddr::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            ServerAddr::Tcp { host, port } => write!(f, "{host}:{port}"),
            ServerAddr::Unix(p) => write!(f, "unix:{p}"),
            ServerAddr::UnixAbstract(n) => write!(f, "unix:@{n}"),
        }
    }
}

impl From<std::net::SocketAddr> for ServerAddr {
    fn from(a: std::net::SocketAddr) -> ServerAddr {
        ServerAddr::Tcp {
            host: a.ip().to_string(),
            port: a.port(),
        }
    }
}

impl ServerAddr {
    /// Parse a comma-separated list (`FARMEM_SERVERS`); empty items are
    /// skipped, and at least one address is required.
    pub fn parse_list(s: &str) -> Result<Vec<ServerAddr>, AddrError> {
        let v = s
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::parse)
            .collect::<Result<Vec<ServerAddr>, AddrError>>()?;
        if v.is_empty() {
            return Err(AddrError {
                given: s.to_string(),
                why: "no server given",
            });
        }
        Ok(v)
    }

    /// Whether a client can connect here (TCP port 0 only means "any" to a
    /// listener).
    pub fn is_connectable(&self) -> bool {
        !matches!(self, ServerAddr::Tcp { port: 0, .. })
    }
}
