//! Values as `FARMEM_*` would spell them: what `farmem config` prints, and
//! what the parser reads back to the same configuration.

use super::{FileDirect, Integrity, RawSyscalls, Redundancy, Transport};
use std::path::PathBuf;

/// The getter of a `Copy` field.
pub(super) fn copy<T: Copy>(x: &T) -> T {
    *x
}

/// A number as it is.
pub(super) fn plain<T: ToString>(x: &T) -> String {
    x.to_string()
}

/// `1` or `0`.
pub(super) fn flag(b: &bool) -> String {
    u8::from(*b).to_string()
}

/// Exact, in the largest unit that divides it: parses back the same.
pub(super) fn size(b: &u64) -> String {
    for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        if *b != 0 && b.trailing_zeros() >= shift {
            return format!("{}{unit}", b >> shift);
        }
    }
    b.to_string()
}

/// A path, or `none` (in parentheses, which no path given here starts with).
pub(super) fn path_or(p: &Option<PathBuf>, none: &str) -> String {
    p.as_ref()
        .map_or_else(|| none.to_string(), |p| p.display().to_string())
}

pub(super) fn integrity(i: &Integrity) -> String {
    match i {
        Integrity::Crc32c => "crc32c",
        Integrity::Mac => "mac",
    }
    .into()
}

pub(super) fn evict_batch(b: &Option<u32>) -> String {
    b.map_or_else(|| "auto".into(), |n| n.to_string())
}

pub(super) fn file_direct(f: &FileDirect) -> String {
    match f {
        FileDirect::Auto => "auto",
        FileDirect::On => "1",
        FileDirect::Off => "0",
    }
    .into()
}

pub(super) fn transport(t: &Transport) -> String {
    match t {
        Transport::Auto => "auto",
        Transport::Socket => "socket",
        Transport::Ucx => "ucx",
        Transport::Memfd => "memfd",
    }
    .into()
}

pub(super) fn raw_syscalls(r: &RawSyscalls) -> String {
    match r {
        RawSyscalls::Dispatch => "dispatch",
        RawSyscalls::Allow => "allow",
    }
    .into()
}

/// `replicas:N` or `ec:K+M`; unset, as `FARMEM_REPLICAS` decides.
pub(super) fn redundancy(r: &Option<Redundancy>) -> String {
    match r {
        None => "(unset: FARMEM_REPLICAS decides)".into(),
        Some(Redundancy::Replicas(n)) => format!("replicas:{n}"),
        Some(Redundancy::Erasure { data, parity }) => format!("ec:{data}+{parity}"),
    }
}
