//! End-to-end page checksums (`FARMEM_CHECKSUM`): a check value of each
//! far page as it was written back, checked at every fetch. A page whose
//! contents differ is never installed: it is read again from another copy
//! where replicas are kept, or the program stops, naming the server.
//!
//! The value (`FARMEM_INTEGRITY`) is a CRC32C, which catches corruption, or
//! a keyed MAC, which also stops a server that forges pages on purpose: the
//! BLAKE3 keyed hash of the page under a key drawn from the kernel at start,
//! which never leaves this process, 64 bits kept. (BLAKE3 rather than
//! HMAC-SHA256: 1.5 µs a page against 2.5 µs here, measured by
//! `cost_per_page` below and docs/benchmarks.md.) Nothing but the bytes
//! goes into it: each page's kept value is the MAC of what was last written
//! there, so a page passed off as another, or an old version handed back,
//! fails the check unless its bytes are the very ones expected.

use crate::config::Integrity;
use crate::Runtime;
use farmem_sys::mem::Mapping;
use farmem_sys::msg::MsgBuf;
use farmem_sys::PAGE_SIZE;
use std::fmt::Write as _;
use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The CRC32C (Castagnoli) of `data`, by whichever of two crates is faster
/// on this CPU; both give the same value. `crc-fast` folds with carry-less
/// multiplies, fast where the CPU has AVX-512 VPCLMULQDQ (76-88 ns a hot
/// 4 KiB page on the Intel hosts) and on aarch64, but without AVX-512 it
/// falls back to 128-bit folding that is slower than the `crc32c` crate's
/// three interleaved crc32 instructions (318 against 240 ns a page on an
/// AMD EPYC with AVX2 only: `cost_per_page` below). Both pick their code
/// path once per process, on first use, and `crc-fast` may allocate then:
/// [`warm_up`] does that before any fault.
pub(crate) fn crc32c(data: &[u8]) -> u32 {
    if folding_is_faster() {
        crc32c_folded(data)
    } else {
        ::crc32c::crc32c(data)
    }
}

/// The CRC32C by `crc-fast`.
// A CRC32 comes back in the low 32 bits of a u64.
#[allow(clippy::cast_possible_truncation)]
fn crc32c_folded(data: &[u8]) -> u32 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, data) as u32
}

/// Whether `crc-fast`'s folding beats the crc32 instruction here. The
/// standard library caches what the CPU has: an atomic load and a test.
fn folding_is_faster() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("vpclmulqdq")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        true
    }
}

/// Make the CRC32C's crate choose its code path now, outside the fault
/// handler.
pub(crate) fn warm_up() {
    std::hint::black_box(crc32c(&[0u8; PAGE_SIZE]));
}

/// How a page's check value is made.
enum Kind {
    Crc32c,
    /// The MAC's key (32 bytes from `getrandom`).
    Mac([u8; 32]),
}

/// Per page: the check value of its contents on the backend.
pub(crate) struct Sums {
    words: Mapping,
    npages: usize,
    on: bool,
    kind: Kind,
}

impl Sums {
    /// Room for `npages` check values of `integrity`'s kind; `on`: whether
    /// they are kept at all.
    pub(crate) fn new(npages: usize, on: bool, integrity: Integrity) -> io::Result<Sums> {
        warm_up();
        let kind = match integrity {
            Integrity::Crc32c => Kind::Crc32c,
            Integrity::Mac => {
                let mut key = [0u8; 32];
                farmem_sys::process::fill_random(&mut key).map_err(|e| {
                    io::Error::other(format!(
                        "FARMEM_INTEGRITY=mac: the kernel gave no random key (getrandom: {e})"
                    ))
                })?;
                Kind::Mac(key)
            }
        };
        let width = if matches!(kind, Kind::Mac(_)) { 8 } else { 4 };
        let bytes = (npages * width).next_multiple_of(PAGE_SIZE);
        Ok(Sums {
            words: Mapping::anonymous(bytes, true)?,
            npages,
            on,
            kind,
        })
    }

    fn word32(&self, p: usize) -> &AtomicU32 {
        debug_assert!(p < self.npages && matches!(self.kind, Kind::Crc32c));
        // SAFETY: p < npages and the mapping holds npages aligned u32 words
        // for the runtime's whole (static) life; AtomicU32 has u32's layout.
        unsafe { &*self.words.as_ptr().cast::<AtomicU32>().add(p) }
    }

    fn word64(&self, p: usize) -> &AtomicU64 {
        debug_assert!(p < self.npages && matches!(self.kind, Kind::Mac(_)));
        // SAFETY: with a MAC the mapping holds npages aligned u64 words (see
        // `new`) for the runtime's whole life; AtomicU64 has u64's layout.
        unsafe { &*self.words.as_ptr().cast::<AtomicU64>().add(p) }
    }

    /// The check value of `data`. No allocation: this runs in the fault
    /// handler.
    fn value(&self, data: &[u8]) -> u64 {
        match &self.kind {
            Kind::Crc32c => u64::from(crc32c(data)),
            Kind::Mac(key) => {
                let tag = blake3::keyed_hash(key, data);
                let mut first = [0u8; 8];
                first.copy_from_slice(&tag.as_bytes()[..8]);
                u64::from_le_bytes(first)
            }
        }
    }

    fn stored(&self, p: usize) -> u64 {
        match self.kind {
            Kind::Crc32c => u64::from(self.word32(p).load(Ordering::Relaxed)),
            Kind::Mac(_) => self.word64(p).load(Ordering::Relaxed),
        }
    }

