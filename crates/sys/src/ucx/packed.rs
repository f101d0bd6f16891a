//! What a peer's packed UCX blobs may be, checked before UCX reads them.
//! `ucp_ep_create` and `ucp_ep_rkey_unpack` take a pointer and no length:
//! a truncated or crafted blob would have UCX read past it. So:
//!
//! - A remote key must have the layout UCX packs (`ucp_rkey_pack_memh` in
//!   `src/ucp/core/ucp_rkey.c`, the same from 1.11 to today): the memory
//!   domains map (u64), the memory type (u8, host), then for each domain in
//!   the map its key's length (u8) and that many bytes, then either nothing
//!   or a system device (u8) and 3-byte distances. Every length must add up
//!   to exactly the blob's.
//! - A worker address must be of the address version this process's own
//!   UCX packs (its first byte's low four bits). Its further layout varies
//!   between UCX releases and is UCX's to parse.
//! - Both are handed to UCX as zero-padded copies ([`padded`]), so that a
//!   domain's own key reader that takes more than the length the peer
//!   declared reads zeros of ours, never memory past the blob.

use super::UcxError;

/// Zero bytes after a blob handed to UCX.
const PAD: usize = 256;
/// `UCS_MEMORY_TYPE_HOST`.
const MEMORY_TYPE_HOST: u8 = 0;
/// Bytes of one packed distance (`ucp_rkey_packed_distance_t`).
const DISTANCE_LEN: usize = 3;

fn bad(what: String) -> UcxError {
    UcxError::Call {
        call: "check of a peer's packed blob",
        status: what,
    }
}

/// Check a packed remote key's layout (module comment).
pub fn check_rkey(packed: &[u8]) -> Result<(), UcxError> {
    let n = packed.len();
    let Some((map, rest)) = packed.split_first_chunk::<8>() else {
        return Err(bad(format!(
            "a remote key of {n} bytes is shorter than its header"
        )));
    };
    let md_map = u64::from_le_bytes(*map);
    if md_map == 0 {
        return Err(bad("a remote key names no memory domain".into()));
    }
    let Some((&mem_type, mut rest)) = rest.split_first() else {
        return Err(bad(format!("a remote key of {n} bytes has no memory type")));
    };
    if mem_type != MEMORY_TYPE_HOST {
        return Err(bad(format!(
            "a remote key of memory type {mem_type}, not host memory"
        )));
    }
    for md in (0..64).filter(|b| md_map >> b & 1 == 1) {
        let Some((&len, after)) = rest.split_first() else {
            return Err(bad(format!(
                "a remote key of {n} bytes ends before domain {md}'s key"
            )));
        };
        let len = usize::from(len);
        if after.len() < len {
            return Err(bad(format!(
                "domain {md}'s key claims {len} bytes, and the remote key has {} left",
                after.len()
            )));
        }
        rest = &after[len..];
    }
    if !rest.is_empty() && (rest.len() - 1) % DISTANCE_LEN != 0 {
        return Err(bad(format!(
            "a remote key with {} bytes after its domains' keys (nothing, or a device and 3-byte distances)",
            rest.len()
        )));
    }
    Ok(())
}

/// Check a peer's worker address against this process's own (`mine`, as
/// its UCX packs it): the same address version.
pub fn check_address(peer: &[u8], mine: &[u8]) -> Result<(), UcxError> {
    const VERSION: u8 = 0x0F;
    match (peer.first(), mine.first()) {
        (Some(p), Some(m)) if p & VERSION == m & VERSION => Ok(()),
        (Some(p), Some(m)) => Err(bad(format!(
            "a worker address of UCX address version {}, and this process's UCX packs version {}",
            p & VERSION,
            m & VERSION
        ))),
        _ => Err(bad("an empty worker address".into())),
    }
}

/// `blob` followed by zeros, for a UCX call that takes no length.
pub fn padded(blob: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(blob.len() + PAD);
    v.extend_from_slice(blob);
    v.resize(blob.len() + PAD, 0);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(map: u64, keys: &[&[u8]], tail: &[u8]) -> Vec<u8> {
        let mut v = map.to_le_bytes().to_vec();
        v.push(MEMORY_TYPE_HOST);
        for k in keys {
            v.push(u8::try_from(k.len()).unwrap());
            v.extend_from_slice(k);
        }
        v.extend_from_slice(tail);
        v
    }

    #[test]
    fn remote_keys_must_add_up_to_their_length() {
        let good = key(0b101, &[&[1; 16], &[2; 40]], &[]);
        assert!(check_rkey(&good).is_ok());
        assert!(check_rkey(&key(0b1, &[&[1; 8]], &[7, 1, 2, 3, 4, 5, 6])).is_ok());
        for cut in 0..good.len() {
            assert!(check_rkey(&good[..cut]).is_err(), "cut at {cut}");
        }
        assert!(check_rkey(&key(0, &[], &[])).is_err(), "no domain");
        assert!(
            check_rkey(&key(0b1, &[&[1; 8]], &[9, 9])).is_err(),
            "stray bytes"
        );
        let mut cuda = good.clone();
        cuda[8] = 2;
        assert!(check_rkey(&cuda).is_err(), "not host memory");
        let mut long = key(0b1, &[&[1; 8]], &[]);
        long[9] = 200; // claims 200 bytes
        let e = check_rkey(&long).unwrap_err().to_string();
        assert!(e.contains("claims 200 bytes"), "{e}");
    }

    #[test]
    fn addresses_must_be_of_this_ucx_version() {
        assert!(check_address(&[0x10, 1, 2], &[0x30, 9]).is_ok());
        assert!(check_address(&[0x11, 1, 2], &[0x30, 9]).is_err());
        assert!(check_address(&[], &[0x30]).is_err());
        let p = padded(&[1, 2, 3]);
        assert_eq!(p.len(), 3 + PAD);
        assert!(p[3..].iter().all(|&b| b == 0));
    }
}
