//! Repair: after a server is lost, every stripe unit that had a copy on it
//! gets that copy back on another live server, copied from a surviving one,
//! while the program runs. The runtime's repair thread drives the passes
//! (it alone knows which pages hold content); this module moves the pages
//! and owns the placement table's changes.
//!
//! Hazard: a write-back racing the copy. Thread A evicts page p of unit u
//! while repair copies u from survivor S to new server N. Repair reads p
//! from S (old bytes); A writes p to S (new bytes; N is not yet in u's
//! placement); repair writes the old bytes to N and flips u's placement to
//! {S, N}: N holds stale bytes, and a later loss of S serves them. So every
//! write (and free) holds the write gate shared, and repair holds it alone
//! for one unit at a time, from choosing the pages to the flip. A write
//! then lands either before repair reads (and is copied) or after the flip
//! (and goes to N too).
//!
//! Hazard: a page written back just before repair takes the gate, whose
//! ON_SERVER bit is not yet set when repair asks which pages hold content.
//! The runtime counts a page that is still Evicting as holding content, so
//! the page is copied either way (see `repair.rs` in the runtime).

use super::RemoteBackend;
use crate::backend::placement::Copies;
use crate::backend::{BackendError, MAX_BATCH};
use crate::sync::lock;
use farmem_sys::PAGE_SIZE;
use farmem_wire::ErrorCode;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RepairPass {
    /// Stored pages with fewer live copies than asked for when the pass
    /// began.
    pub pages_short: u64,
    /// Pages copied to their new servers.
    pub pages_copied: u64,
    /// Stored pages still with fewer copies after it, for want of a live
    /// server that holds none of their unit's copies.
    pub pages_left_short: u64,
    /// Stored pages with no live copy (a fault on one stops the program
    /// naming its servers).
    pub pages_lost: u64,
    /// Pages copied to servers that joined, for their share.
    pub pages_moved: u64,
    pub millis: u64,
}

/// How one unit's repair ended.
enum Unit {
    /// Every copy was live (already, or after the copy): `pages` copied.
    Whole {
        pages: u64,
    },
    /// Fewer copies than asked for, with no live server left to take one.
    Short {
        pages: u64,
    },
    Lost,
}

/// Units whose placement is changed under one hold of the write gate when
/// they hold no page (nothing to copy, so nothing keeps writes off long).
const EMPTY_GROUP: u64 = 4096;

impl RemoteBackend {
    /// Hold every write and free off (the write gate alone): see the
    /// module comment.
    pub(super) fn writes_held_off(&self) -> std::sync::RwLockWriteGuard<'_, ()> {
        self.write_gate.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Losses so far: the repair thread runs a pass whenever it changes.
    pub(super) fn losses(&self) -> u64 {
        self.losses.load(Ordering::Acquire)
    }

    /// Page writes that reached fewer copies than asked for, so far.
    pub(super) fn short_writes(&self) -> u64 {
        self.under_replicated.load(Ordering::Relaxed)
    }

    /// Whether `unit` has a copy on a lost or leaving server.
    pub(super) fn unit_short(&self, unit: u64) -> bool {
        if let Some(ec) = &self.ec {
            return (0..ec.data + ec.parity).any(|j| self.gone(self.placement.server(unit, j)));
        }
        self.placement.copies(unit).iter().any(|s| self.gone(s))
    }

    /// Lost, or leaving: no place for a copy.
    pub(super) fn gone(&self, s: usize) -> bool {
        self.is_down(s) || self.is_leaving(s)
    }

    fn unit_pages(&self, unit: u64, stored: &dyn Fn(u64) -> bool) -> u64 {
        if let Some(ec) = &self.ec {
            let k = ec.data as u64;
            let rows = self.ec_unit_rows(unit);
            return (rows.start * k..rows.end * k)
                .filter(|&p| stored(p))
                .count() as u64;
        }
        let first = unit * self.stripe;
        (first..first + self.stripe).filter(|&p| stored(p)).count() as u64
    }

