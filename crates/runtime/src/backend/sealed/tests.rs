//! The seal over an in-memory pipe: frames sealed by the server's side of
//! the codec (`SessionKey::seal_frame`) arrive in pieces of every size, and
//! whatever an attacker on the path changes, drops, replays or reorders
//! fails at the read that would have handed it over.

use super::*;
use farmem_wire::auth::Secret;
use farmem_wire::{ErrorCode, Frame, Op, PAGE_SIZE};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// What the client receives, delivered at most `piece` bytes a read, and
/// what it sends.
struct Pipe {
    inbox: Mutex<VecDeque<u8>>,
    sent: Arc<Mutex<Vec<u8>>>,
    piece: usize,
}

impl Transport for Pipe {
    fn send(&self, parts: &[&[u8]], _: Wait) -> io::Result<()> {
        let mut s = self.sent.lock().unwrap();
        for p in parts {
            s.extend_from_slice(p);
        }
        Ok(())
    }
    fn recv_exact(&self, buf: &mut [u8], w: Wait) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            match self.recv_some(&mut [&mut buf[done..]], w)? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => done += n,
            }
        }
        Ok(())
    }
    fn recv_some(&self, bufs: &mut [&mut [u8]], _: Wait) -> io::Result<usize> {
        let mut inbox = self.inbox.lock().unwrap();
        let mut n = 0;
        for b in bufs.iter_mut() {
            for x in b.iter_mut() {
                if n == self.piece {
                    return Ok(n);
                }
                let Some(v) = inbox.pop_front() else {
                    return Ok(n);
                };
                *x = v;
                n += 1;
            }
        }
        Ok(n)
    }
    fn is_local(&self) -> bool {
        false
    }
    fn same_host(&self) -> bool {
        false
    }
    fn closed(&self) -> bool {
        false
    }
}

const WAIT: Wait = Wait {
    spin_ns: 0,
    timeout_ns: 1_000_000,
};

fn key() -> SessionKey {
    Secret::from_bytes(vec![9; 32], std::path::Path::new("t"))
        .unwrap()
        .session_key(&[1; 32], &[2; 32])
}

/// The server's replies, each sealed in turn: a HelloOk, a ReadOk of two
/// pages, a WriteOk and an Error.
fn replies(k: &SessionKey) -> (Vec<Vec<u8>>, Vec<u8>) {
    let mut frames = vec![
        Frame::HelloOk {
            capacity_pages: 100,
            used_pages: 3,
        }
        .encode(1)
        .to_vec(),
        {
            let mut r = Frame::ReadOk { count: 2 }.encode(2).to_vec();
            r.extend((0..2 * PAGE_SIZE).map(|i| u8::try_from(i % 251).unwrap()));
            r
        },
        Frame::WriteOk { count: 1 }.encode(3).to_vec(),
        Frame::Error {
            code: ErrorCode::NotFound,
            message: "page 9 was never written",
        }
        .encode(4)
        .to_vec(),
    ];
    let plain = frames.concat();
    for (seq, f) in frames.iter_mut().enumerate() {
        k.seal_frame(Direction::ToClient, seq as u64, f).unwrap();
    }
    (frames, plain)
}

fn sealed_pipe(bytes: Vec<u8>, piece: usize) -> (Sealed, Arc<Mutex<Vec<u8>>>) {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let pipe = Pipe {
        inbox: Mutex::new(bytes.into()),
        sent: sent.clone(),
        piece,
    };
    (Sealed::new(Box::new(pipe), key()), sent)
}

/// Receive every frame the way the backend does (header, then payload),
/// the ReadOk's header and pages scattered in one read as `recv_reply` does.
fn receive_all(s: &Sealed) -> io::Result<Vec<u8>> {
    let mut got = Vec::new();
    for _ in 0..4 {
        let mut hb = [0u8; HEADER_LEN];
        let mut data = vec![0u8; 2 * PAGE_SIZE];
        let mut n = 0;
        while n < HEADER_LEN {
            let (h, d) = (&mut hb[n..], &mut data[..]);
            let r = s.recv_some(&mut [h, d], WAIT)?;
            assert!(r > 0, "the pipe ran dry");
            n += r;
        }
        let h = Header::decode(&hb)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        let mut payload = vec![0u8; h.len as usize];
        let in_data = n - HEADER_LEN;
        payload[..in_data].copy_from_slice(&data[..in_data]);
        s.recv_exact(&mut payload[in_data..], WAIT)?;
        got.extend_from_slice(&hb);
        got.extend_from_slice(&payload);
    }
    Ok(got)
}

