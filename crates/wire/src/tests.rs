use super::*;
use proptest::prelude::*;

#[test]
fn every_request_code_is_listed_once() {
    let requests: Vec<Op> = (0..=0xFFu16)
        .filter_map(Op::from_u16)
        .filter(|op| (*op as u16) < 0x80)
        .collect();
    assert_eq!(requests, Op::REQUESTS, "Op::REQUESTS lists every request");
    let mut names: Vec<&str> = (0..=0xFFu16)
        .filter_map(Op::from_u16)
        .map(Op::name)
        .collect();
    let n = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), n, "each op has its own name");
}

/// `Op::ALL` holds exactly the ops that decode, each once, in code order,
/// and each round-trips through its code: a new op must join the list (and
/// so the server's metrics) to pass.
#[test]
fn every_op_is_listed_once() {
    let decoded: Vec<Op> = (0..=u16::MAX).filter_map(Op::from_u16).collect();
    assert_eq!(decoded, Op::ALL, "Op::ALL lists every op that decodes");
    for op in Op::ALL {
        assert_eq!(Op::from_u16(op as u16), Some(op));
    }
}

/// `ErrorCode::ALL` holds exactly the codes that decode, each once, in
/// code order, each with a name of its own.
#[test]
fn every_error_code_is_listed_once() {
    let decoded: Vec<ErrorCode> = (0..=u32::from(u16::MAX))
        .chain([u32::MAX - 1, u32::MAX])
        .filter_map(ErrorCode::from_u32)
        .collect();
    assert_eq!(
        decoded,
        ErrorCode::ALL,
        "ErrorCode::ALL lists every code that decodes"
    );
    for code in ErrorCode::ALL {
        assert_eq!(ErrorCode::from_u32(code as u32), Some(code));
    }
    let mut names: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.name()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(
        names.len(),
        ErrorCode::ALL.len(),
        "each code has its own name"
    );
}

#[test]
fn header_roundtrip() {
    let h = Header::new(Op::Read, 7, 3, 24);
    assert_eq!(Header::decode(&h.encode()).unwrap(), h);
}

#[test]
fn rejects_bad_frames() {
    let mut b = Header::new(Op::Read, 1, 2, 16).encode();
    b[0] = b'X';
    assert!(matches!(Header::decode(&b), Err(WireError::BadMagic(_))));
    let mut b = Header::new(Op::Read, 1, 2, 16).encode();
    b[4] = 9;
    assert_eq!(Header::decode(&b), Err(WireError::BadVersion(9)));
    let mut b = Header::new(Op::Read, 1, 2, 16).encode();
    b[6] = 0x42;
    assert_eq!(Header::decode(&b), Err(WireError::UnknownOp(0x42)));
    let b = Header::new(Op::Read, 1, 2, 17).encode();
    assert!(matches!(
        Header::decode(&b),
        Err(WireError::BadLength { .. })
    ));
    let b = Header::new(Op::Read, 1, MAX_FRAME_PAGES + 1, (MAX_FRAME_PAGES + 1) * 8).encode();
    assert_eq!(
        Header::decode(&b),
        Err(WireError::TooLarge(MAX_FRAME_PAGES + 1))
    );
    let b = Header::new(Op::Write, 1, 0, 0).encode();
    assert!(Header::decode(&b).is_err(), "empty writes are malformed");
}

#[test]
fn decode_write_splits_pages_and_data() {
    let mut p = Vec::new();
    p.extend_from_slice(&5u64.to_le_bytes());
    p.extend_from_slice(&[0xAB; PAGE_SIZE]);
    let h = Header::decode(&Header::new(Op::Write, 0, 1, u32::try_from(p.len()).unwrap()).encode())
        .unwrap();
    match decode_request(&h, &p).unwrap() {
        Request::Write { pages: pg, data } => {
            assert_eq!(pages(pg).collect::<Vec<_>>(), vec![5]);
            assert_eq!(data.len(), PAGE_SIZE);
        }
        other => panic!("decoded {other:?}"),
    }
}

#[test]
fn hello_validates_max_pages() {
    let mut p = vec![1u8; TOKEN_LEN];
    p.extend_from_slice(&(MAX_PAGES + 1).to_le_bytes());
    let h = Header::decode(&Header::new(Op::Hello, 0, 0, u32::try_from(p.len()).unwrap()).encode())
        .unwrap();
    assert!(decode_request(&h, &p).is_err());
}