    /// Stored pages in units with fewer live copies than asked for, of
    /// the first `units`.
    fn pages_short(&self, units: u64, stored: &dyn Fn(u64) -> bool) -> u64 {
        (0..units)
            .filter(|&u| self.unit_short(u))
            .map(|u| self.unit_pages(u, stored))
            .sum()
    }

    /// One pass over the units of pages below `bound` (those ever
    /// allocated): each with a copy on a lost server gets that copy back on
    /// a live server that holds none of its copies. `stored(page)` says
    /// whether a page holds content on the servers.
    ///
    /// Units past `bound` keep their placement: a page allocated there
    /// during the pass and written before its unit's turn would reach only
    /// the live copies, and a unit placed anew without it would claim a
    /// copy it lacks. Their writes are counted as short, and the repair
    /// thread runs another pass when that count grows.
    pub(super) fn repair_pass(
        &self,
        stored: &dyn Fn(u64) -> bool,
        bound: u64,
    ) -> Result<RepairPass, BackendError> {
        let start = Instant::now();
        let short_at_start = self.short_writes();
        let released_before = self.released_count();
        let units = bound.div_ceil(self.stripe).min(self.placement.units());
        let mut pass = RepairPass {
            pages_short: self.pages_short(units, stored),
            ..RepairPass::default()
        };
        let health = self.published.get();
        if let Some(h) = health {
            h.repair_begins(pass.pages_short);
        }
        let mut group = 0;
        while group < units {
            let end = (group + EMPTY_GROUP).min(units);
            // Units that hold no page get their new placement here, under
            // one hold of the gate; the others one at a time, with a copy.
            let mut full = Vec::new();
            {
                let _alone = self.writes_held_off();
                for unit in group..end {
                    if !self.unit_short(unit) {
                        continue;
                    }
                    if self.unit_pages(unit, stored) > 0 {
                        full.push(unit);
                    } else {
                        self.place_unit(unit, &|_| false)?;
                    }
                }
            }
            for unit in full {
                let held = self.unit_pages(unit, stored);
                let _alone = self.writes_held_off();
                match self.place_unit(unit, stored)? {
                    Unit::Whole { pages } => {
                        pass.pages_copied += pages;
                        if let Some(h) = health {
                            h.unit_repaired(pages, held);
                        }
                    }
                    Unit::Short { pages } => {
                        pass.pages_copied += pages;
                        pass.pages_left_short += held;
                    }
                    Unit::Lost => pass.pages_lost += held,
                }
            }
            group = end;
        }
        pass.pages_moved = self.rebalance(units, stored)?;
        pass.millis = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
        if let Some(h) = health {
            h.repair_ends(self.pages_short(units, stored), pass.millis);
        }
        // The statistics keep the last pass that found something to do.
        let mut last = lock(&self.last_repair);
        if pass.pages_short > 0 || pass.pages_moved > 0 || last.is_none() {
            *last = Some(pass);
        }
        drop(last);
        self.punch_released(released_before);
        if pass.pages_left_short == 0 && pass.pages_lost == 0 {
            self.release_leaving(short_at_start);
        }
        Ok(pass)
    }

