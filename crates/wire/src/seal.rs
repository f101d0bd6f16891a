//! Sealed frames: after the handshake on an authenticated connection, every
//! frame in both directions carries a MAC under a key of that connection
//! alone, as SSH does after its key exchange. Without it, whoever sits on
//! the path could pass the handshake through and then rewrite what follows
//! (a Free, a HelloOk's figures, a UCX key, an Error).
//!
//! ```text
//! header[24] ‖ payload[..covered] ‖ tag[32] ‖ payload[covered..]
//! tag = BLAKE3-keyed(K, "farmem v1 frame" ‖ direction ‖ seq u64 ‖ header ‖ payload[..covered])
//! K   = HMAC-SHA256(secret, "farmem v1 session key" ‖ cn ‖ sn)   (auth::Secret::session_key)
//! ```
//!
//! - `covered` is the whole payload, except page data: a Write's page list is
//!   covered and its pages follow the tag; a ReadOk's pages all follow it.
//!   Page bytes have their own end-to-end check, which also covers the
//!   server's copy: CRC32C, or on an untrusted network `FARMEM_INTEGRITY=mac`.
//!   So the tag costs the same for a frame of one page or of 256.
//! - The tag sits before the page data, so a receiver checks the header and
//!   everything it acts on before it takes a single page.
//! - `seq` counts frames in each direction from 0 (the first frame after
//!   AuthOk), and each direction has its own label: a frame cannot be
//!   replayed, dropped, reordered or reflected back without the next tag
//!   failing.
//! - Each connection has its own key, from its own two fresh nonces: a frame
//!   of one connection is worthless on another.
//! - The header's `len` stays the payload's length; the tag is outside it,
//!   so the payload rules (`payload_len_ok`) are those of an open connection.

use crate::{Header, Op, HEADER_LEN};

/// Bytes of a frame's tag (a whole BLAKE3 output, compared in constant time).
pub const TAG_LEN: usize = 32;

/// Which way a frame travels; each direction's tags have their own label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    ToServer,
    ToClient,
}

/// The key that seals one connection's frames, derived from the shared
/// secret and both sides' handshake nonces. Its bytes are never printed.
#[derive(Clone)]
pub struct SessionKey([u8; 32]);

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKey(..)")
    }
}

impl SessionKey {
    pub(crate) fn from_bytes(k: [u8; 32]) -> SessionKey {
        SessionKey(k)
    }

    /// A frame's MAC, fed the header and the covered payload in pieces.
    pub fn frame_mac(&self, dir: Direction, seq: u64) -> FrameMac {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        h.update(b"farmem v1 frame");
        h.update(&[match dir {
            Direction::ToServer => 0,
            Direction::ToClient => 1,
        }]);
        h.update(&seq.to_le_bytes());
        FrameMac(h)
    }

    /// The tag of a frame whose header and covered payload are `covered`.
    pub fn tag(&self, dir: Direction, seq: u64, covered: &[u8]) -> [u8; TAG_LEN] {
        let mut m = self.frame_mac(dir, seq);
        m.update(covered);
        m.finish()
    }

    /// Insert the tag into `frame`, one whole frame (its header first), at
    /// the place [`covered_len`] gives.
    pub fn seal_frame(
        &self,
        dir: Direction,
        seq: u64,
        frame: &mut Vec<u8>,
    ) -> Result<(), Unsealable> {
        let at = frame_covered(frame)?;
        let tag = self.tag(dir, seq, &frame[..at]);
        frame.splice(at..at, tag);
        Ok(())
    }
}

/// A frame handed to [`SessionKey::seal_frame`] that is no frame: a bug in
/// the sender, reported rather than sent unsealed.
#[derive(Debug, thiserror::Error)]
#[error("a frame to seal has no valid header or is shorter than its covered part")]
pub struct Unsealable;

