//! The Reed-Solomon code of erasure-coded rows (`FARMEM_REDUNDANCY=ec:K+M`):
//! `reed-solomon-simd` (Leopard's FFT codes over GF(2^16), AVX2 or SSSE3
//! where the CPU has them), whole 4 KiB pages as shards.
//!
//! Calls come from the SIGBUS handler, where nothing may allocate. The
//! crate's encoder and decoder allocate their working space on first use
//! and reuse it while the shape (K, M, shard size) stays the same, and its
//! tables are built once for the process; so [`Codec::new`] makes a few of
//! each and runs every one once, and a call takes a free one under a spin
//! lock.
//!
//! The code is linear (addition is XOR): the parity of the XOR of two rows
//! is the XOR of their parities. So a write-back that changes some pages of
//! a row updates its parity from the change alone: encode a row that is
//! zero but for `old ^ new` at the changed places, and XOR the result into
//! the old parity (a test below checks this on the crate's code).
//!
//! **Decoding is a product with a matrix that depends only on which pages
//! are missing.** The crate's decoder first evaluates the erasure locator
//! polynomial over the whole field (two Walsh-Hadamard transforms of 2^16
//! entries), whatever the shard size: 335 µs a call here, against 1.1 µs
//! for encoding a 4+2 row, and a degraded row decodes on every read of a
//! lost page. But decoding is linear in the pages it is given, symbol by
//! symbol with the same coefficients: lost page t is the sum over the K
//! pages read of c(t, j) times page j, in GF(2^16). So the first decode of
//! a pattern (which K places were read) runs the crate's decoder once on
//! 64-byte unit shards (shard j holds 1 at symbol j, so symbol j of lost
//! page t comes out as c(t, j)), and keeps the coefficients; every decode
//! of that pattern is then K multiplies and XORs per lost page with the
//! crate's own SIMD multiply. A row's pattern changes only when a server
//! is lost or rebuilt, so a few patterns cover a run (`PATTERNS` kept per
//! coder, the oldest replaced).

use crate::sync::SpinLock;
use farmem_sys::PAGE_SIZE;
use reed_solomon_simd::engine::{tables, DefaultEngine, Engine, GfElement};
use reed_solomon_simd::{ReedSolomonDecoder, ReedSolomonEncoder};
use thiserror::Error;

use crate::config::{MAX_EC_DATA, MAX_EC_PARITY};

/// Decoding patterns kept per coder (see the module comment).
const PATTERNS: usize = 64;

/// A coefficient of zero in [`Pattern::logs`] (the field's logarithms run
/// to `GF_MODULUS - 1`).
const ZERO: GfElement = GfElement::MAX;

/// Symbols in a 64-byte chunk of a shard: byte i is the low half of symbol
/// i, byte i + 32 its high half (the crate's layout).
const SYMBOLS: usize = 32;

const _: () = assert!(MAX_EC_DATA <= SYMBOLS && MAX_EC_DATA + MAX_EC_PARITY <= 16);

/// How to decode a row from one set of K places.
#[derive(Clone, Copy)]
struct Pattern {
    /// Bit j set when place j is one of the K read; 0 in an unused entry.
    read: u16,
    /// `logs[t][q]`: the logarithm of the coefficient of the q-th place
    /// read (in place order) in lost data page t, or [`ZERO`].
    logs: [[GfElement; MAX_EC_DATA]; MAX_EC_DATA],
}

const UNUSED: Pattern = Pattern {
    read: 0,
    logs: [[ZERO; MAX_EC_DATA]; MAX_EC_DATA],
};

