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

use crate::sync::SpinLock;
use farmem_sys::PAGE_SIZE;
use reed_solomon_simd::{ReedSolomonDecoder, ReedSolomonEncoder};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum CodecError {
    #[error("Reed-Solomon code: {0}")]
    Code(#[from] reed_solomon_simd::Error),
    #[error("only {have} of a row's pages are readable, and {need} are needed to decode it")]
    TooFew { have: usize, need: usize },
}

/// The crate's encoder and decoder, ready for a row's shape.
pub struct Coder {
    enc: ReedSolomonEncoder,
    dec: ReedSolomonDecoder,
    data: usize,
    parity: usize,
}

impl Coder {
    /// The parity of the row `data` (`K` pages) into `out` (`M` pages,
    /// parity page j at `j * PAGE_SIZE`).
    pub fn encode(&mut self, data: &[&[u8]], out: &mut [u8]) -> Result<(), CodecError> {
        encode_with(&mut self.enc, self.data, self.parity, data, out)
    }

    /// The row's data pages into `row` (page i at `i * PAGE_SIZE`) from
    /// `shards`: the row's `K + M` pages in order (data, then parity),
    /// `None` where a page is lost. Needs any `K` of them.
    pub fn decode(&mut self, shards: &[Option<&[u8]>], row: &mut [u8]) -> Result<(), CodecError> {
        decode_with(&mut self.dec, self.data, self.parity, shards, row)
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
            let mut coder = Coder {
                enc: ReedSolomonEncoder::new(data, parity, PAGE_SIZE)?,
                dec: ReedSolomonDecoder::new(data, parity, PAGE_SIZE)?,
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
            slots.push(SpinLock::new(Slot {
                coder,
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

fn decode_with(
    dec: &mut ReedSolomonDecoder,
    data: usize,
    parity: usize,
    shards: &[Option<&[u8]>],
    row: &mut [u8],
) -> Result<(), CodecError> {
    debug_assert_eq!(shards.len(), data + parity);
    let have = shards.iter().flatten().count();
    if have < data {
        return Err(CodecError::TooFew { have, need: data });
    }
    for (i, s) in shards[..data].iter().enumerate() {
        if let Some(s) = s {
            row[i * PAGE_SIZE..(i + 1) * PAGE_SIZE].copy_from_slice(s);
        }
    }
    if shards[..data].iter().all(Option::is_some) {
        return Ok(());
    }
    dec.reset(data, parity, PAGE_SIZE)?;
    let mut added = 0;
    for (i, s) in shards[..data].iter().enumerate() {
        if let Some(s) = s {
            dec.add_original_shard(i, s)?;
            added += 1;
        }
    }
    // Only as many parity pages as the lost data pages need.
    for (j, s) in shards[data..].iter().enumerate() {
        if added == data {
            break;
        }
        if let Some(s) = s {
            dec.add_recovery_shard(j, s)?;
            added += 1;
        }
    }
    let r = dec.decode()?;
    for (i, page) in r.restored_original_iter() {
        row[i * PAGE_SIZE..(i + 1) * PAGE_SIZE].copy_from_slice(page);
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