    /// Give `unit` back its lost copies. The caller holds the write gate
    /// alone.
    fn place_unit(&self, unit: u64, stored: &dyn Fn(u64) -> bool) -> Result<Unit, BackendError> {
        if self.ec.is_some() {
            return self.place_coded_unit(unit, stored);
        }
        // A server lost while copying is failed over and the unit begun
        // again; each round loses a server for good, so this ends.
        loop {
            let current = self.placement.copies(unit);
            // Copies that stay, and where to read: those first, then a
            // leaving server's (still read from until it is released).
            let keep: Vec<usize> = current.iter().filter(|&s| !self.gone(s)).collect();
            let mut sources = keep.clone();
            sources.extend(
                current
                    .iter()
                    .filter(|&s| self.is_leaving(s) && !self.is_down(s)),
            );
            if sources.is_empty() {
                return Ok(Unit::Lost);
            }
            let need = self.replicas - keep.len();
            if need == 0 {
                return Ok(Unit::Whole { pages: 0 });
            }
            let new = self.placement.replacements(
                unit,
                &current,
                |s| self.gone(s),
                need,
                self.servers.len(),
            );
            if new.is_empty() {
                return Ok(Unit::Short { pages: 0 });
            }
            let Some(pages) = self.copy_unit(unit, &sources, &new, stored)? else {
                continue;
            };
            // Survivors first (reads keep going to them), then the new
            // copies, then any lost or leaving copy still unplaced, which
            // stays (skipped once down): a unit keeps one entry per copy.
            let lost: Vec<usize> = current.iter().filter(|&s| self.gone(s)).collect();
            let mut after = Copies::new(&keep).with(&new);
            if after.len() < self.replicas {
                after = after.with(&lost[..self.replicas - after.len()]);
            }
            self.placement.set(unit, after);
            return Ok(if new.len() == need {
                Unit::Whole { pages }
            } else {
                Unit::Short { pages }
            });
        }
    }

