//! The server's capacity (`--capacity`) and each session's quota
//! (`--session-quota`): every page charged to them goes through
//! [`Capacity`], whether a Write stores it or a one-sided chunk (UCX or a
//! memory file) holds it, and every refusal is one [`Refused`] message.
//!
//! A charge is a [`Reservation`], taken before any memory is touched
//! (mapping a chunk writes or pins all of it; receiving a Write's pages
//! faults them in) and given back when dropped, so a request that fails
//! half-way holds nothing: only [`Reservation::keep`] makes it stay. Pages
//! kept go back with [`Capacity::give_back`] when they are freed or their
//! session closes.
//!
//! The capacity is reserved exactly, by one atomic read-modify-write. The
//! quota is checked, not reserved: it bounds one session against the
//! others, and reserving it would need a counter per session on the page
//! path. So connections of one session charging at once may pass it:
//! ```text
//! quota 10, the session holds 8
//! conn A: Write of 2 new pages   8 + 2 <= 10: reserved
//! conn B: Write of 2 new pages   8 + 2 <= 10: reserved (A's not yet stored)
//! both store                     the session holds 12
//! ```
//! by at most one batch (or chunk) per connection in flight
//! (docs/configuration.md says so).

use crate::metrics::Refusal;
use farmem_wire::ErrorCode;
use std::sync::atomic::{AtomicU64, Ordering};
use thiserror::Error;

/// The pages all sessions together may hold, those they hold, and the most
/// one session may hold.
pub(crate) struct Capacity {
    total: u64,
    /// 0: no quota (up to the whole capacity).
    quota: u64,
    used: AtomicU64,
}

/// What a refused charge would have passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exceeded {
    /// The session's `--session-quota`.
    Quota,
    /// The server's `--capacity`.
    Capacity,
}

impl Exceeded {
    fn what(self) -> &'static str {
        match self {
            Exceeded::Quota => "this session's quota (--session-quota)",
            Exceeded::Capacity => "this server's capacity (--capacity)",
        }
    }

    fn remedy(self) -> &'static str {
        match self {
            Exceeded::Quota => {
                "free some of this session's pages, or start the server with a larger --session-quota"
            }
            Exceeded::Capacity => {
                "free pages, start the server with a larger --capacity, or add servers"
            }
        }
    }
}

/// A charge refused: the one message for every refusal, on every page path.
#[derive(Debug, Error)]
#[error("no room for {asked} more pages: {} has {held} of its {limit} pages in use; {}", .exceeded.what(), .exceeded.remedy())]
pub(crate) struct Refused {
    pub(crate) exceeded: Exceeded,
    /// Pages held when the charge was refused (the session's, or all sessions').
    held: u64,
    limit: u64,
    asked: u64,
}

impl Refused {
    /// The wire's code for a refusal, whatever was exceeded: the
    /// connection stays open, and a client may free pages and retry.
    pub(crate) fn code(&self) -> ErrorCode {
        ErrorCode::Capacity
    }

    /// How the metrics count it.
    pub(crate) fn reason(&self) -> Refusal {
        match self.exceeded {
            Exceeded::Quota => Refusal::Quota,
            Exceeded::Capacity => Refusal::Capacity,
        }
    }
}

impl Capacity {
    /// `total` pages in all; `quota` pages for one session (0: no quota).
    pub(crate) fn new(total: u64, quota: u64) -> Capacity {
        Capacity {
            total,
            quota,
            used: AtomicU64::new(0),
        }
    }

    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Pages charged, all sessions together (reservations in flight too).
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Reserve `pages` more for a session that is charged `held` pages now:
    /// all of them or none. Nothing is ever refused for no pages (a Write
    /// that only overwrites).
    pub(crate) fn reserve(&self, held: u64, pages: u64) -> Result<Reservation<'_>, Refused> {
        if pages == 0 {
            return Ok(Reservation { of: self, pages });
        }
        if self.quota > 0 && held.saturating_add(pages) > self.quota {
            return Err(Refused {
                exceeded: Exceeded::Quota,
                held,
                limit: self.quota,
                asked: pages,
            });
        }
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                u.checked_add(pages).filter(|&n| n <= self.total)
            })
            .map_err(|used| Refused {
                exceeded: Exceeded::Capacity,
                held: used,
                limit: self.total,
                asked: pages,
            })?;
        Ok(Reservation { of: self, pages })
    }

    /// Give back `pages` a [`Reservation::keep`] kept: freed, or their
    /// session closed.
    pub(crate) fn give_back(&self, pages: u64) {
        let before = self.used.fetch_sub(pages, Ordering::AcqRel);
        debug_assert!(before >= pages, "gave back {pages} of {before} pages");
    }
}

