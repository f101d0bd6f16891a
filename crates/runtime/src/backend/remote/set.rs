//! The session's servers: those given at start, then any that joined while
//! it ran (a server restarted at its address). Append-only, so a server's
//! index, and a reference to it, stay valid for the session's life; the
//! fault path reads it with one atomic load and no lock.

use super::Server;
use std::ops::Index;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// Servers that may join one session, beyond those it started with.
pub(super) const MAX_JOINS: usize = 64;

pub(super) struct ServerSet {
    slots: Box<[OnceLock<Server>]>,
    len: AtomicUsize,
    /// Held by whoever appends (the repair thread; tests).
    push: Mutex<()>,
}

impl ServerSet {
    /// The servers given at start, with room for [`MAX_JOINS`] more.
    pub(super) fn new(first: Vec<Server>) -> ServerSet {
        let n = first.len();
        let slots: Box<[OnceLock<Server>]> = (0..n + MAX_JOINS).map(|_| OnceLock::new()).collect();
        for (slot, s) in slots.iter().zip(first) {
            let _ = slot.set(s);
        }
        ServerSet {
            slots,
            len: AtomicUsize::new(n),
            push: Mutex::new(()),
        }
    }

    /// Servers so far (every index below is filled).
    pub(super) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Server> + '_ {
        self.slots[..self.len()].iter().filter_map(OnceLock::get)
    }

    /// Append `s`; its index, or None when the session has no room left.
    pub(super) fn push(&self, s: Server) -> Option<usize> {
        let _one = crate::sync::lock(&self.push);
        let i = self.len();
        let slot = self.slots.get(i)?;
        let _ = slot.set(s);
        // Published after the slot is filled: a reader that sees the new
        // length finds the server there.
        self.len.store(i + 1, Ordering::Release);
        Some(i)
    }
}

impl Index<usize> for ServerSet {
    type Output = Server;

    fn index(&self, s: usize) -> &Server {
        self.slots[s]
            .get()
            .expect("a server index below the set's length")
    }
}
