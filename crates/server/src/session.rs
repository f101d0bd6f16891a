//! Sessions: a client names its page space with a random 128-bit token at
//! Hello. Connections with the same token share the space; nothing else can
//! reach it. A session's pages are released when its last connection closes.
//! The session table's lock is taken only at Hello and when a connection
//! closes, never on the data path.

use crate::store::Store;
use crate::{lock, Shared};
use farmem_wire::{self as wire, ErrorCode};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A session's name: the client's random 128-bit token.
pub(crate) type Token = [u8; wire::TOKEN_LEN];

/// A session in the session table. Its pages are reached through the `Arc`
/// each connection holds, never through the table's lock.
pub(crate) struct SessionEntry {
    pub(crate) store: Arc<Store>,
    /// The session's number and its first connection's peer, for the
    /// metrics (the token is a secret and never shown).
    pub(crate) id: u64,
    pub(crate) peer: String,
    /// Connections that said Hello with this token; at 0 the pages go.
    pub(crate) connections: u64,
}

/// The connection's session, if it said Hello and every page is in its range.
pub(crate) fn checked<'a>(
    session: &'a Option<(Token, Arc<Store>)>,
    mut pages: impl Iterator<Item = u64>,
    op: &str,
) -> Result<&'a Store, (ErrorCode, String)> {
    let Some((_, s)) = session else {
        return Err((ErrorCode::NoSession, format!("say Hello before {op}")));
    };
    if let Some(p) = pages.find(|&p| p >= s.max_pages()) {
        return Err((
            ErrorCode::OutOfRange,
            format!("page {p} is beyond the session's {} pages", s.max_pages()),
        ));
    }
    Ok(s)
}

/// A connection of session `token` closed; the last one releases its pages.
pub(crate) fn leave(sh: &Shared, token: Token) {
    let closed = {
        let mut sessions = lock(&sh.sessions);
        let Some(entry) = sessions.get_mut(&token) else {
            return;
        };
        entry.connections -= 1;
        if entry.connections > 0 {
            return;
        }
        sessions.remove(&token)
    };
    let Some(entry) = closed else { return };
    // No connection of the session is left, so nothing is in flight: the
    // count is final. Its memory goes before its charge is given back, so
    // that capacity never counts as free what a chunk still holds (the
    // store itself may outlive the close in a connection thread's `Arc`);
    // outside the table's lock, as emptying a large session takes a while.
    let pages = entry.store.charged();
    if let Some(m) = entry.store.memfd.get() {
        m.release_all();
    }
    if let Some(p) = entry.store.pool.get() {
        p.discard(0, entry.store.max_pages());
    }
    sh.capacity.give_back(pages);
    tracing::info!("session {} closed: its {} pages released", entry.id, pages);
}

/// Add a connection to session `token` (made at its first Hello, with
/// `max_pages`, unless `may_open` is false: the side door only joins),
/// returning its store.
pub(crate) fn join(
    sh: &Shared,
    token: Token,
    max_pages: u64,
    peer: &str,
    may_open: bool,
) -> Result<Arc<Store>, (ErrorCode, String)> {
    // A leaving server takes no new session, and no new connection to an
    // open one either: a client that released it, looking for a server back
    // at its address, must not find the one still draining.
    if sh.draining.load(Ordering::Acquire) {
        return Err((
            ErrorCode::Capacity,
            "server is leaving (stopped with --drain) and takes no new session; use another server"
                .into(),
        ));
    }
    let mut sessions = lock(&sh.sessions);
    let open = sessions.len();
    let entry = match sessions.entry(token) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(_) if !may_open => {
            return Err((
                ErrorCode::NoSession,
                "the side door joins only a session already open on this server's TCP address"
                    .into(),
            ));
        }
        std::collections::hash_map::Entry::Vacant(_) if open >= sh.cfg.max_sessions => {
            sh.metrics.refused(crate::metrics::Refusal::Limit);
            let msg = format!(
                "server has its most sessions ({open}); start it with a larger --max-sessions, or use another server"
            );
            tracing::warn!("refused {peer}: {msg}");
            return Err((ErrorCode::Capacity, msg));
        }
        std::collections::hash_map::Entry::Vacant(v) => match Store::new(max_pages) {
            Ok(store) => {
                sh.metrics.session_opened();
                let id = sh.next_session.fetch_add(1, Ordering::Relaxed);
                tracing::info!("session {id} opened (address space: up to {max_pages} pages)");
                v.insert(SessionEntry {
                    store: Arc::new(store),
                    id,
                    peer: peer.to_string(),
                    connections: 0,
                })
            }
            Err(e) => return Err((ErrorCode::Capacity, e.to_string())),
        },
    };
    if entry.store.max_pages() != max_pages {
        return Err((
            ErrorCode::Malformed,
            "max_pages differs from the session's".into(),
        ));
    }
    entry.connections += 1;
    tracing::Span::current().record("session", entry.id);
    Ok(entry.store.clone())
}