/// Pages reserved and not yet kept: given back on drop.
#[must_use = "a reservation dropped at once is given back at once"]
pub(crate) struct Reservation<'a> {
    of: &'a Capacity,
    pages: u64,
}

impl Reservation<'_> {
    /// Keep `pages` of the reservation charged (until
    /// [`Capacity::give_back`]) and give the rest back now.
    pub(crate) fn keep(mut self, pages: u64) {
        debug_assert!(pages <= self.pages, "kept {pages} of {}", self.pages);
        self.pages -= pages.min(self.pages);
    }

    /// Keep the whole reservation charged.
    pub(crate) fn keep_all(self) {
        let pages = self.pages;
        self.keep(pages);
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.pages > 0 {
            self.of.give_back(self.pages);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_is_given_back_unless_kept() {
        let c = Capacity::new(100, 0);
        let r = c.reserve(0, 60).unwrap();
        assert_eq!(c.used(), 60);
        drop(r);
        assert_eq!(c.used(), 0, "dropped: given back");
        c.reserve(0, 60).unwrap().keep(45);
        assert_eq!(c.used(), 45, "the surplus went back");
        c.reserve(45, 55).unwrap().keep_all();
        assert_eq!(c.used(), 100);
        assert!(c.reserve(100, 0).is_ok(), "no pages: never refused");
        c.give_back(100);
        assert_eq!(c.used(), 0);
    }

    #[test]
    fn one_message_names_what_was_exceeded_and_what_to_do() {
        let c = Capacity::new(100, 90);
        let q = c.reserve(88, 4).err().unwrap();
        assert_eq!(
            (q.exceeded, q.code()),
            (Exceeded::Quota, ErrorCode::Capacity)
        );
        assert_eq!(
            q.to_string(),
            "no room for 4 more pages: this session's quota (--session-quota) has 88 of its 90 pages in use; free some of this session's pages, or start the server with a larger --session-quota"
        );
        assert_eq!(c.used(), 0, "a refusal charges nothing");
        // Another session's pages fill the server, whatever this one holds.
        let _others = c.reserve(0, 9).unwrap();
        let _more = c.reserve(0, 86).unwrap();
        let f = c.reserve(0, 6).err().unwrap();
        assert_eq!(
            (f.exceeded, f.code()),
            (Exceeded::Capacity, ErrorCode::Capacity)
        );
        assert_eq!(
            f.to_string(),
            "no room for 6 more pages: this server's capacity (--capacity) has 95 of its 100 pages in use; free pages, start the server with a larger --capacity, or add servers"
        );
        assert!(f.to_string().len() <= farmem_wire::MAX_ERROR_MSG);
    }

    /// Threads racing for the last pages never charge past the capacity,
    /// and whatever they give back leaves the count exact.
    #[test]
    fn racing_reservations_never_pass_the_capacity() {
        let c = Capacity::new(1000, 0);
        std::thread::scope(|t| {
            for k in 1..=8u64 {
                let c = &c;
                t.spawn(move || {
                    for i in 0..2000u64 {
                        if let Ok(r) = c.reserve(0, k) {
                            assert!(c.used() <= 1000);
                            if i % 3 == 0 {
                                r.keep(k / 2);
                                c.give_back(k / 2);
                            }
                        }
                    }
                });
            }
        });
        assert_eq!(c.used(), 0);
    }
}