    /// Give a coded `unit`'s lost or leaving places new servers, rebuilding
    /// every row of it that holds content there. The caller holds the
    /// write gate alone.
    fn place_coded_unit(
        &self,
        unit: u64,
        stored: &dyn Fn(u64) -> bool,
    ) -> Result<Unit, BackendError> {
        let ec = self.ec();
        let places = ec.data + ec.parity;
        'unit: loop {
            let servers: Vec<usize> = (0..places)
                .map(|j| self.placement.server(unit, j))
                .collect();
            let gone: Vec<usize> = (0..places).filter(|&j| self.gone(servers[j])).collect();
            if gone.is_empty() {
                return Ok(Unit::Whole { pages: 0 });
            }
            if servers.iter().filter(|&&s| !self.is_down(s)).count() < ec.data {
                return Ok(Unit::Lost);
            }
            let held = Copies::new(&[]);
            let mut to = self.placement.replacements(
                unit,
                &held,
                |s| self.gone(s) || servers.contains(&s),
                gone.len(),
                self.servers.len(),
            );
            if to.is_empty() {
                return Ok(Unit::Short { pages: 0 });
            }
            let gone = &gone[..to.len()];
            to.truncate(gone.len());
            let mut pages = 0;
            // (The repair thread may allocate: it is not the fault path.)
            let rows: Vec<u64> = self
                .ec_unit_rows(unit)
                .filter(|&row| self.ec_row_stored(row, stored))
                .collect();
            for batch in rows.chunks(self.ec_rebuild_batch(gone.len())) {
                match self.ec_rebuild_rows(batch, gone, &to)? {
                    Some(p) => pages += p,
                    None => continue 'unit,
                }
            }
            for (&j, &s) in gone.iter().zip(&to) {
                self.placement.set_place(unit, j, s);
            }
            return Ok(
                if to.len() == places - servers.iter().filter(|&&s| !self.gone(s)).count() {
                    Unit::Whole { pages }
                } else {
                    Unit::Short { pages }
                },
            );
        }
    }

    /// Copy the stored pages of `unit` from the first of `live` that
    /// answers to every server of `new`. None when a server was lost
    /// meanwhile (failed over here; the caller starts the unit again).
    pub(super) fn copy_unit(
        &self,
        unit: u64,
        live: &[usize],
        new: &[usize],
        stored: &dyn Fn(u64) -> bool,
    ) -> Result<Option<u64>, BackendError> {
        let first = unit * self.stripe;
        let end = (first + self.stripe).min(self.placement.units() * self.stripe);
        let mut buf = vec![0u8; MAX_BATCH * PAGE_SIZE];
        let mut batch = Vec::with_capacity(MAX_BATCH);
        let mut copied = 0;
        let mut p = first;
        while p < end {
            batch.clear();
            while p < end && batch.len() < MAX_BATCH {
                if stored(p) {
                    batch.push(p);
                }
                p += 1;
            }
            if batch.is_empty() {
                continue;
            }
            let Some(got) = self.read_some(live, &batch, &mut buf)? else {
                return Ok(None);
            };
            if got.is_empty() {
                continue;
            }
            let data: Vec<&[u8]> = got
                .iter()
                .map(|&i| &buf[i * PAGE_SIZE..(i + 1) * PAGE_SIZE])
                .collect();
            let pages: Vec<u64> = got.iter().map(|&i| batch[i]).collect();
            for &s in new {
                if let Err(e) = self.write_copy(s, &pages, &data) {
                    if !self.lost(&e) {
                        return Err(e);
                    }
                    self.fail_over(s, &e)?;
                    return Ok(None);
                }
            }
            copied += pages.len() as u64;
        }
        Ok(Some(copied))
    }

    /// Read `pages` from the first server of `live` that is up into `buf`
    /// (page i at i * PAGE_SIZE); the positions read come back. A page the
    /// server says was never written (freed meanwhile) is left out. None
    /// when a server was lost on the way.
    fn read_some(
        &self,
        live: &[usize],
        pages: &[u64],
        buf: &mut [u8],
    ) -> Result<Option<Vec<usize>>, BackendError> {
        let Some(&s) = live.iter().find(|&&s| !self.is_down(s)) else {
            return Ok(None);
        };
        let all: Vec<usize> = (0..pages.len()).collect();
        match self.read_copy(s, pages, &mut buf[..pages.len() * PAGE_SIZE]) {
            Ok(()) => return Ok(Some(all)),
            Err(e) if self.lost(&e) => {
                self.fail_over(s, &e)?;
                return Ok(None);
            }
            Err(BackendError::Refused {
                code: Some(ErrorCode::NotFound),
                ..
            }) => {}
            Err(e) => return Err(e),
        }
        // Page by page, leaving out the ones the server does not hold.
        let mut got = Vec::with_capacity(pages.len());
        for (i, &p) in pages.iter().enumerate() {
            match self.read_copy(s, &[p], &mut buf[i * PAGE_SIZE..(i + 1) * PAGE_SIZE]) {
                Ok(()) => got.push(i),
                Err(BackendError::Refused {
                    code: Some(ErrorCode::NotFound),
                    ..
                }) => {}
                Err(e) if self.lost(&e) => {
                    self.fail_over(s, &e)?;
                    return Ok(None);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(Some(got))
    }

    /// The connection of server `s` that carries `page`'s unit.
    pub(super) fn conn_on(&self, s: usize, page: u64) -> usize {
        let unit = page / self.stripe;
        farmem_sys::usize_from((unit / self.initial as u64) % self.servers[s].conns.len() as u64)
    }

    /// Read `pages` (one unit's) from server `s` into `buf`.
    pub(super) fn read_copy(
        &self,
        s: usize,
        pages: &[u64],
        buf: &mut [u8],
    ) -> Result<(), BackendError> {
        if let Some(p) = self.path.one_sided() {
            return p.read_on(self, s, pages, buf);
        }
        let idx: Vec<usize> = (0..pages.len()).collect();
        self.read_from((s, self.conn_on(s, pages[0])), pages, &idx, buf)
    }

    /// Write `pages` (one unit's) to server `s`, complete there on return.
    pub(super) fn write_copy(
        &self,
        s: usize,
        pages: &[u64],
        data: &[&[u8]],
    ) -> Result<(), BackendError> {
        if let Some(p) = self.path.one_sided() {
            return p.write_on(self, s, pages, data);
        }
        let c = self.conn_on(s, pages[0]);
        let idx: Vec<usize> = (0..pages.len()).collect();
        self.write_to((s, c), pages, data, &idx)?;
        self.drain_conn(s, c)
    }

    /// The last pass's figures, for the statistics table.
    pub(super) fn last_repair(&self) -> Option<RepairPass> {
        *lock(&self.last_repair)
    }
}