#[derive(Debug, Error)]
pub enum CodecError {
    #[error("Reed-Solomon code: {0}")]
    Code(#[from] reed_solomon_simd::Error),
    #[error("only {have} of a row's pages are readable, and {need} are needed to decode it")]
    TooFew { have: usize, need: usize },
}

/// The crate's encoder and decoder, ready for a row's shape, and the
/// decoding patterns met so far.
pub struct Coder {
    enc: ReedSolomonEncoder,
    /// The crate's decoder on 64-byte shards: finds a pattern's
    /// coefficients.
    probe: ReedSolomonDecoder,
    engine: DefaultEngine,
    patterns: Box<[Pattern; PATTERNS]>,
    /// The entry of `patterns` replaced next.
    next: usize,
    /// One page: a term of a decoded page.
    term: Box<[u8]>,
    data: usize,
    parity: usize,
}

impl Coder {
    fn new(data: usize, parity: usize) -> Result<Coder, CodecError> {
        let mut coder = Coder {
            enc: ReedSolomonEncoder::new(data, parity, PAGE_SIZE)?,
            probe: ReedSolomonDecoder::new(data, parity, 2 * SYMBOLS)?,
            engine: DefaultEngine::new(),
            patterns: Box::new([UNUSED; PATTERNS]),
            next: 0,
            term: vec![0u8; PAGE_SIZE].into_boxed_slice(),
            data,
            parity,
        };
        // One round of each, so that every buffer is allocated now.
        let mut out = vec![0u8; parity * PAGE_SIZE];
        let zeros = vec![&ZERO_PAGE[..]; data];
        coder.encode(&zeros, &mut out)?;
        let mut shards: Vec<Option<&[u8]>> = vec![Some(&ZERO_PAGE[..]); data + parity];
        shards[0] = None;
        let mut row = vec![0u8; data * PAGE_SIZE];
        coder.decode(&shards, &mut row)?;
        Ok(coder)
    }

    /// The parity of the row `data` (`K` pages) into `out` (`M` pages,
    /// parity page j at `j * PAGE_SIZE`).
    pub fn encode(&mut self, data: &[&[u8]], out: &mut [u8]) -> Result<(), CodecError> {
        encode_with(&mut self.enc, self.data, self.parity, data, out)
    }

    /// The row's data pages into `row` (page i at `i * PAGE_SIZE`) from
    /// `shards`: the row's `K + M` pages in order (data, then parity),
    /// `None` where a page is lost. Needs any `K` of them; uses the first
    /// `K` given (so every data page given is used as it is).
    pub fn decode(&mut self, shards: &[Option<&[u8]>], row: &mut [u8]) -> Result<(), CodecError> {
        let (k, m) = (self.data, self.parity);
        debug_assert_eq!(shards.len(), k + m);
        let have = shards.iter().flatten().count();
        if have < k {
            return Err(CodecError::TooFew { have, need: k });
        }
        for (i, s) in shards[..k].iter().enumerate() {
            if let Some(s) = s {
                row[i * PAGE_SIZE..(i + 1) * PAGE_SIZE].copy_from_slice(s);
            }
        }
        if shards[..k].iter().all(Option::is_some) {
            return Ok(());
        }
        let mut read = [0usize; MAX_EC_DATA];
        let mut mask = 0u16;
        for (q, (j, _)) in shards
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_some())
            .take(k)
            .enumerate()
        {
            read[q] = j;
            mask |= 1 << j;
        }
        let read = &read[..k];
        let p = self.pattern(mask, read)?;
        for (t, lost) in shards[..k].iter().enumerate() {
            if lost.is_some() {
                continue;
            }
            let out = &mut row[t * PAGE_SIZE..(t + 1) * PAGE_SIZE];
            out.fill(0);
            for (q, &j) in read.iter().enumerate() {
                let log = self.patterns[p].logs[t][q];
                if log == ZERO {
                    continue;
                }
                self.term
                    .copy_from_slice(shards[j].expect("a place read is given"));
                let (chunks, rest) = self.term.as_chunks_mut::<64>();
                debug_assert!(rest.is_empty());
                self.engine.mul(chunks, log);
                xor_into(out, &self.term);
            }
        }
        Ok(())
    }