#[test]
fn sealed_frames_arrive_whole_in_pieces_of_any_size() {
    let k = key();
    let (frames, plain) = replies(&k);
    for piece in [1, 2, 7, 23, 24, 25, 31, 32, 33, 100, 4096, 1 << 20] {
        let (s, _) = sealed_pipe(frames.concat(), piece);
        assert_eq!(receive_all(&s).unwrap(), plain, "pieces of {piece}");
    }
}

#[test]
fn a_changed_byte_of_any_header_or_covered_payload_is_refused() {
    let k = key();
    let (frames, _) = replies(&k);
    let all = frames.concat();
    // Every byte a tag covers (headers, the HelloOk's and Error's payload),
    // and every tag byte.
    let mut covered = Vec::new();
    let mut at = 0;
    for f in &frames {
        let h = Header::decode(f[..HEADER_LEN].try_into().unwrap()).unwrap();
        let c = HEADER_LEN + covered_len(&h) + TAG_LEN;
        covered.extend(at..at + c);
        at += f.len();
    }
    for &i in covered.iter().step_by(3) {
        let mut bytes = all.clone();
        bytes[i] ^= 0x40;
        let (s, _) = sealed_pipe(bytes, 64);
        let e = receive_all(&s).unwrap_err();
        assert!(
            e.to_string().contains("seal") || e.kind() == io::ErrorKind::InvalidData,
            "byte {i}: {e}"
        );
        // Once broken, nothing more is taken.
        assert!(s.recv_exact(&mut [0u8; 1], WAIT).is_err());
    }
}

#[test]
fn dropped_replayed_reordered_or_unsealed_frames_are_refused() {
    let k = key();
    let (f, plain) = replies(&k);
    let cases: [(&str, Vec<u8>); 4] = [
        ("dropped", [&f[0][..], &f[2], &f[3]].concat()),
        ("replayed", [&f[0][..], &f[0], &f[1]].concat()),
        ("reordered", [&f[1][..], &f[0]].concat()),
        ("unsealed", plain),
    ];
    for (what, bytes) in cases {
        let (s, _) = sealed_pipe(bytes, 1 << 20);
        let mut hb = [0u8; HEADER_LEN];
        let mut refused = false;
        for _ in 0..3 {
            if s.recv_exact(&mut hb, WAIT).is_err() {
                refused = true;
                break;
            }
            let h = Header::decode(&hb).unwrap();
            if s.recv_exact(&mut vec![0u8; h.len as usize], WAIT).is_err() {
                refused = true;
                break;
            }
        }
        assert!(refused, "{what}");
    }
}

#[test]
fn no_page_of_a_frame_with_a_forged_header_is_handed_over() {
    let k = key();
    let (frames, _) = replies(&k);
    let mut bytes = [&frames[0][..], &frames[1][..]].concat();
    // The ReadOk's tag: its header was changed on the way.
    let at = frames[0].len() + HEADER_LEN;
    bytes[at] ^= 1;
    let (s, _) = sealed_pipe(bytes, 1 << 20);
    let mut hb = [0u8; HEADER_LEN];
    s.recv_exact(&mut hb, WAIT).unwrap();
    s.recv_exact(&mut [0u8; 24], WAIT).unwrap();
    // A ReadOk's tag follows its header at once: the read of the header
    // itself fails, before the caller could take a page.
    let e = s.recv_exact(&mut hb, WAIT).unwrap_err();
    assert!(e.to_string().contains("failed its seal"), "{e}");
    let mut page = [0u8; PAGE_SIZE];
    assert!(s.recv_exact(&mut page, WAIT).is_err());
    assert!(page.iter().all(|&b| b == 0), "nothing landed");
}

#[test]
fn sent_frames_carry_their_tag_before_page_data() {
    let k = key();
    let (s, sent) = sealed_pipe(Vec::new(), 1);
    let head = Frame::Write { pages: &[4, 5] }.encode(8);
    let pages = [[0x11u8; PAGE_SIZE], [0x22u8; PAGE_SIZE]];
    s.send(&[&head, &pages[0], &pages[1]], WAIT).unwrap();
    let free = Frame::Free { start: 0, pages: 9 }.encode(9);
    s.send(&[&free], WAIT).unwrap();
    let mut want = head.to_vec();
    want.extend_from_slice(&pages[0]);
    want.extend_from_slice(&pages[1]);
    k.seal_frame(Direction::ToServer, 0, &mut want).unwrap();
    let mut f = free.to_vec();
    k.seal_frame(Direction::ToServer, 1, &mut f).unwrap();
    want.extend_from_slice(&f);
    assert_eq!(*sent.lock().unwrap(), want);
    assert_eq!(
        Header::decode(want[..HEADER_LEN].try_into().unwrap())
            .unwrap()
            .op,
        Op::Write
    );
    // Not a frame: refused, not sent unsealed.
    assert!(s.send(&[&[0u8; 8]], WAIT).is_err());
}