/// Header plus covered payload of the frame at the front of `frame`.
fn frame_covered(frame: &[u8]) -> Result<usize, Unsealable> {
    let hb: &[u8; HEADER_LEN] = frame
        .get(..HEADER_LEN)
        .and_then(|b| b.try_into().ok())
        .ok_or(Unsealable)?;
    let h = Header::decode(hb).map_err(|_| Unsealable)?;
    let at = HEADER_LEN + covered_len(&h);
    (frame.len() >= at).then_some(at).ok_or(Unsealable)
}

/// A MAC over one frame in the making.
pub struct FrameMac(blake3::Hasher);

impl FrameMac {
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    pub fn finish(&self) -> [u8; TAG_LEN] {
        *self.0.finalize().as_bytes()
    }

    /// Whether `tag` is this frame's, compared in constant time.
    pub fn verify(&self, tag: &[u8]) -> bool {
        // `Hash`'s equality is constant-time (the `constant_time_eq` crate).
        self.0.finalize() == *tag
    }
}

/// Bytes of the payload of a frame with header `h` that its tag covers (and
/// that come before the tag): all of it but page data.
pub fn covered_len(h: &Header) -> usize {
    match h.op {
        Op::Write => h.count as usize * 8,
        Op::ReadOk => 0,
        _ => h.len as usize,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Secret;
    use crate::Frame;

    fn key(cn: u8) -> SessionKey {
        Secret::from_bytes(vec![1; 32], std::path::Path::new("t"))
            .unwrap()
            .session_key(&[cn; 32], &[2; 32])
    }

    #[test]
    fn tags_bind_key_direction_sequence_and_bytes() {
        let k = key(3);
        let f = Frame::Free { start: 1, pages: 2 }.encode(9);
        let t = k.tag(Direction::ToServer, 0, &f);
        let mut m = k.frame_mac(Direction::ToServer, 0);
        m.update(&f[..10]);
        m.update(&f[10..]);
        assert!(m.verify(&t), "pieces or whole, one tag");
        assert_ne!(t, k.tag(Direction::ToClient, 0, &f), "reflected");
        assert_ne!(t, k.tag(Direction::ToServer, 1, &f), "replayed");
        assert_ne!(
            t,
            key(4).tag(Direction::ToServer, 0, &f),
            "another connection"
        );
        let mut g = f.to_vec();
        g[HEADER_LEN] ^= 1;
        assert_ne!(t, k.tag(Direction::ToServer, 0, &g), "altered");
        let mut short = t;
        short[31] ^= 1;
        let mut m = k.frame_mac(Direction::ToServer, 0);
        m.update(&f);
        assert!(!m.verify(&short));
        assert!(!m.verify(&t[..16]), "a truncated tag");
        assert_eq!(format!("{k:?}"), "SessionKey(..)");
    }

    #[test]
    fn the_tag_goes_before_page_data() {
        let k = key(3);
        let mut w = Frame::Write { pages: &[5, 6] }.encode(1).to_vec();
        let head = w.len();
        w.extend_from_slice(&[0xAB; 2 * crate::PAGE_SIZE]);
        k.seal_frame(Direction::ToServer, 7, &mut w).unwrap();
        assert_eq!(w.len(), head + TAG_LEN + 2 * crate::PAGE_SIZE);
        assert_eq!(
            w[head..head + TAG_LEN],
            k.tag(Direction::ToServer, 7, &w[..head])
        );
        let mut r = Frame::ReadOk { count: 1 }.encode(1).to_vec();
        r.extend_from_slice(&[0xCD; crate::PAGE_SIZE]);
        k.seal_frame(Direction::ToClient, 0, &mut r).unwrap();
        assert_eq!(
            r[HEADER_LEN..HEADER_LEN + TAG_LEN],
            k.tag(Direction::ToClient, 0, &r[..HEADER_LEN])
        );
        assert!(k
            .seal_frame(Direction::ToClient, 0, &mut vec![0; 8])
            .is_err());
        let mut cut = Frame::Free { start: 1, pages: 2 }.encode(1).to_vec();
        cut.pop();
        assert!(k.seal_frame(Direction::ToServer, 0, &mut cut).is_err());
    }
}
