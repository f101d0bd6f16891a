//! Where a page's copies live: the one placement rule that routing, the
//! replicas' health and repair all read, so that they cannot drift apart.
//! Pages are grouped in stripe units of `FARMEM_STRIPE` pages. At the start,
//! copy k of unit u is on server (u + k) mod N, so the copies of one unit
//! are on k consecutive servers and every server holds the same share.
//!
//! A unit whose copies were repaired after a loss has its own entry in a
//! table (one word per unit, untouched and so never resident until used):
//! its surviving copies in their old order, then the servers that took the
//! lost copies. The replacement for a lost copy is the live server with the
//! highest rendezvous score for the unit (highest random weight) among
//! those holding none of its copies, so a lost server's units spread over
//! every server left, as RAMCloud spreads its recovery, rather than onto
//! its neighbours.

use crate::config::MAX_REPLICAS;
use farmem_sys::mem::Mapping;
use farmem_sys::PAGE_SIZE;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

/// The server holding copy `copy` of stripe unit `unit`, of `servers`, at
/// the start (before any repair).
pub fn replica_server(unit: u64, copy: usize, servers: usize) -> usize {
    debug_assert!(servers > 0);
    farmem_sys::usize_from((unit + copy as u64) % servers as u64)
}

/// The servers of one unit's copies, in reading order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Copies {
    servers: [u16; MAX_REPLICAS],
    len: u8,
}

impl Copies {
    pub fn new(list: &[usize]) -> Copies {
        assert!(list.len() <= MAX_REPLICAS);
        let mut servers = [0u16; MAX_REPLICAS];
        for (d, &s) in servers.iter_mut().zip(list) {
            *d = u16::try_from(s).expect("server index fits 16 bits (checked at connect)");
        }
        Copies {
            servers,
            len: u8::try_from(list.len()).expect("at most MAX_REPLICAS copies"),
        }
    }

    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, k: usize) -> Option<usize> {
        (k < self.len()).then(|| usize::from(self.servers[k]))
    }

    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.servers[..self.len()].iter().map(|&s| usize::from(s))
    }

    pub fn contains(&self, s: usize) -> bool {
        self.iter().any(|x| x == s)
    }

    /// These copies with `more` appended.
    pub fn with(&self, more: &[usize]) -> Copies {
        let mut all: Vec<usize> = self.iter().collect();
        all.extend_from_slice(more);
        Copies::new(&all)
    }

    /// Packed in a table word: bit 63 set, the count in bits 48-55, the
    /// servers 16 bits each from bit 0. Zero means "the starting rule".
    fn pack(&self) -> u64 {
        let mut w = 1u64 << 63 | u64::from(self.len) << 48;
        for (k, &s) in self.servers[..self.len()].iter().enumerate() {
            w |= u64::from(s) << (16 * k);
        }
        w
    }

    fn unpack(w: u64) -> Copies {
        let len = ((w >> 48) & 0xFF) as u8;
        let mut servers = [0u16; MAX_REPLICAS];
        for (k, s) in servers.iter_mut().enumerate().take(usize::from(len)) {
            *s = ((w >> (16 * k)) & 0xFFFF) as u16;
        }
        Copies { servers, len }
    }
}

/// Most servers a session may stripe over (a server index fits a table
/// word's 16 bits).
pub const MAX_SERVERS: usize = 1 << 16;

/// Every unit's copies: the starting rule, or the unit's own table entry.
pub struct Placement {
    servers: usize,
    replicas: usize,
    units: u64,
    /// Erasure-coded rows' pages: a unit's places are fixed (place j holds
    /// the row's page j), each with its own server, 3 to a table word.
    coded: bool,
    /// Table words per unit: one for copies, a word per 3 places when
    /// coded.
    words: usize,
    /// `words` words per unit (`Copies::pack`, or [`pack_places`] when
    /// coded), zero until the unit is repaired. Mapped without reserve:
    /// only the words of repaired units are ever touched, so a large arena
    /// costs nothing here until a server is lost.
    moved: Option<Mapping>,
}

/// Most places of a coded unit (data and parity pages of a row).
pub const MAX_PLACES: usize = 16;

/// Three places' servers in a table word: bit 63 set, 16 bits each.
fn pack_places(servers: [usize; 3]) -> u64 {
    let mut w = 1u64 << 63;
    for (k, &s) in servers.iter().enumerate() {
        w |= (s as u64 & 0xFFFF) << (16 * k);
    }
    w
}

impl Placement {
    /// `units` stripe units over `servers` servers, `replicas` copies each.
    /// The table is mapped only where a unit can be moved (more than one
    /// copy).
    pub fn new(servers: usize, replicas: usize, units: u64) -> io::Result<Placement> {
        Placement::make(servers, replicas, units, false)
    }