    /// The index in `patterns` of the coefficients for decoding from the
    /// places `read` (bits of `mask`), found now if they are not there.
    fn pattern(&mut self, mask: u16, read: &[usize]) -> Result<usize, CodecError> {
        if let Some(i) = self.patterns.iter().position(|p| p.read == mask) {
            return Ok(i);
        }
        let k = self.data;
        self.probe.reset(k, self.parity, 2 * SYMBOLS)?;
        for (q, &j) in read.iter().enumerate() {
            let mut unit = [0u8; 2 * SYMBOLS];
            unit[q] = 1;
            if j < k {
                self.probe.add_original_shard(j, unit)?;
            } else {
                self.probe.add_recovery_shard(j - k, unit)?;
            }
        }
        let log = &tables::get_exp_log().log;
        let mut found = UNUSED;
        found.read = mask;
        for (t, page) in self.probe.decode()?.restored_original_iter() {
            for (q, c) in found.logs[t][..k].iter_mut().enumerate() {
                let v = GfElement::from(page[q]) | GfElement::from(page[q + SYMBOLS]) << 8;
                *c = if v == 0 { ZERO } else { log[usize::from(v)] };
            }
        }
        let i = self.next;
        self.patterns[i] = found;
        self.next = (i + 1) % PATTERNS;
        Ok(i)
    }
}

/// One caller's coder and pages to work in.
struct Slot {
    coder: Coder,
    /// `2 * (K + M)` pages: see [`Parts`].
    scratch: Box<[u8]>,
    /// [`BATCH_PAGES`] pages: the parity of a batch's whole rows.
    batch: Box<[u8]>,
}

/// Pages of a slot's batch space: the parity of every whole row of one
/// write-back batch (at most `MAX_BATCH / K` rows of `M` pages), or the
/// old pages and parity a batch of rows written in part reads first (one
/// page and `M` parity pages a row, for most of a batch of 64 rows).
pub const BATCH_PAGES: usize = 3 * crate::config::MAX_BATCH;

/// A row operation's working space, split.
pub struct Parts<'a> {
    pub coder: &'a mut Coder,
    /// `K + M` pages: the row's pages as they were (data, then parity).
    pub old: &'a mut [u8],
    /// `K` pages: the row's data as it will be (or a change to encode).
    pub row: &'a mut [u8],
    /// `M` pages: the row's new parity.
    pub parity: &'a mut [u8],
    /// [`BATCH_PAGES`] pages: whole rows' parity, row after row.
    pub batch: &'a mut [u8],
}

/// A slot in use: given back when dropped.
pub struct Work<'a> {
    slot: crate::sync::SpinGuard<'a, Slot>,
    data: usize,
    parity: usize,
}

impl Work<'_> {
    pub fn parts(&mut self) -> Parts<'_> {
        let (data, parity) = (self.data, self.parity);
        let slot = &mut *self.slot;
        let (old, rest) = slot.scratch.split_at_mut((data + parity) * PAGE_SIZE);
        let (row, par) = rest.split_at_mut(data * PAGE_SIZE);
        Parts {
            coder: &mut slot.coder,
            old,
            row,
            parity: &mut par[..parity * PAGE_SIZE],
            batch: &mut slot.batch,
        }
    }
}

/// A row's code: `data` pages, `parity` parity pages.
pub struct Codec {
    data: usize,
    parity: usize,
    slots: Box<[SpinLock<Slot>]>,
}

/// A page of zeros: a row's unchanged places in a parity update, and the
/// pages never written.
pub static ZERO_PAGE: [u8; PAGE_SIZE] = [0; PAGE_SIZE];

impl Codec {
    /// A code of `data` + `parity` pages, usable by `callers` threads at
    /// once without waiting (more wait their turn).
    pub fn new(data: usize, parity: usize, callers: usize) -> Result<Codec, CodecError> {
        let mut slots = Vec::with_capacity(callers.max(1));
        for _ in 0..callers.max(1) {
            slots.push(SpinLock::new(Slot {
                coder: Coder::new(data, parity)?,
                scratch: vec![0u8; 2 * (data + parity) * PAGE_SIZE].into_boxed_slice(),
                batch: vec![0u8; BATCH_PAGES * PAGE_SIZE].into_boxed_slice(),
            }));
        }
        Ok(Codec {
            data,
            parity,
            slots: slots.into_boxed_slice(),
        })
    }

    pub fn data(&self) -> usize {
        self.data
    }

    pub fn parity(&self) -> usize {
        self.parity
    }

