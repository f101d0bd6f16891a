//! A chunk's capacity and quota are reserved before UCX maps any memory
//! (issue 38): mapping a chunk writes (posix) or pins (verbs) all of it, so
//! a session at its quota must not make the server do that for every
//! 32-byte request. A mapped chunk, even unmapped again at once, raises
//! the process's peak virtual size (`VmPeak`) by the chunk; so this binary
//! holds one test, which other tests' mappings would disturb. glibc also
//! reserves 64 MiB of address space for each new malloc arena, as large as
//! a chunk, when a server thread first allocates; the test allows only
//! the main arena so that only a chunk can raise the peak by that much.

mod common;
use common::*;
use farmem_server::CHUNK_PAGES;
use farmem_wire::{self as wire, ErrorCode, Frame, PAGE_SIZE};

/// The process's peak virtual memory (`VmPeak`), in bytes.
fn peak_vm() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmPeak:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap();
    kb * 1024
}

#[test]
fn a_chunk_over_quota_or_capacity_maps_nothing() {
    if farmem_sys::ucx::available().is_err() {
        return skip(
            "a_chunk_over_quota_or_capacity_maps_nothing",
            "UCX is not installed",
        );
    }
    // SAFETY: mallopt only changes an allocator limit; no allocation is
    // in flight that depends on it. Existing arenas stay in use.
    let one_arena = unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
    assert_eq!(one_arena, 1, "mallopt(M_ARENA_MAX, 1) was refused");
    let chunk_bytes = CHUNK_PAGES * PAGE_SIZE as u64;
    // Capacity for two chunks; a quota under one chunk for session 1.
    let h = server_with_secret(2 * CHUNK_PAGES, |c| {
        c.session_quota_pages = CHUNK_PAGES / 2;
    });
    let mut a = Client::authenticated_session(&h, 1, 4 * CHUNK_PAGES);
    let r = a.send(Frame::UcxOpen, &[]);
    assert!(
        matches!(
            wire::decode_reply(&r.0, &r.1),
            Ok(wire::Reply::UcxOpenOk { .. })
        ),
        "UcxOpen: {}",
        String::from_utf8_lossy(&r.1)
    );
    let before = peak_vm();
    for _ in 0..4 {
        let (code, msg) = ucx_chunk(&mut a, 0).unwrap_err();
        assert_eq!(code, Some(ErrorCode::Capacity), "{msg}");
        assert!(msg.contains("quota"), "{msg}");
    }
    let grown = peak_vm().saturating_sub(before);
    assert!(
        grown < chunk_bytes / 4,
        "refused chunks raised the peak virtual size by {grown} bytes (a chunk is {chunk_bytes})"
    );
    assert_eq!(
        h.used_pages(),
        0,
        "nothing stays charged for a refused chunk"
    );
}