    /// What the check value is, for messages.
    fn name(&self) -> &'static str {
        match self.kind {
            Kind::Crc32c => "CRC32C",
            Kind::Mac(_) => "keyed MAC",
        }
    }

    /// Record the check value of page `p`'s contents as written back. The
    /// page is Evicting and write-protected, so `data` is what the backend
    /// gets; the state change to Absent that follows publishes the value to
    /// any later fetch.
    pub(crate) fn record(&self, p: usize, data: &[u8]) {
        if !self.on {
            return;
        }
        let v = self.value(data);
        match self.kind {
            // A CRC32C is 32 bits: the truncation is the value.
            #[allow(clippy::cast_possible_truncation)]
            Kind::Crc32c => self.word32(p).store(v as u32, Ordering::Relaxed),
            Kind::Mac(_) => self.word64(p).store(v, Ordering::Relaxed),
        }
    }
}

impl Runtime {
    /// Check that `data`, fetched for page `p`, is what was written back.
    /// With another copy left (replicas), the server that sent a page that
    /// differs is dropped and the page read again from the next copy;
    /// otherwise the program stops, naming the server and the page.
    pub(crate) fn verify_sum(&self, p: usize, data: &mut [u8]) {
        if !self.arena.sums().on {
            return;
        }
        let want = self.arena.sums().stored(p);
        let mut got = self.arena.sums().value(data);
        while got != want && self.backend.distrust(p as u64) {
            if let Err(e) = self.backend.read(&[p as u64], data) {
                self.fatal_backend("fetch", p, &e);
            }
            got = self.arena.sums().value(data);
        }
        if got != want {
            let mut m = MsgBuf::new();
            let _ = write!(
                m,
                "farmem: far page at {:#x} came back from {} with the wrong contents ({} {got:#x}, written as {want:#x}): the server, its memory or the network corrupted or forged it\nfarmem: stopping the program: the page was not installed, and continuing would give it wrong data.\n",
                self.addr_of(p),
                self.backend.holder(p as u64),
                self.arena.sums().name(),
            );
            farmem_sys::fatal(m.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(fill: u8) -> Vec<u8> {
        (0..PAGE_SIZE)
            .map(|i| fill ^ u8::try_from(i % 251).unwrap())
            .collect()
    }

    #[test]
    fn a_mac_is_keyed_and_each_page_keeps_its_last() {
        let a = Sums::new(16, true, Integrity::Mac).unwrap();
        let b = Sums::new(16, true, Integrity::Mac).unwrap();
        let (p3, p4) = (page(7), page(8));
        a.record(3, &p3);
        a.record(4, &p4);
        assert_eq!(a.stored(3), a.value(&p3));
        // Page 4's bytes handed back as page 3 (a swap) do not match.
        assert_ne!(a.value(&p4), a.stored(3), "a page passed off as another");
        // Another process's key gives another MAC: none can be computed
        // without this one's.
        assert_ne!(b.value(&p3), a.value(&p3), "two keys gave one MAC");
        // An old version no longer matches once the page is written again.
        a.record(3, &page(9));
        assert_ne!(a.stored(3), a.value(&p3), "an old version passed");
    }

    #[test]
    fn a_crc_is_the_pages_crc32c() {
        let s = Sums::new(4, true, Integrity::Crc32c).unwrap();
        let p = page(1);
        s.record(2, &p);
        assert_eq!(s.stored(2), u64::from(::crc32c::crc32c(&p)));
    }

    /// crc-fast against the crc32c crate (the crc32 instruction), and the
    /// one this CPU uses, on every length and alignment a page check or a
    /// row place could meet.
    #[test]
    fn crc_fast_agrees_with_the_crc32_instruction() {
        let p = page(5);
        for len in [0, 1, 7, 63, 64, 65, 255, 256, 1000, 4095, PAGE_SIZE] {
            for off in [0, 1, 8, 13] {
                let d = &p[off.min(p.len() - len)..][..len];
                let want = ::crc32c::crc32c(d);
                assert_eq!(crc32c_folded(d), want, "len {len} offset {off}");
                assert_eq!(crc32c(d), want, "len {len} offset {off}");
            }
        }
    }

    /// What each check costs a page (a benchmark, not a test: run with
    /// `cargo test --release -p farmem-runtime --lib checksum -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn cost_per_page() {
        let p = page(3);
        let n = 200_000u64;
        type Crc = fn(&[u8]) -> u32;
        let crcs: [(&str, Crc); 2] = [
            ("crc-fast", crc32c_folded),
            ("crc32c crate", ::crc32c::crc32c),
        ];
        for (name, f) in crcs {
            let t = std::time::Instant::now();
            let mut x = 0u32;
            for _ in 0..n {
                x ^= f(std::hint::black_box(&p));
            }
            let ns = t.elapsed().as_nanos() as f64 / n as f64;
            println!("  {name}: {ns:.0} ns a 4 KiB page [{x:x}]");
        }
        println!("  (this CPU uses crc-fast: {})", folding_is_faster());
        for (name, kind) in [("crc32c", Integrity::Crc32c), ("mac", Integrity::Mac)] {
            let s = Sums::new(1, true, kind).unwrap();
            let t = std::time::Instant::now();
            let mut x = 0u64;
            for i in 0..n {
                x ^= s.value(std::hint::black_box(&p)) ^ i;
            }
            let ns = t.elapsed().as_nanos() as f64 / n as f64;
            println!(
                "{name}: {ns:.0} ns a 4 KiB page ({:.2} GB/s) [{x:x}]",
                4096.0 / ns
            );
        }
    }
}
