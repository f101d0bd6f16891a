//! Servers joining a running session: a server given at start (or joined
//! since) that was lost or left and is now answering at its address again,
//! a restarted server, joins as a new server, empty. The repair thread
//! tries each such address once a second. The next pass gives the joiner
//! its share of the copies: about `replicas` in N stripe units (N live
//! servers now) move one copy to it, chosen by the unit's rendezvous score for the
//! joiner, each from the copy with the lowest score, so every other
//! server gives up about the same share and no other copy moves.
//!
//! A moved copy's old server keeps its (now unused) pages until the
//! session ends: freeing them could race a read routed there just before
//! the move (on memory files such a read would find zeros).

use super::{greet, set, PagePath, RemoteBackend};
use crate::backend::placement;
use crate::backend::transport::{StreamSocket, Transport};
use crate::backend::BackendError;
use crate::config::Config;
use crate::sync::lock;
use farmem_wire::{ServerAddr, TOKEN_LEN};
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What a server joining later needs from the start of the session.
pub(super) struct Joining {
    token: [u8; TOKEN_LEN],
    max_pages: u64,
    conns: usize,
    timeout_ms: u64,
    secret: Option<farmem_wire::auth::Secret>,
    /// Joined, and not yet given their share of the copies.
    pending: Mutex<Vec<usize>>,
    last_try: Mutex<Option<Instant>>,
    /// Addresses whose failure to rejoin was said already.
    told: Mutex<std::collections::HashSet<String>>,
}

impl Joining {
    pub(super) fn new(
        cfg: &Config,
        token: [u8; TOKEN_LEN],
        max_pages: u64,
        secret: Option<farmem_wire::auth::Secret>,
    ) -> Joining {
        Joining {
            token,
            max_pages,
            conns: cfg.conns,
            timeout_ms: cfg.timeout_ms,
            secret,
            pending: Mutex::new(Vec::new()),
            last_try: Mutex::new(None),
            told: Mutex::new(std::collections::HashSet::new()),
        }
    }
}