    /// `units` units of erasure-coded rows, `places` pages each (data then
    /// parity): place j of unit u starts on server (u + j) mod `servers`,
    /// and repair moves one place at a time.
    pub fn coded(servers: usize, places: usize, units: u64) -> io::Result<Placement> {
        assert!(places <= MAX_PLACES && places <= servers);
        Placement::make(servers, places, units, true)
    }

    fn make(servers: usize, replicas: usize, units: u64, coded: bool) -> io::Result<Placement> {
        let words = if coded { replicas.div_ceil(3) } else { 1 };
        let moved = if replicas > 1 && units > 0 {
            let bytes = farmem_sys::usize_from(units)
                .checked_mul(8 * words)
                .ok_or_else(|| io::Error::other("placement table size overflows"))?
                .next_multiple_of(PAGE_SIZE);
            Some(Mapping::anonymous(bytes, true)?)
        } else {
            None
        };
        Ok(Placement {
            servers,
            replicas,
            units,
            coded,
            words,
            moved,
        })
    }

    pub fn units(&self) -> u64 {
        self.units
    }

    fn word(&self, unit: u64) -> Option<&AtomicU64> {
        self.word_at(unit, 0)
    }

    /// Word `w` of `unit`'s entry.
    fn word_at(&self, unit: u64, w: usize) -> Option<&AtomicU64> {
        let m = self.moved.as_ref()?;
        (unit < self.units && w < self.words).then(|| {
            // SAFETY: unit < units and w < words, and the mapping holds
            // `units * words` aligned u64 words for the placement's life;
            // AtomicU64 has u64's layout.
            unsafe {
                &*m.as_ptr()
                    .cast::<AtomicU64>()
                    .add(farmem_sys::usize_from(unit) * self.words + w)
            }
        })
    }

    /// The server of place `j` of a coded `unit`.
    fn place(&self, unit: u64, j: usize) -> usize {
        match self.word_at(unit, j / 3).map(|w| w.load(Ordering::Acquire)) {
            Some(w) if w != 0 => ((w >> (16 * (j % 3))) & 0xFFFF) as usize,
            _ => replica_server(unit, j, self.servers),
        }
    }

    /// From now on place `j` of a coded `unit` is on server `s`. Only
    /// repair calls this, with the unit's writes held off; the other
    /// places keep their servers (a reader sees the old server or the new
    /// one, each of which holds the page).
    pub fn set_place(&self, unit: u64, j: usize, s: usize) {
        debug_assert!(self.coded);
        let Some(word) = self.word_at(unit, j / 3) else {
            return;
        };
        let mut three = [0usize; 3];
        for (i, t) in three.iter_mut().enumerate() {
            let place = (j / 3) * 3 + i;
            *t = if place == j {
                s
            } else if place < self.replicas {
                self.place(unit, place)
            } else {
                0
            };
        }
        word.store(pack_places(three), Ordering::Release);
    }

    /// The server of copy `k` of `unit` (k < the unit's copies), or of
    /// place `k` of a coded unit.
    #[inline]
    pub fn server(&self, unit: u64, k: usize) -> usize {
        if self.coded {
            return self.place(unit, k);
        }
        match self.word(unit).map(|w| w.load(Ordering::Acquire)) {
            Some(w) if w != 0 => Copies::unpack(w)
                .get(k)
                .unwrap_or_else(|| replica_server(unit, k, self.servers)),
            _ => replica_server(unit, k, self.servers),
        }
    }

    /// Every copy of `unit`, lost ones included (not for coded units:
    /// see [`Placement::server`]).
    pub fn copies(&self, unit: u64) -> Copies {
        debug_assert!(!self.coded);
        match self.word(unit).map(|w| w.load(Ordering::Acquire)) {
            Some(w) if w != 0 => Copies::unpack(w),
            _ => {
                let mut list = [0usize; MAX_REPLICAS];
                for (k, s) in list.iter_mut().enumerate().take(self.replicas) {
                    *s = replica_server(unit, k, self.servers);
                }
                Copies::new(&list[..self.replicas])
            }
        }
    }

    /// From now on `unit`'s copies are `c` (its first `replicas`, in reading
    /// order). Only repair calls this, with every write to the unit held
    /// off (see `remote/repair.rs`).
    pub fn set(&self, unit: u64, c: Copies) {
        if let Some(w) = self.word(unit) {
            w.store(c.pack(), Ordering::Release);
        }
    }

    /// Up to `need` of servers `0..servers_now` (those given at start and
    /// any that joined) to take `unit`'s lost copies: live ones (per
    /// `down`) that hold none of its copies, by highest rendezvous score.
    pub fn replacements(
        &self,
        unit: u64,
        current: &Copies,
        down: impl Fn(usize) -> bool,
        need: usize,
        servers_now: usize,
    ) -> Vec<usize> {
        let mut candidates: Vec<(u64, usize)> = (0..servers_now)
            .filter(|&s| !down(s) && !current.contains(s))
            .map(|s| (score(unit, s), s))
            .collect();
        candidates.sort_unstable_by(|a, b| b.cmp(a));
        candidates.into_iter().take(need).map(|(_, s)| s).collect()
    }
}

