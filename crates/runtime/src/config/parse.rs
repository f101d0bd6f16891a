//! Parsers of setting values: each returns the value, or why it is not one
//! (the caller names the variable and the value around it).

use super::{
    FileDirect, Integrity, RawSyscalls, Redundancy, Servers, Transport, LOG_LEVELS, MAX_ARENA,
    MAX_EC_DATA, MAX_EC_PARITY, MAX_REPLICAS,
};
use farmem_sys::units::{format_size, parse_size};
use farmem_wire::ServerAddr;
use std::path::PathBuf;

/// `1`, `true`, `yes`, `on` or their opposites (any case).
pub(super) fn boolean(v: &str) -> Result<bool, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" | "" => Ok(false),
        _ => Err("expected 1 or 0".into()),
    }
}

/// A whole number in `lo..=hi`, as the field's type `T` (which holds `hi`).
pub(super) fn int<T: TryFrom<u64>>(v: &str, lo: u64, hi: u64) -> Result<T, String> {
    let n: u64 = v
        .trim()
        .parse()
        .map_err(|_| format!("expected a whole number in {lo}..={hi}"))?;
    if !(lo..=hi).contains(&n) {
        return Err(format!("must be in {lo}..={hi}"));
    }
    T::try_from(n).map_err(|_| format!("must be in {lo}..={hi}"))
}

/// A path; `empty` says what to do about an empty one.
pub(super) fn path(v: &str, empty: &str) -> Result<Option<PathBuf>, String> {
    if v.trim().is_empty() {
        return Err(empty.into());
    }
    Ok(Some(PathBuf::from(v)))
}

/// The local budget: at least 1M, at most this machine's memory.
pub(super) fn local(v: &str) -> Result<u64, String> {
    let b = parse_size(v)?;
    if b < 1 << 20 {
        return Err("the local budget must be at least 1M".into());
    }
    let phys = farmem_sys::phys_memory();
    if b > phys {
        return Err(format!(
            "larger than this machine's physical memory ({}); use a smaller budget",
            format_size(phys)
        ));
    }
    Ok(b)
}

/// `@DIR`, or a list of server addresses a client can connect to.
pub(super) fn servers(v: &str) -> Result<Servers, String> {
    if let Some(dir) = v.trim().strip_prefix('@') {
        if dir.is_empty() || dir.contains(',') {
            return Err(
                "@DIR names one rendezvous directory and nothing else (e.g. @/shared/job42)".into(),
            );
        }
        return Ok(Servers::Rendezvous(PathBuf::from(dir)));
    }
    let list = ServerAddr::parse_list(v).map_err(|e| e.to_string())?;
    if let Some(a) = list.iter().find(|a| !a.is_connectable()) {
        return Err(format!(
            "{a} has port 0, which a client cannot connect to; give the port the server printed"
        ));
    }
    Ok(Servers::from_list(list))
}

/// The arena: 16M to 16T, rounded up to 2 MiB.
pub(super) fn arena(v: &str) -> Result<u64, String> {
    let b = parse_size(v)?;
    if !(1 << 24..=MAX_ARENA).contains(&b) {
        return Err("must be between 16M and 16T".into());
    }
    Ok(b.next_multiple_of(1 << 21))
}

pub(super) fn embedded_capacity(v: &str) -> Result<u64, String> {
    let b = parse_size(v)?;
    if b < 1 << 20 {
        return Err("must be at least 1M".into());
    }
    Ok(b)
}

pub(super) fn threshold(v: &str) -> Result<u64, String> {
    let b = parse_size(v)?;
    if b == 0 {
        return Err(
            "a threshold of 0 would send every allocation to far memory; use at least 4K".into(),
        );
    }
    Ok(b)
}

/// `FARMEM_EVICT_BATCH`: `auto` (None) or 1..=[`super::MAX_EVICT_BATCH`].
pub(super) fn evict_batch(v: &str) -> Result<Option<u32>, String> {
    if v.trim().eq_ignore_ascii_case("auto") {
        return Ok(None);
    }
    int(v, 1, super::MAX_EVICT_BATCH as u64)
        .map(Some)
        .map_err(|e| format!("{e}, or auto"))
}

pub(super) fn file_direct(v: &str) -> Result<FileDirect, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "auto" => Ok(FileDirect::Auto),
        "1" | "on" | "true" => Ok(FileDirect::On),
        "0" | "off" | "false" => Ok(FileDirect::Off),
        _ => Err("expected auto, 1 or 0".into()),
    }
}

pub(super) fn integrity(v: &str) -> Result<Integrity, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "crc32c" => Ok(Integrity::Crc32c),
        "mac" => Ok(Integrity::Mac),
        _ => Err("expected crc32c or mac".into()),
    }
}

pub(super) fn redundancy(v: &str) -> Result<Option<Redundancy>, String> {
    let v = v.trim().to_ascii_lowercase();
    let expected = "expected replicas:N (N 1-3) or ec:K+M (K 2-12 data pages, M 1-4 parity pages a row), for example ec:4+2";
    if let Some(n) = v.strip_prefix("replicas:") {
        let n: usize = int(n, 1, MAX_REPLICAS as u64).map_err(|e| format!("replicas:N: {e}"))?;
        return Ok(Some(Redundancy::Replicas(n)));
    }
    let Some((k, m)) = v.strip_prefix("ec:").and_then(|r| r.split_once('+')) else {
        return Err(expected.into());
    };
    let data: usize = int(k, 2, MAX_EC_DATA as u64).map_err(|e| format!("ec:K+M, K: {e}"))?;
    let parity: usize = int(m, 1, MAX_EC_PARITY as u64).map_err(|e| format!("ec:K+M, M: {e}"))?;
    Ok(Some(Redundancy::Erasure { data, parity }))
}

pub(super) fn transport(v: &str) -> Result<Transport, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "auto" => Ok(Transport::Auto),
        "socket" => Ok(Transport::Socket),
        "ucx" => Ok(Transport::Ucx),
        "memfd" => Ok(Transport::Memfd),
        _ => Err("expected auto, memfd, socket or ucx".into()),
    }
}

pub(super) fn raw_syscalls(v: &str) -> Result<RawSyscalls, String> {
    match v {
        "dispatch" => Ok(RawSyscalls::Dispatch),
        "allow" => Ok(RawSyscalls::Allow),
        _ => Err(
            "use \"dispatch\" (system calls made without the C library go through \
                  farmem's table; the default) or \"allow\" (they run unchecked)"
                .into(),
        ),
    }
}

/// A log level by name (any case), as one of [`LOG_LEVELS`].
pub fn parse_log_level(v: &str) -> Result<&'static str, String> {
    let v = v.trim().to_ascii_lowercase();
    LOG_LEVELS
        .iter()
        .find(|l| **l == v)
        .copied()
        .ok_or_else(|| format!("expected one of {}", LOG_LEVELS.join(", ")))
}
