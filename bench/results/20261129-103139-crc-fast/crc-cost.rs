use std::time::Instant;
use crc_fast::{checksum, CrcAlgorithm};
fn main() {
    let pages: Vec<Vec<u8>> = (0..1024).map(|i| (0..4096).map(|b| (b * 7 + i * 13) as u8).collect()).collect();
    for p in &pages[..4] { assert_eq!(crc32c::crc32c(p) as u64, checksum(CrcAlgorithm::Crc32Iscsi, p)); }
    for round in 0..2 {
        let n = 200;
        let mut acc = 0u64;
        let t = Instant::now();
        for _ in 0..n { for p in &pages { acc ^= crc32c::crc32c(p) as u64; } }
        println!("crc32c 4 KiB (4 MiB set, round {round}): {:.1} ns", t.elapsed().as_secs_f64() * 1e9 / (n * pages.len()) as f64);
        let t = Instant::now();
        for _ in 0..n { for p in &pages { acc ^= checksum(CrcAlgorithm::Crc32Iscsi, p); } }
        println!("crc-fast 4 KiB (4 MiB set, round {round}): {:.1} ns", t.elapsed().as_secs_f64() * 1e9 / (n * pages.len()) as f64);
        let p = &pages[0];
        let t = Instant::now();
        for _ in 0..200000 { acc ^= checksum(CrcAlgorithm::Crc32Iscsi, std::hint::black_box(p)); }
        println!("crc-fast 4 KiB hot: {:.1} ns {acc}", t.elapsed().as_secs_f64() * 1e9 / 200000.0);
    }
}