#[test]
fn server_addresses_parse_and_print_back() {
    for (s, want) in [
        (
            "10.0.0.2:7070",
            ServerAddr::Tcp {
                host: "10.0.0.2".into(),
                port: 7070,
            },
        ),
        (
            "node7:7070",
            ServerAddr::Tcp {
                host: "node7".into(),
                port: 7070,
            },
        ),
        (
            "[::1]:0",
            ServerAddr::Tcp {
                host: "::1".into(),
                port: 0,
            },
        ),
        ("unix:/run/fm.sock", ServerAddr::Unix("/run/fm.sock".into())),
        (
            "unix:@farmem-1",
            ServerAddr::UnixAbstract("farmem-1".into()),
        ),
    ] {
        let a: ServerAddr = s.parse().unwrap();
        assert_eq!(a, want);
        assert_eq!(a.to_string(), s);
    }
    for (s, why) in [
        ("node7", "no :PORT"),
        ("node7:70000", "port"),
        (":7070", "host is empty"),
        ("::1:7070", "brackets"),
        ("[::1:7070", "unclosed"),
        ("[nothost]:1", "IPv6"),
        ("unix:", "empty"),
        ("unix:@", "empty"),
        ("a b:1", "space"),
    ] {
        let e = s.parse::<ServerAddr>().unwrap_err();
        assert!(e.to_string().contains(why), "{s}: {e}");
    }
    let long = format!("unix:@{}", "n".repeat(MAX_UNIX_NAME + 1));
    assert!(long.parse::<ServerAddr>().is_err());
    assert!(!"h:0".parse::<ServerAddr>().unwrap().is_connectable());
    let l = ServerAddr::parse_list(" a:1, ,unix:@b ").unwrap();
    assert_eq!(l.len(), 2);
    assert!(ServerAddr::parse_list(" , ").is_err());
}

/// Decode an encoded head: (header, fixed payload).
fn split(head: &[u8]) -> (Header, &[u8]) {
    let h = Header::decode(head[..HEADER_LEN].try_into().unwrap()).unwrap();
    (h, &head[HEADER_LEN..])
}

#[test]
fn requests_roundtrip_through_the_codec() {
    let token = [7u8; TOKEN_LEN];
    let head = Frame::Hello {
        token: &token,
        max_pages: 99,
    }
    .encode(3);
    let (h, p) = split(&head);
    assert_eq!((h.op, h.tag), (Op::Hello, 3));
    assert_eq!(
        decode_request(&h, p).unwrap(),
        Request::Hello {
            token,
            max_pages: 99
        }
    );
    let head = Frame::Free { start: 5, pages: 6 }.encode(4);
    let (h, p) = split(&head);
    assert_eq!(
        decode_request(&h, p).unwrap(),
        Request::Free { start: 5, pages: 6 }
    );
    let head = Frame::Stats.encode(5);
    let (h, p) = split(&head);
    assert_eq!(decode_request(&h, p).unwrap(), Request::Stats);
    // A Write's head ends with its page list; the data follows it.
    let head = Frame::Write { pages: &[9, 2] }.encode(6);
    let (h, list) = split(&head);
    assert_eq!((h.count, h.len as usize), (2, 2 * (8 + PAGE_SIZE)));
    let mut full = list.to_vec();
    full.extend(std::iter::repeat_n(1u8, 2 * PAGE_SIZE));
    match decode_request(&h, &full).unwrap() {
        Request::Write { pages: pg, data } => {
            assert_eq!(pages(pg).collect::<Vec<_>>(), vec![9, 2]);
            assert_eq!(data.len(), 2 * PAGE_SIZE);
        }
        other => panic!("decoded {other:?}"),
    }
}