    /// A free slot, or the first one's turn. Held across a row's I/O, like
    /// a connection (see `sync::SpinLock`).
    pub fn work(&self) -> Work<'_> {
        let slot = self
            .slots
            .iter()
            .find_map(|s| s.try_lock())
            .unwrap_or_else(|| self.slots[0].lock());
        Work {
            slot,
            data: self.data,
            parity: self.parity,
        }
    }
}

fn encode_with(
    enc: &mut ReedSolomonEncoder,
    data: usize,
    parity: usize,
    pages: &[&[u8]],
    out: &mut [u8],
) -> Result<(), CodecError> {
    debug_assert_eq!(pages.len(), data);
    enc.reset(data, parity, PAGE_SIZE)?;
    for p in pages {
        enc.add_original_shard(p)?;
    }
    let r = enc.encode()?;
    for (j, rec) in r.recovery_iter().enumerate() {
        out[j * PAGE_SIZE..(j + 1) * PAGE_SIZE].copy_from_slice(rec);
    }
    Ok(())
}

/// `acc ^= other`, a page at a time (the compiler vectorises it).
pub fn xor_into(acc: &mut [u8], other: &[u8]) {
    debug_assert_eq!(acc.len(), other.len());
    for (a, b) in acc.iter_mut().zip(other) {
        *a ^= b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn page(seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..PAGE_SIZE)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()[0]
            })
            .collect()
    }

    fn row(seed: u64, k: usize) -> Vec<Vec<u8>> {
        (0..k as u64).map(|i| page(seed * 64 + i)).collect()
    }

    fn parity_of(c: &Codec, data: &[Vec<u8>]) -> Vec<u8> {
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let mut out = vec![0u8; c.parity() * PAGE_SIZE];
        c.work().parts().coder.encode(&refs, &mut out).unwrap();
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Any `M` pages of a row lost, the data comes back.
        #[test]
        fn any_m_lost_pages_decode(k in 2usize..=8, m in 1usize..=4, seed in 0u64..1000, lost_seed in 0u64..1000) {
            let c = Codec::new(k, m, 1).unwrap();
            let data = row(seed, k);
            let parity = parity_of(&c, &data);
            let mut lost = vec![false; k + m];
            let mut x = lost_seed;
            for _ in 0..m {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                lost[(x >> 33) as usize % (k + m)] = true;
            }
            let shards: Vec<Option<&[u8]>> = (0..k + m)
                .map(|i| (!lost[i]).then(|| if i < k { &data[i][..] } else { &parity[(i - k) * PAGE_SIZE..(i - k + 1) * PAGE_SIZE] }))
                .collect();
            let mut back = vec![0u8; k * PAGE_SIZE];
            c.work().parts().coder.decode(&shards, &mut back).unwrap();
            for (i, d) in data.iter().enumerate() {
                prop_assert_eq!(&back[i * PAGE_SIZE..(i + 1) * PAGE_SIZE], &d[..]);
            }
        }

        /// The parity update of a write-back: parity(old) ^ parity(delta)
        /// is parity(new), for any set of changed places.
        #[test]
        fn parity_is_linear(k in 2usize..=8, m in 1usize..=3, seed in 0u64..1000, changed in 1u32..255) {
            let c = Codec::new(k, m, 1).unwrap();
            let old = row(seed, k);
            let mut new = old.clone();
            let mut delta = vec![ZERO_PAGE.to_vec(); k];
            for i in 0..k {
                if changed & (1 << i) != 0 {
                    new[i] = page(seed * 64 + 1000 + i as u64);
                    delta[i] = old[i].clone();
                    xor_into(&mut delta[i], &new[i]);
                }
            }
            let mut p = parity_of(&c, &old);
            xor_into(&mut p, &parity_of(&c, &delta));
            prop_assert_eq!(p, parity_of(&c, &new));
        }
    }

    /// The lost pages of `data` (with `parity`) where `lost` is set, as
    /// the crate's own decoder gives them, and as [`Coder::decode`] does.
    fn both_decodes(
        c: &Codec,
        data: &[Vec<u8>],
        parity: &[u8],
        lost: &[bool],
    ) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let (k, m) = (c.data(), c.parity());
        let place = |i: usize| {
            if i < k {
                &data[i][..]
            } else {
                &parity[(i - k) * PAGE_SIZE..(i - k + 1) * PAGE_SIZE]
            }
        };
        let originals: Vec<(usize, &[u8])> = (0..k)
            .filter(|&i| !lost[i])
            .map(|i| (i, place(i)))
            .collect();
        let recovery: Vec<(usize, &[u8])> = (k..k + m)
            .filter(|&i| !lost[i])
            .map(|i| (i - k, place(i)))
            .collect();
        let theirs = reed_solomon_simd::decode(k, m, originals, recovery).unwrap();
        let shards: Vec<Option<&[u8]>> = (0..k + m).map(|i| (!lost[i]).then(|| place(i))).collect();
        let mut back = vec![0u8; k * PAGE_SIZE];
        c.work().parts().coder.decode(&shards, &mut back).unwrap();
        let ours = (0..k)
            .filter(|&i| lost[i])
            .map(|i| back[i * PAGE_SIZE..(i + 1) * PAGE_SIZE].to_vec())
            .collect();
        let theirs = (0..k)
            .filter(|&i| lost[i])
            .map(|i| theirs[&i].to_vec())
            .collect();
        (ours, theirs)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// The kept coefficients decode as the crate does, for any shape up
        /// to the largest allowed and any pages lost (extra parity given or
        /// not).
        #[test]
        fn kept_coefficients_decode_as_the_crate_does(
            k in 1usize..=MAX_EC_DATA,
            m in 1usize..=MAX_EC_PARITY,
            seed in 0u64..1000,
            lost_bits in 0u32..u32::MAX,
        ) {
            let c = Codec::new(k, m, 1).unwrap();
            let data = row(seed, k);
            let parity = parity_of(&c, &data);
            let mut lost: Vec<bool> = (0..k + m).map(|i| lost_bits & (1 << i) != 0).collect();
            // At most M lost, at least one data page among them.
            while lost.iter().filter(|&&l| l).count() > m {
                let i = lost.iter().rposition(|&l| l).unwrap();
                lost[i] = false;
            }
            lost[usize::try_from(seed).unwrap() % k] = true;
            while lost.iter().filter(|&&l| l).count() > m {
                let i = lost.iter().rposition(|&l| l).unwrap();
                lost[i] = false;
            }
            let (ours, theirs) = both_decodes(&c, &data, &parity, &lost);
            prop_assert_eq!(&ours, &theirs);
            for (got, i) in ours.iter().zip((0..k).filter(|&i| lost[i])) {
                prop_assert_eq!(got, &data[i]);
            }
        }
    }

    /// More patterns than a coder keeps, each met twice, the second time
    /// after others replaced it: every decode right.
    #[test]
    fn patterns_replaced_and_met_again_still_decode() {
        let (k, m) = (12, 4);
        let c = Codec::new(k, m, 1).unwrap();
        let data = row(7, k);
        let parity = parity_of(&c, &data);
        let mut patterns = Vec::new();
        for a in 0..k {
            for b in a + 1..k + m {
                let mut lost = vec![false; k + m];
                lost[a] = true;
                lost[b] = true;
                patterns.push(lost);
            }
        }
        assert!(patterns.len() > PATTERNS);
        for round in 0..2 {
            for lost in &patterns {
                let (ours, theirs) = both_decodes(&c, &data, &parity, lost);
                assert_eq!(ours, theirs, "round {round}, lost {lost:?}");
            }
        }
    }

    #[test]
    fn too_few_pages_is_an_error_not_a_guess() {
        let c = Codec::new(4, 2, 1).unwrap();
        let z = &ZERO_PAGE[..];
        let shards = [Some(z), None, None, None, Some(z), Some(z)];
        let mut back = vec![0u8; 4 * PAGE_SIZE];
        assert!(matches!(
            c.work().parts().coder.decode(&shards, &mut back),
            Err(CodecError::TooFew { have: 3, need: 4 })
        ));
    }
}
