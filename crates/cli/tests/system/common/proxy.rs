//! A misbehaving memory server for the client's tests: a TCP proxy in front
//! of a real `farmem serve` that passes requests through untouched and, at
//! the Nth page-read reply across all its connections, breaks it in one way.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const READ_OK: u16 = 0x82;

/// What the proxy does to the chosen ReadOk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misbehave {
    /// Flip one bit in one page.
    FlipBit,
    /// Answer with another request's tag.
    WrongTag,
    /// Claim a payload one page shorter than the request needs (and send
    /// that much).
    WrongLength,
    /// Send the header and half the pages, then close.
    CutMidFrame,
    /// Send nothing more on that connection, and keep it open.
    Stall,
    /// Close the connection instead of replying.
    Disconnect,
    /// Change the first page's bytes so that its CRC32C stays the same (a
    /// server forging a page on purpose, not noise).
    ForgeKeepingCrc,
}

pub const ALL: [Misbehave; 6] = [
    Misbehave::FlipBit,
    Misbehave::WrongTag,
    Misbehave::WrongLength,
    Misbehave::CutMidFrame,
    Misbehave::Stall,
    Misbehave::Disconnect,
];

pub struct Proxy {
    pub addr: String,
    /// How many times the misbehaviour happened (1 once it has).
    pub fired: Arc<AtomicU64>,
}

impl Proxy {
    /// Proxy to `server`, misbehaving (`how`) at the `at`-th ReadOk.
    pub fn start(server: &str, how: Misbehave, at: u64) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let seen = Arc::new(AtomicU64::new(0));
        let fired = Arc::new(AtomicU64::new(0));
        let (f, server) = (fired.clone(), server.to_string());
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(c) = c else { break };
                let Ok(s) = TcpStream::connect(&server) else {
                    break;
                };
                let _ = c.set_nodelay(true);
                let _ = s.set_nodelay(true);
                let (mut c2, mut s2) = (c.try_clone().unwrap(), s.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c2, &mut s2);
                    let _ = s2.shutdown(Shutdown::Both);
                });
                let (seen, f) = (seen.clone(), f.clone());
                std::thread::spawn(move || replies(s, c, how, at, &seen, &f));
            }
        });
        Proxy { addr, fired }
    }
}

/// Forward replies frame by frame, breaking the `at`-th ReadOk.
fn replies(
    mut from: TcpStream,
    mut to: TcpStream,
    how: Misbehave,
    at: u64,
    seen: &AtomicU64,
    fired: &AtomicU64,
) {
    let mut head = [0u8; 24];
    while from.read_exact(&mut head).is_ok() {
        let op = u16::from_le_bytes([head[6], head[7]]);
        let len = u32::from_le_bytes([head[16], head[17], head[18], head[19]]) as usize;
        let mut payload = vec![0u8; len];
        if from.read_exact(&mut payload).is_err() {
            break;
        }
        let chosen = op == READ_OK && len > 0 && seen.fetch_add(1, Ordering::SeqCst) + 1 == at;
        if chosen {
            fired.fetch_add(1, Ordering::SeqCst);
            match how {
                Misbehave::FlipBit => payload[len / 2 + 3] ^= 0x10,
                Misbehave::WrongTag => {
                    let tag = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
                    head[8..12].copy_from_slice(&tag.wrapping_add(7).to_le_bytes());
                }
                Misbehave::WrongLength => {
                    let short = u32::try_from(len - 4096).unwrap();
                    head[16..20].copy_from_slice(&short.to_le_bytes());
                    payload.truncate(len - 4096);
                }
                Misbehave::CutMidFrame => {
                    let _ = to.write_all(&head);
                    let _ = to.write_all(&payload[..len / 2]);
                    break;
                }
                Misbehave::Stall => {
                    // Silent, with the connection open, until well after the
                    // client has given up on it (FARMEM_TIMEOUT_MS).
                    std::thread::sleep(Duration::from_secs(20));
                    break;
                }
                Misbehave::Disconnect => break,
                Misbehave::ForgeKeepingCrc => forge_keeping_crc32c(&mut payload[..4096]),
            }
        }
        if to.write_all(&head).is_err() || to.write_all(&payload).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}

/// Change `page` so that its CRC32C is what it was. CRC32C is affine over
/// GF(2) for a fixed length: crc(x ^ d) = crc(x) ^ crc(d) ^ crc(0). So XOR in
/// a delta d with crc(d) = crc(0): its first 8 bytes are chosen (the
/// forgery), and its last 4 solve a 32x32 linear system (the last 32 bits
/// of a message map onto the CRC one to one).
fn forge_keeping_crc32c(page: &mut [u8]) {
    let n = page.len();
    let zero = crc32c::crc32c(&vec![0u8; n]);
    let linear = |d: &[u8]| crc32c::crc32c(d) ^ zero;
    let mut head = vec![0u8; n];
    head[..8].copy_from_slice(&[0x5A; 8]);
    let target = linear(&head);
    // Column i: the CRC's linear part for bit i of the last 4 bytes alone.
    let mut rows: Vec<(u32, u32)> = (0..32)
        .map(|i| {
            let mut e = vec![0u8; n];
            e[n - 4 + i / 8] = 1 << (i % 8);
            (linear(&e), 1u32 << i)
        })
        .collect();
    // Gaussian elimination: find the bits whose columns XOR to `target`.
    let mut want = target;
    let mut chosen = 0u32;
    for bit in (0..32).rev() {
        let Some(pivot) = rows.iter().position(|&(c, _)| c >> bit & 1 == 1) else {
            continue;
        };
        let (pc, pm) = rows.swap_remove(pivot);
        for r in &mut rows {
            if r.0 >> bit & 1 == 1 {
                r.0 ^= pc;
                r.1 ^= pm;
            }
        }
        if want >> bit & 1 == 1 {
            want ^= pc;
            chosen ^= pm;
        }
    }
    assert_eq!(want, 0, "the last 32 bits always reach every CRC");
    let mut delta = head;
    for i in 0..32 {
        if chosen >> i & 1 == 1 {
            delta[n - 4 + i / 8] ^= 1 << (i % 8);
        }
    }
    assert_eq!(linear(&delta), 0);
    let before = crc32c::crc32c(page);
    for (b, d) in page.iter_mut().zip(&delta) {
        *b ^= d;
    }
    assert_eq!(crc32c::crc32c(page), before, "the forgery keeps the CRC32C");
}