#[test]
fn replies_roundtrip_through_the_codec() {
    let head = Frame::HelloOk {
        capacity_pages: 10,
        used_pages: 4,
    }
    .encode(1);
    let (h, p) = split(&head);
    assert_eq!(
        decode_reply(&h, p).unwrap(),
        Reply::HelloOk {
            capacity_pages: 10,
            used_pages: 4,
            page_size: PAGE_SIZE as u64
        }
    );
    let st = ServerStats {
        capacity_pages: 1,
        used_pages: 2,
        sessions: 3,
        connections: 4,
        draining: true,
    };
    let head = Frame::StatsOk(st).encode(2);
    let (h, p) = split(&head);
    assert_eq!(decode_reply(&h, p).unwrap(), Reply::StatsOk(st));
    // A flag this build does not know is refused, not ignored.
    let mut bad = p.to_vec();
    bad[32] |= 2;
    assert!(decode_reply(&h, &bad).is_err());
    let head = Frame::ReadOk { count: 3 }.encode(3);
    let (h, p) = split(&head);
    assert_eq!((h.len as usize, p.len()), (3 * PAGE_SIZE, 0));
    assert_eq!(decode_reply(&h, p).unwrap(), Reply::ReadOk { count: 3 });
    let head = Frame::FreeOk { released: 8 }.encode(4);
    let (h, p) = split(&head);
    assert_eq!(decode_reply(&h, p).unwrap(), Reply::FreeOk { released: 8 });
    let long = "x".repeat(MAX_ERROR_MSG + 10);
    let head = Frame::Error {
        code: ErrorCode::Capacity,
        message: &long,
    }
    .encode(5);
    let (h, p) = split(&head);
    assert_eq!(h.len as usize, MAX_ERROR_MSG, "cut to the limit");
    match decode_reply(&h, p).unwrap() {
        Reply::Error { code, message } => {
            assert_eq!(code, Some(ErrorCode::Capacity));
            assert_eq!(message.len(), MAX_ERROR_MSG);
        }
        other => panic!("decoded {other:?}"),
    }
    // A side door's name, and none too long or empty.
    let head = Frame::MemfdWhereOk {
        name: b"farmem-side-0123",
    }
    .encode(7);
    let (h, p) = split(&head);
    assert_eq!(
        decode_reply(&h, p).unwrap(),
        Reply::MemfdWhereOk {
            name: b"farmem-side-0123"
        }
    );
    let mut bad = Header::new(Op::MemfdWhereOk, 1, 0, 0).encode();
    assert!(Header::decode(&bad).is_err(), "an empty name");
    bad[16..20].copy_from_slice(&(u32::try_from(crate::MAX_UNIX_NAME).unwrap() + 1).to_le_bytes());
    assert!(
        Header::decode(&bad).is_err(),
        "a name longer than a socket's"
    );
    let head = Frame::MemfdWhere.encode(8);
    let (h, p) = split(&head);
    assert_eq!(decode_request(&h, p).unwrap(), Request::MemfdWhere);
    // A request is not a reply.
    let head = Frame::Stats.encode(6);
    let (h, p) = split(&head);
    assert!(decode_reply(&h, p).is_err());
}

proptest! {
    /// Any Read or Write the codec encodes decodes to the same pages, and
    /// its header passes the receiver's checks.
    #[test]
    fn page_lists_roundtrip(list in proptest::collection::vec(any::<u64>(), 1..=MAX_FRAME_PAGES as usize), write in any::<bool>(), tag in any::<u32>()) {
        let f = if write { Frame::Write { pages: &list } } else { Frame::Read { pages: &list } };
        let head = f.encode(tag);
        let (h, raw) = split(&head);
        prop_assert_eq!(h.tag, tag);
        prop_assert!(payload_len_ok(h.op, h.count, h.len));
        prop_assert_eq!(pages(raw).collect::<Vec<_>>(), list);
    }

    /// Arbitrary bytes never panic the decoder, and whatever it accepts
    /// re-encodes to the same bytes and has a payload length that fits
    /// the op and the limits.
    #[test]
    fn decoder_total(bytes in proptest::array::uniform24(any::<u8>())) {
        if let Ok(h) = Header::decode(&bytes) {
            prop_assert_eq!(h.encode(), bytes);
            prop_assert!(h.len as usize <= MAX_PAYLOAD);
            prop_assert!(payload_len_ok(h.op, h.count, h.len));
        }
    }

    /// Any request op (every one in `Op::REQUESTS`) with any count and
    /// payload: the request decoder never panics.
    #[test]
    fn request_decoder_total(op in proptest::sample::select(Op::REQUESTS.to_vec()), count in 0u32..4, payload in proptest::collection::vec(any::<u8>(), 0..256)) {
        let h = Header::new(op, 0, count, u32::try_from(payload.len()).unwrap());
        if let Ok(h) = Header::decode(&h.encode()) {
            let _ = decode_request(&h, &payload);
        }
    }

    /// Any reply op with any count and payload: the reply decoder (what a
    /// client reads from a server it does not trust) never panics.
    #[test]
    fn reply_decoder_total(code in proptest::sample::select((0x81u16..=0x8C).chain([0xFF]).collect::<Vec<_>>()), count in 0u32..4, payload in proptest::collection::vec(any::<u8>(), 0..256)) {
        let op = Op::from_u16(code).unwrap();
        let h = Header::new(op, 0, count, u32::try_from(payload.len()).unwrap());
        if let Ok(h) = Header::decode(&h.encode()) {
            let _ = decode_reply(&h, &payload);
        }
    }
}