impl RemoteBackend {
    /// Once a second: every address whose server was lost or left, and
    /// that no live server answers for, is tried; a server answering there
    /// joins. True when one joined.
    pub(super) fn try_rejoin(&self) -> Result<bool, BackendError> {
        {
            let mut last = lock(&self.joining.last_try);
            if last.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
                return Ok(false);
            }
            *last = Some(Instant::now());
        }
        let names: Vec<String> = (0..self.servers.len())
            .filter(|&s| self.is_down(s))
            .map(|s| self.servers[s].name.clone())
            .filter(|n| {
                !(0..self.servers.len()).any(|s| !self.is_down(s) && &self.servers[s].name == n)
            })
            .collect();
        let mut joined = false;
        let mut tried = std::collections::HashSet::new();
        for name in names {
            if !tried.insert(name.clone()) {
                continue;
            }
            let Ok(addr) = name.parse::<ServerAddr>() else {
                continue;
            };
            match self.join(&addr) {
                Ok(_) => joined = true,
                // Not back yet, the old process still leaving (it refuses
                // new sessions), or not answering (a frozen server's kernel
                // still accepts): try again in a second.
                Err(
                    BackendError::Connect { .. }
                    | BackendError::Refused { .. }
                    | BackendError::Io { .. },
                ) => {}
                Err(BackendError::Config(why)) => return Err(BackendError::Config(why)),
                // Back, but it cannot rejoin: said once for each address.
                Err(e) => {
                    if lock(&self.joining.told).insert(name.clone()) {
                        let mut m = farmem_sys::msg::MsgBuf::new();
                        let _ = writeln!(
                            m,
                            "farmem: warning: memory server {name} answers at its address again but cannot rejoin ({e}); trying again each second"
                        );
                        farmem_sys::write_stderr(m.as_bytes());
                    }
                }
            }
        }
        Ok(joined)
    }

    /// Connect to the server at `addr`, greet it as at start, open the
    /// session's page path there, and add it; its index.
    pub(super) fn join(&self, addr: &ServerAddr) -> Result<usize, BackendError> {
        let j = &self.joining;
        let name = addr.to_string();
        let mut links: Vec<Box<dyn Transport>> = Vec::with_capacity(j.conns);
        for _ in 0..j.conns {
            let link = StreamSocket::connect(addr, j.timeout_ms.min(1000)).map_err(|source| {
                BackendError::Connect {
                    server: name.clone(),
                    source,
                }
            })?;
            links.push(Box::new(link));
        }
        let mut server = greet(
            name.clone(),
            links,
            j.secret.as_ref(),
            &j.token,
            j.max_pages,
            self.wait,
        )?;
        match &self.path {
            PagePath::Sockets => {}
            PagePath::Memfd(_) => {
                if !server.conns[0].link.is_local() {
                    server.side = super::handshake::side_door(
                        &server,
                        &j.token,
                        j.max_pages,
                        j.timeout_ms,
                        self.wait,
                        true,
                    )?;
                }
                super::handshake::open_memfd(&server, &*server.memfd_conn().link, self.wait, true)?;
            }
            PagePath::Ucx(_) => {
                return Err(server.transport(
                    "a server cannot join a session whose pages move over UCX (not built yet); it stays out",
                ))
            }
        }
        let s = self.servers.push(server).ok_or_else(|| {
            BackendError::Config(format!(
                "{name} cannot join: a session takes at most {} joins",
                set::MAX_JOINS
            ))
        })?;
        if let Some(h) = self.published.get() {
            h.add_server(s, &name);
        }
        lock(&self.joining.pending).push(s);
        // A change of membership: the repair thread's cue.
        self.losses.fetch_add(1, Ordering::AcqRel);
        let mut m = farmem_sys::msg::MsgBuf::new();
        let _ = writeln!(
            m,
            "farmem: memory server {name} joined; it takes its share of the copies"
        );
        farmem_sys::write_stderr(m.as_bytes());
        Ok(s)
    }

    /// Give every pending joiner its share of the copies of units below
    /// `units` (see the module comment); the pages moved.
    pub(super) fn rebalance(
        &self,
        units: u64,
        stored: &dyn Fn(u64) -> bool,
    ) -> Result<u64, BackendError> {
        let joiners = std::mem::take(&mut *lock(&self.joining.pending));
        if self.ec.is_some() {
            // A coded row's places move only for repair: a joiner takes the
            // places of lost and leaving servers (see `erasure.rs`).
            return Ok(0);
        }
        let mut moved = 0;
        // The share is of the servers that hold copies now, not of every
        // slot (lost and left servers keep theirs).
        let now = (0..self.servers.len()).filter(|&s| !self.gone(s)).count();
        for &j in &joiners {
            for unit in 0..units {
                if self.gone(j) {
                    break;
                }
                if !placement::joiner_takes(unit, j, self.replicas, now)
                    || self.placement.copies(unit).contains(j)
                {
                    continue;
                }
                let _alone = self.writes_held_off();
                moved += self.move_to_joiner(unit, j, stored)?;
            }
        }
        Ok(moved)
    }

    /// Move one copy of `unit` to joiner `j`, the write gate held; the
    /// pages copied.
    fn move_to_joiner(
        &self,
        unit: u64,
        j: usize,
        stored: &dyn Fn(u64) -> bool,
    ) -> Result<u64, BackendError> {
        loop {
            let current = self.placement.copies(unit);
            let live: Vec<usize> = current.iter().filter(|&s| !self.gone(s)).collect();
            // A unit short of copies is repair's; one with a copy on `j`
            // already is done.
            if live.len() < current.len() || current.contains(j) || self.gone(j) {
                return Ok(0);
            }
            let Some(victim) = placement::joiner_replaces(unit, &live) else {
                return Ok(0);
            };
            let mut sources: Vec<usize> = live.iter().copied().filter(|&s| s != victim).collect();
            sources.push(victim);
            let Some(pages) = self.copy_unit(unit, &sources, &[j], stored)? else {
                continue;
            };
            let after: Vec<usize> = current
                .iter()
                .map(|s| if s == victim { j } else { s })
                .collect();
            self.placement.set(unit, placement::Copies::new(&after));
            return Ok(pages);
        }
    }
}