/// The rendezvous weight of server `s` for `unit` (SplitMix64's finaliser
/// over both: cheap, and well spread for consecutive inputs).
fn score(unit: u64, s: usize) -> u64 {
    let mut z = unit
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add((s as u64).wrapping_mul(0xD1B5_4A32_D192_ED03));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Whether a server that joined (`joiner`, one of `servers_now`) takes a
/// copy of `unit` when the session rebalances: about `copies` in
/// `servers_now` units do, chosen by the unit's rendezvous score for it, so
/// the joiner ends with its share and no other copy moves.
pub fn joiner_takes(unit: u64, joiner: usize, copies: usize, servers_now: usize) -> bool {
    let share = u64::MAX / servers_now as u64 * copies.min(servers_now) as u64;
    score(unit, joiner) < share
}

/// Of `current` (live copies), the one a joiner replaces: the lowest
/// rendezvous score, so every old server gives up about the same share.
pub fn joiner_replaces(unit: u64, current: &[usize]) -> Option<usize> {
    current.iter().copied().min_by_key(|&s| score(unit, s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn copies_are_on_consecutive_servers_and_shares_are_even() {
        assert_eq!(replica_server(0, 0, 3), 0);
        assert_eq!(replica_server(2, 1, 3), 0);
        let mut held = [0; 4];
        for u in 0..400 {
            for k in 0..2 {
                held[replica_server(u, k, 4)] += 1;
            }
        }
        assert_eq!(held, [200; 4]);
    }

    #[test]
    fn a_lost_servers_units_spread_over_every_server_left() {
        let p = Placement::new(6, 2, 6000).unwrap();
        let down = |s: usize| s == 2;
        let mut took = [0usize; 6];
        for u in 0..6000 {
            let c = p.copies(u);
            if c.contains(2) {
                let r = p.replacements(u, &c, down, 1, 6);
                assert_eq!(r.len(), 1);
                assert!(!c.contains(r[0]) && r[0] != 2);
                took[r[0]] += 1;
            }
        }
        // 2000 units had a copy on server 2, their other copy on 1 or 3.
        // Each of the 5 left takes a share of the units whose other copy
        // it does not hold: 0, 4 and 5 a quarter of all (500), 1 and 3 a
        // quarter of half (250). Never server 2.
        assert_eq!(took[2], 0);
        assert_eq!(took.iter().sum::<usize>(), 2000);
        for (s, want) in [(0, 500), (1, 250), (3, 250), (4, 500), (5, 500)] {
            let t = took[s];
            assert!(t.abs_diff(want) < want / 4, "server {s} took {t}: {took:?}");
        }
    }

    #[test]
    fn a_joiner_takes_its_share_and_replaces_the_lowest_score() {
        // A fifth server, two copies: about 2 units in 5 give it a copy.
        let took = (0..10_000u64).filter(|&u| joiner_takes(u, 4, 2, 5)).count();
        assert!((3_700..=4_300).contains(&took), "{took}");
        let c = [1, 3];
        let r = joiner_replaces(7, &c).unwrap();
        assert!(c.contains(&r) && score(7, r) <= score(7, 1).min(score(7, 3)));
        assert_eq!(joiner_replaces(7, &[]), None);
    }

    #[test]
    fn a_coded_units_places_move_one_at_a_time() {
        let p = Placement::coded(12, 10, 100).unwrap();
        for j in 0..10 {
            assert_eq!(p.server(7, j), (7 + j) % 12);
        }
        p.set_place(7, 4, 3);
        p.set_place(7, 9, 11);
        for j in 0..10 {
            let want = match j {
                4 => 3,
                9 => 11,
                _ => (7 + j) % 12,
            };
            assert_eq!(p.server(7, j), want, "place {j}");
        }
        assert_eq!(p.server(8, 4), 0);
    }

    proptest! {
        #[test]
        fn a_set_entry_reads_back_and_others_keep_the_rule(
            servers in 2usize..40, unit in 0u64..1000, keep in 0usize..2, extra in 0usize..40,
        ) {
            let p = Placement::new(servers, 3.min(servers), 1000).unwrap();
            let before = p.copies(unit);
            let survivors: Vec<usize> = before.iter().take(keep + 1).collect();
            let down = |s: usize| !survivors.contains(&s) && before.contains(s);
            let need = before.len() - survivors.len();
            let new = p.replacements(unit, &before, down, need, servers);
            prop_assert!(new.iter().all(|s| !before.contains(*s)));
            let after = Copies::new(&survivors).with(&new);
            p.set(unit, after);
            prop_assert_eq!(p.copies(unit), after);
            for (k, s) in after.iter().enumerate() {
                prop_assert_eq!(p.server(unit, k), s);
            }
            let other = (unit + 1 + extra as u64) % 1000;
            if other != unit {
                prop_assert_eq!(p.server(other, 0), replica_server(other, 0, servers));
            }
        }
    }
}
