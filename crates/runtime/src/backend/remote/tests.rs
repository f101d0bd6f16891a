//! The remote backend through a fake transport: an in-memory server that
//! speaks the real protocol (the wire codec decodes every request and
//! encodes every reply) and can die on demand. Striping, routes, owed
//! acknowledgements, refusals and replica fail-over are checked here
//! without sockets; the integration tests do the same against real servers.

use super::{Links, RemoteBackend};
#[path = "../../../../../tests/support/skip.rs"]
mod skip_support;
use crate::backend::transport::Transport;
use crate::backend::{Backend, BackendError, MemoryServers};
use crate::config::Config;
use farmem_sys::net::Wait;
use farmem_sys::PAGE_SIZE;
use farmem_wire::{self as wire, ErrorCode, Frame, Header, Request, HEADER_LEN};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::{Arc, Mutex};

/// One fake server's session: its pages, whether it has died, and its
/// UCX side where it offers one.
#[derive(Default)]
struct Store {
    pages: HashMap<u64, Vec<u8>>,
    dead: bool,
    /// Says it is leaving (`--drain`) in its Stats replies.
    draining: bool,
    /// Flips a bit in every page it sends back.
    corrupt: bool,
    ucx: Option<UcxSide>,
}

/// A real UCX worker and one chunk of registered memory (the posix test
/// path), so that a hostile server's address and keys are what UCX packs,
/// but for what it changes. Fields drop in order: memory, worker, context.
struct UcxSide {
    chunk: farmem_sys::ucx::Memory,
    worker: farmem_sys::ucx::Worker,
    _ctx: farmem_sys::ucx::Context,
}

impl UcxSide {
    fn new() -> UcxSide {
        use farmem_sys::ucx::{Context, Memory, Transports, Worker};
        let ctx = Context::with_transports(c"fake", false, Transports::PosixTestPath, &[]).unwrap();
        let worker = Worker::new(&ctx).unwrap();
        let len = farmem_sys::usize_from(wire::CHUNK_PAGES) * PAGE_SIZE;
        let chunk = Memory::map(&ctx, len, None).unwrap();
        UcxSide {
            chunk,
            worker,
            _ctx: ctx,
        }
    }
}

/// How a fake server lies about its one-sided pages (every server is
/// hostile until proven otherwise).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Hostile {
    /// Answers MemfdChunk with a descriptor of an ordinary file.
    FdOfAnotherFile,
    /// Answers MemfdChunk with a sealed memory file of the wrong size.
    ShortMemfd,
    /// Answers MemfdChunk without passing a descriptor.
    NoFd,
    /// Says its memory-file chunks are 1 page.
    MemfdChunkPages1,
    /// Says its UCX chunks are 1 page.
    UcxChunkPages1,
    /// Sends a real UCX key, its last 3 bytes cut off.
    UcxTruncatedKey,
    /// Sends a real UCX key, with a base half a chunk past its memory.
    UcxBaseOutside,
    /// Sends its real worker address with another address version.
    UcxAddressVersion,
}

/// One connection to a fake server. Requests are served as they arrive,
/// so a reply is always complete before the client reads it.
struct FakeLink {
    store: Arc<Mutex<Store>>,
    inbox: Mutex<Vec<u8>>,
    outbox: Mutex<VecDeque<u8>>,
    hostile: Option<Hostile>,
    /// Descriptors "passed" with the next reply.
    fds: Mutex<VecDeque<std::os::fd::OwnedFd>>,
    /// The ordinary file whose descriptor [`Hostile::FdOfAnotherFile`] passes.
    victim: Option<std::path::PathBuf>,
}

fn gone() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the fake server died")
}

impl FakeLink {
    fn serve(&self, h: &Header, payload: &[u8]) {
        let mut out = self.outbox.lock().unwrap();
        let mut store = self.store.lock().unwrap();
        let mut put = |b: &[u8]| out.extend(b.iter().copied());
        match wire::decode_request(h, payload).expect("the client sends valid frames") {
            Request::Hello { .. } => put(&Frame::HelloOk {
                capacity_pages: 1 << 20,
                used_pages: 0,
            }
            .encode(h.tag)),
            Request::Read { pages } => {
                let list: Vec<u64> = wire::pages(pages).collect();
                if let Some(p) = list.iter().find(|p| !store.pages.contains_key(p)) {
                    let msg = format!("page {p} was never written");
                    put(&Frame::Error {
                        code: ErrorCode::NotFound,
                        message: &msg,
                    }
                    .encode(h.tag));
                    return;
                }
                put(&Frame::ReadOk { count: h.count }.encode(h.tag));
                for p in list {
                    let mut bytes = store.pages[&p].clone();
                    bytes[100] ^= u8::from(store.corrupt) << 3;
                    put(&bytes);
                }
            }
            Request::Write { pages, data } => {
                for (p, d) in wire::pages(pages).zip(data.chunks_exact(PAGE_SIZE)) {
                    store.pages.insert(p, d.to_vec());
                }
                put(&Frame::WriteOk { count: h.count }.encode(h.tag));
            }
            Request::Free { start, pages } => {
                let before = store.pages.len();
                store.pages.retain(|&p, _| p < start || p >= start + pages);
                let released = u32::try_from(before - store.pages.len()).unwrap();
                put(&Frame::FreeOk { released }.encode(h.tag));
            }
            Request::Stats => put(&Frame::StatsOk(wire::ServerStats {
                capacity_pages: 1 << 20,
                used_pages: store.pages.len() as u64,
                sessions: 1,
                connections: 1,
                draining: store.draining,
            })
            .encode(h.tag)),
            Request::MemfdOpen => {
                let chunk_pages = match self.hostile {
                    Some(Hostile::MemfdChunkPages1) => 1,
                    _ => wire::CHUNK_PAGES,
                };
                put(&Frame::MemfdOpenOk { chunk_pages }.encode(h.tag));
            }
            Request::MemfdChunk { chunk } => {
                let fd = match self.hostile {
                    Some(Hostile::FdOfAnotherFile) => Some(
                        std::fs::OpenOptions::new()
                            .read(true)
                            .write(true)
                            .open(self.victim.as_ref().unwrap())
                            .unwrap()
                            .into(),
                    ),
                    Some(Hostile::ShortMemfd) => Some(
                        farmem_sys::memfd::create_sealed(c"short", PAGE_SIZE as u64, false)
                            .unwrap(),
                    ),
                    _ => None,
                };
                if let Some(fd) = fd {
                    self.fds.lock().unwrap().push_back(fd);
                }
                put(&Frame::MemfdChunkOk {
                    chunk,
                    pages: wire::CHUNK_PAGES,
                }
                .encode(h.tag));
            }
            Request::UcxOpen if self.hostile == Some(Hostile::UcxChunkPages1) => {
                put(&Frame::UcxOpenOk {
                    chunk_pages: 1,
                    address: b"an address",
                }
                .encode(h.tag));
            }
            Request::UcxOpen => {
                let side = store.ucx.get_or_insert_with(UcxSide::new);
                let mut address = side.worker.address().unwrap();
                if self.hostile == Some(Hostile::UcxAddressVersion) {
                    address[0] ^= 0x07;
                }
                put(&Frame::UcxOpenOk {
                    chunk_pages: wire::CHUNK_PAGES,
                    address: &address,
                }
                .encode(h.tag));
            }
            Request::UcxChunk { .. } => {
                let side = store.ucx.as_ref().expect("UcxOpen came first");
                let mut rkey = side.chunk.pack_rkey().unwrap();
                let mut base = side.chunk.addr() as u64;
                match self.hostile {
                    Some(Hostile::UcxTruncatedKey) => rkey.truncate(rkey.len() - 3),
                    Some(Hostile::UcxBaseOutside) => {
                        base += wire::CHUNK_PAGES * PAGE_SIZE as u64 / 2;
                    }
                    _ => {}
                }
                put(&Frame::UcxChunkOk { base, rkey: &rkey }.encode(h.tag));
            }
            other => panic!("the fake server does not serve {other:?}"),
        }
    }

    fn dead(&self) -> bool {
        self.store.lock().unwrap().dead
    }
}

impl Transport for FakeLink {
    fn send(&self, parts: &[&[u8]], _wait: Wait) -> io::Result<()> {
        if self.dead() {
            return Err(gone());
        }
        let mut inbox = self.inbox.lock().unwrap();
        for p in parts {
            inbox.extend_from_slice(p);
        }
        while inbox.len() >= HEADER_LEN {
            let mut hb = [0u8; HEADER_LEN];
            hb.copy_from_slice(&inbox[..HEADER_LEN]);
            let h = Header::decode(&hb).expect("a valid header");
            let end = HEADER_LEN + h.len as usize;
            if inbox.len() < end {
                break;
            }
            let frame: Vec<u8> = inbox.drain(..end).collect();
            self.serve(&h, &frame[HEADER_LEN..]);
        }
        Ok(())
    }

    fn recv_exact(&self, buf: &mut [u8], _wait: Wait) -> io::Result<()> {
        if self.dead() {
            return Err(gone());
        }
        let mut out = self.outbox.lock().unwrap();
        if out.len() < buf.len() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "no reply"));
        }
        for b in buf.iter_mut() {
            *b = out.pop_front().unwrap();
        }
        Ok(())
    }

    fn recv_some(&self, bufs: &mut [&mut [u8]], _wait: Wait) -> io::Result<usize> {
        if self.dead() {
            return Ok(0);
        }
        let mut out = self.outbox.lock().unwrap();
        if out.is_empty() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "no reply"));
        }
        let mut n = 0;
        for buf in bufs.iter_mut() {
            for b in buf.iter_mut() {
                let Some(v) = out.pop_front() else {
                    return Ok(n);
                };
                *b = v;
                n += 1;
            }
        }
        Ok(n)
    }

    fn is_local(&self) -> bool {
        true
    }

    fn same_host(&self) -> bool {
        false
    }

    fn closed(&self) -> bool {
        self.dead()
    }

    fn recv_exact_with_fd(
        &self,
        buf: &mut [u8],
        wait: Wait,
    ) -> io::Result<Option<std::os::fd::OwnedFd>> {
        self.recv_exact(buf, wait)?;
        Ok(self.fds.lock().unwrap().pop_front())
    }
}

/// `n` fake servers with `conns` links each, and the backend over them.
fn backend(n: usize, cfg: &str) -> (RemoteBackend, Vec<Arc<Mutex<Store>>>) {
    let (b, stores) = fake_servers(n, &format!("{cfg} transport=socket"), None, None);
    (b.unwrap(), stores)
}

/// `n` fake servers, hostile as `hostile` says, and the backend over them
/// (or why it could not be made).
fn fake_servers(
    n: usize,
    cfg: &str,
    hostile: Option<Hostile>,
    victim: Option<&std::path::Path>,
) -> (Result<RemoteBackend, BackendError>, Vec<Arc<Mutex<Store>>>) {
    let cfg = Config::from_str_config(cfg).unwrap();
    let stores: Vec<_> = (0..n)
        .map(|_| Arc::new(Mutex::new(Store::default())))
        .collect();
    let links = stores
        .iter()
        .enumerate()
        .map(|(i, st)| Links {
            name: format!("fake{i}"),
            links: (0..cfg.conns)
                .map(|_| {
                    Box::new(FakeLink {
                        store: st.clone(),
                        inbox: Mutex::new(Vec::new()),
                        outbox: Mutex::new(VecDeque::new()),
                        hostile,
                        fds: Mutex::new(VecDeque::new()),
                        victim: victim.map(std::path::Path::to_path_buf),
                    }) as Box<dyn Transport>
                })
                .collect(),
        })
        .collect();
    let b = RemoteBackend::from_links(&cfg, links, 1 << 16, [7; wire::TOKEN_LEN]);
    (b, stores)
}

fn page(p: u64, round: u8) -> Vec<u8> {
    (0..PAGE_SIZE)
        .map(|i| p.to_le_bytes()[0].wrapping_mul(31) ^ i.to_le_bytes()[0] ^ round)
        .collect()
}

fn write(b: &RemoteBackend, pages: &[u64], round: u8) -> Result<(), BackendError> {
    let data: Vec<Vec<u8>> = pages.iter().map(|&p| page(p, round)).collect();
    let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    b.write(pages, &refs)
}

fn check(b: &RemoteBackend, pages: &[u64], round: u8) {
    let mut buf = vec![0u8; pages.len() * PAGE_SIZE];
    b.read(pages, &mut buf).unwrap();
    for (i, &p) in pages.iter().enumerate() {
        assert!(
            buf[i * PAGE_SIZE..(i + 1) * PAGE_SIZE] == page(p, round)[..],
            "page {p} round {round}"
        );
    }
}

#[test]
fn pages_are_striped_by_route_and_read_back_in_any_order() {
    let (b, stores) = backend(3, "stripe=2 conns=2");
    let pages: Vec<u64> = (0..48).collect();
    for batch in pages.chunks(16) {
        write(&b, batch, 1).unwrap();
    }
    // Stripe unit u (2 pages) lives on server u % 3.
    for (s, st) in stores.iter().enumerate() {
        let st = st.lock().unwrap();
        assert_eq!(st.pages.len(), 16, "server {s}");
        assert!(st.pages.keys().all(|&p| (p / 2) % 3 == s as u64));
    }
    let mixed: Vec<u64> = (0..48).rev().step_by(5).collect();
    check(&b, &mixed, 1);
    // More writes than a connection may owe acknowledgements for, each
    // overwriting: every later read sees the last bytes.
    for round in 2..40u8 {
        write(&b, &[5, 6, 7], round).unwrap();
    }
    check(&b, &[7, 6, 5], 39);
}

#[test]
fn a_refusal_names_the_server() {
    let (b, _) = backend(2, "stripe=1 conns=1");
    let mut buf = vec![0u8; PAGE_SIZE];
    match b.read(&[3], &mut buf) {
        Err(BackendError::Refused { server, code, .. }) => {
            assert_eq!(server, "fake1");
            assert_eq!(code, Some(ErrorCode::NotFound));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn free_drains_owed_writes_before_it_frees() {
    let (b, stores) = backend(1, "stripe=64 conns=1");
    write(&b, &[1, 2, 3], 1).unwrap();
    b.free(0, 3).unwrap();
    let st = stores[0].lock().unwrap();
    assert_eq!(st.pages.keys().copied().collect::<Vec<_>>(), vec![3]);
}

#[test]
fn with_two_copies_a_dead_server_is_failed_over() {
    let (b, stores) = backend(3, "stripe=1 conns=2 replicas=2");
    let pages: Vec<u64> = (0..30).collect();
    write(&b, &pages, 1).unwrap();
    stores[1].lock().unwrap().dead = true;
    check(&b, &pages, 1);
    // Writes go on to the live copies, and read back.
    write(&b, &pages, 2).unwrap();
    check(&b, &pages, 2);
    let h = b.health().unwrap();
    assert!(h.contains("servers down: fake1"), "{h}");
}

#[test]
fn with_one_copy_a_dead_server_is_an_error_naming_it() {
    let (b, stores) = backend(2, "stripe=1 conns=1");
    write(&b, &[0, 1], 1).unwrap();
    stores[0].lock().unwrap().dead = true;
    let mut buf = vec![0u8; 2 * PAGE_SIZE];
    match b.read(&[0, 1], &mut buf) {
        Err(BackendError::Io { server, .. }) => assert_eq!(server, "fake0"),
        other => panic!("{other:?}"),
    }
}

fn error_text(r: Result<(), BackendError>) -> String {
    match r {
        Ok(()) => panic!("a hostile server was trusted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_descriptor_of_another_file_is_refused_and_never_written() {
    let victim = std::env::temp_dir().join(format!("farmem-victim-{}", std::process::id()));
    let before = vec![0x5Au8; 4 * PAGE_SIZE];
    std::fs::write(&victim, &before).unwrap();
    let (b, _) = fake_servers(
        1,
        "transport=memfd",
        Some(Hostile::FdOfAnotherFile),
        Some(&victim),
    );
    let b = b.unwrap();
    let e = error_text(b.prepare(0, 4));
    assert!(
        e.contains("fake0") && e.contains("not a sealed memory file"),
        "{e}"
    );
    // A write-back of those pages asks again, and is refused again.
    let e = error_text(write(&b, &[0, 1], 3));
    assert!(e.contains("not a sealed memory file"), "{e}");
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        before,
        "the other file was written"
    );
    let _ = std::fs::remove_file(&victim);
}

#[test]
fn a_memory_file_of_the_wrong_size_is_refused() {
    let (b, _) = fake_servers(1, "transport=memfd", Some(Hostile::ShortMemfd), None);
    let e = error_text(b.unwrap().prepare(0, 1));
    assert!(e.contains("bytes long") && e.contains("fake0"), "{e}");
}

#[test]
fn a_grant_without_a_descriptor_is_refused() {
    let (b, _) = fake_servers(1, "transport=memfd", Some(Hostile::NoFd), None);
    let e = error_text(b.unwrap().prepare(0, 1));
    assert!(e.contains("passed no descriptor"), "{e}");
}

#[test]
fn chunk_sizes_other_than_the_protocols_are_refused() {
    for (hostile, transport) in [
        (Hostile::MemfdChunkPages1, "memfd"),
        (Hostile::UcxChunkPages1, "ucx"),
    ] {
        if transport == "ucx" && farmem_sys::ucx::available().is_err() {
            continue;
        }
        let (b, _) = fake_servers(1, &format!("transport={transport}"), Some(hostile), None);
        let e = match b {
            Ok(_) => panic!("{hostile:?}: a 1-page chunk was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(
            e.contains("fake0") && e.contains("16384"),
            "{hostile:?}: {e}"
        );
    }
}

#[test]
fn a_truncated_ucx_key_a_base_outside_its_memory_or_a_foreign_address_is_refused() {
    if farmem_sys::ucx::available().is_err() {
        return skip_support::skip(
            "a_truncated_ucx_key_a_base_outside_its_memory_or_a_foreign_address_is_refused",
            "UCX is not installed",
        );
    }
    for (hostile, says) in [
        (Hostile::UcxTruncatedKey, "remote key"),
        (
            Hostile::UcxBaseOutside,
            "outside the memory its key maps here",
        ),
    ] {
        let (b, _) = fake_servers(1, "transport=ucx", Some(hostile), None);
        let e = error_text(b.unwrap().prepare(0, 1));
        assert!(e.contains("fake0") && e.contains(says), "{hostile:?}: {e}");
    }
    let (b, _) = fake_servers(1, "transport=ucx", Some(Hostile::UcxAddressVersion), None);
    let e = match b {
        Ok(_) => panic!("an address of another UCX version was taken"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("address version"), "{e}");
}

/// Every page of `pages` is on exactly `copies` of the live servers.
fn on_live_servers(stores: &[Arc<Mutex<Store>>], pages: &[u64], copies: usize) {
    for &p in pages {
        let n = stores
            .iter()
            .filter(|s| {
                let s = s.lock().unwrap();
                !s.dead && s.pages.contains_key(&p)
            })
            .count();
        assert_eq!(n, copies, "page {p} is on {n} live servers");
    }
}

#[test]
fn repair_gives_every_page_its_copies_back_and_a_second_loss_loses_nothing() {
    let (b, stores) = backend(4, "stripe=2 conns=2 replicas=2");
    // Pages 0..40 written; 40..64 allocated but never written.
    let pages: Vec<u64> = (0..40).collect();
    write(&b, &pages, 1).unwrap();
    stores[1].lock().unwrap().dead = true;
    check(&b, &pages, 1);
    assert_eq!(b.losses(), 1);
    let pass = b.repair_pass(&|p| p < 40, 64).unwrap();
    // Server 1 held the copies of half the units (copy 0 or 1 of units
    // u with u % 4 in {0, 1}): 20 pages.
    assert_eq!((pass.pages_short, pass.pages_copied), (20, 20), "{pass:?}");
    assert_eq!((pass.pages_left_short, pass.pages_lost), (0, 0), "{pass:?}");
    on_live_servers(&stores, &pages, 2);
    // Repaired units are routed to their new copies: a write after the
    // repair reaches two live servers, and survives a second loss.
    write(&b, &pages, 2).unwrap();
    on_live_servers(&stores, &pages, 2);
    stores[3].lock().unwrap().dead = true;
    check(&b, &pages, 2);
    // Two servers left, two copies: the next pass places everything again.
    let pass = b.repair_pass(&|p| p < 40, 64).unwrap();
    assert_eq!((pass.pages_left_short, pass.pages_lost), (0, 0), "{pass:?}");
    on_live_servers(&stores, &pages, 2);
    // One server left: nowhere to put a second copy, and the pass says so.
    stores[0].lock().unwrap().dead = true;
    check(&b, &pages, 2);
    let pass = b.repair_pass(&|p| p < 40, 64).unwrap();
    assert_eq!(pass.pages_left_short, 40, "{pass:?}");
    check(&b, &pages, 2);
    let h = b.health().unwrap();
    assert!(h.contains("40 still short"), "{h}");
}

#[test]
fn repair_copies_only_stored_pages_and_skips_ones_freed_meanwhile() {
    let (b, stores) = backend(3, "stripe=4 conns=1 replicas=2");
    let pages: Vec<u64> = (0..24).collect();
    write(&b, &pages, 1).unwrap();
    stores[0].lock().unwrap().dead = true;
    check(&b, &pages, 1);
    // The runtime says 0..24 hold content, but 8..12 were freed on the
    // servers meanwhile: the survivor says NotFound and they are left out.
    b.free(8, 4).unwrap();
    let pass = b.repair_pass(&|p| p < 24, 24).unwrap();
    assert_eq!((pass.pages_left_short, pass.pages_lost), (0, 0), "{pass:?}");
    let kept: Vec<u64> = (0..8).chain(12..24).collect();
    on_live_servers(&stores, &kept, 2);
    on_live_servers(&stores, &[8, 9, 10, 11], 0);
}

#[test]
fn a_leaving_server_is_moved_off_then_released() {
    let (b, stores) = backend(4, "stripe=2 conns=2 replicas=2");
    let pages: Vec<u64> = (0..48).collect();
    write(&b, &pages, 1).unwrap();
    assert!(!b.watch().unwrap(), "nobody is leaving yet");
    stores[2].lock().unwrap().draining = true;
    assert!(b.watch().unwrap());
    assert!(b.is_leaving(2) && !b.is_down(2));
    let pass = b.repair_pass(&|p| p < 48, 48).unwrap();
    assert_eq!((pass.pages_short, pass.pages_copied), (24, 24), "{pass:?}");
    // Released: down for the backend, and its pages are all elsewhere.
    assert!(b.is_down(2));
    stores[2].lock().unwrap().dead = true;
    on_live_servers(&stores, &pages, 2);
    check(&b, &pages, 1);
    write(&b, &pages, 2).unwrap();
    check(&b, &pages, 2);
    // Nothing was lost on the way, and no write reached fewer copies.
    assert_eq!(b.short_writes(), 0);
}

/// Pages held by the live fake servers, all told.
fn held(stores: &[Arc<Mutex<Store>>]) -> usize {
    stores
        .iter()
        .map(|s| s.lock().unwrap())
        .filter(|s| !s.dead)
        .map(|s| s.pages.len())
        .sum()
}

fn kill(stores: &[Arc<Mutex<Store>>], s: usize) {
    stores[s].lock().unwrap().dead = true;
}

#[test]
fn coded_rows_survive_any_two_lost_servers_at_one_and_a_half_times_the_data() {
    let (b, stores) = backend(6, "stripe=2 conns=2 redundancy=ec:4+2");
    // Whole rows (64 pages, 16 rows): 64 data pages and 32 parity pages.
    let pages: Vec<u64> = (0..64).collect();
    write(&b, &pages, 1).unwrap();
    assert_eq!(held(&stores), 96);
    check(&b, &pages, 1);
    // Pages alone: the parity is updated from the change.
    let some: Vec<u64> = vec![1, 6, 7, 13, 40, 63];
    for &p in &some {
        write(&b, &[p], 2).unwrap();
    }
    assert_eq!(held(&stores), 96);
    kill(&stores, 1);
    kill(&stores, 4);
    for &p in &pages {
        check(&b, &[p], if some.contains(&p) { 2 } else { 1 });
    }
    // Written with two places lost: the rows' parity is made from the
    // decoded row, and reads back through the same losses.
    let more: Vec<u64> = (16..24).chain([33, 50]).collect();
    write(&b, &more, 3).unwrap();
    for &p in &pages {
        let round = if more.contains(&p) {
            3
        } else if some.contains(&p) {
            2
        } else {
            1
        };
        check(&b, &[p], round);
    }
    assert!(b.short_writes() > 0);
    let h = b.health().unwrap();
    assert!(h.contains("erasure coding") && h.contains("ec:4+2"), "{h}");
    // A third loss in a row is more than two parity pages cover: an error
    // naming the lost servers, never zeros.
    kill(&stores, 2);
    let mut buf = vec![0u8; PAGE_SIZE];
    let e = b.read(&[2], &mut buf).unwrap_err().to_string();
    assert!(
        e.contains("fake1")
            && e.contains("fake2")
            && e.contains("fake4")
            && e.contains("at most 2 lost"),
        "{e}"
    );
}

#[test]
fn freeing_part_of_a_row_keeps_its_other_pages_decodable() {
    let (b, stores) = backend(6, "stripe=1 conns=1 redundancy=ec:4+2");
    let pages: Vec<u64> = (0..16).collect();
    write(&b, &pages, 1).unwrap();
    // Rows 0 and 2 in part (pages 2, 3 and 8, 9), row 1 whole (4..8).
    b.free(2, 8).unwrap();
    // Row 1's 4 pages and 2 parity pages are gone; the freed places of rows
    // 0 and 2 hold zeros.
    assert_eq!(held(&stores), 24 - 6);
    kill(&stores, 0);
    kill(&stores, 3);
    let kept: Vec<u64> = (0..2).chain(10..16).collect();
    for &p in &kept {
        check(&b, &[p], 1);
    }
    let mut buf = vec![1u8; PAGE_SIZE];
    for p in [2, 3, 8, 9] {
        b.read(&[p], &mut buf).unwrap();
        assert!(buf.iter().all(|&x| x == 0), "freed page {p}");
    }
}

#[test]
fn repair_rebuilds_a_lost_servers_places_and_two_more_losses_lose_nothing() {
    let (b, stores) = backend(8, "stripe=2 conns=2 redundancy=ec:4+2");
    let pages: Vec<u64> = (0..96).collect();
    write(&b, &pages[..48], 1).unwrap();
    write(&b, &pages[48..], 1).unwrap();
    // Pages 96..128 are allocated and never written.
    kill(&stores, 5);
    assert!(b.watch().is_ok());
    for c in pages.chunks(32) {
        check(&b, c, 1);
    }
    assert_eq!(b.losses(), 1);
    let pass = b.repair_pass(&|p| p < 96, 128).unwrap();
    assert!(pass.pages_short > 0 && pass.pages_copied > 0, "{pass:?}");
    assert_eq!((pass.pages_left_short, pass.pages_lost), (0, 0), "{pass:?}");
    // 96 data pages and 48 parity pages on the 7 servers left.
    assert_eq!(held(&stores), 144);
    kill(&stores, 0);
    kill(&stores, 2);
    for c in pages.chunks(32) {
        check(&b, c, 1);
    }
    write(&b, &pages[..10], 2).unwrap();
    check(&b, &pages[..10], 2);
    for c in pages[10..].chunks(32) {
        check(&b, c, 1);
    }
    // Five servers left for rows of six places: the pass says what it
    // could not place.
    let pass = b.repair_pass(&|p| p < 96, 128).unwrap();
    assert_eq!(pass.pages_lost, 0, "{pass:?}");
    assert!(pass.pages_left_short > 0, "{pass:?}");
    for c in pages[10..].chunks(32) {
        check(&b, c, 1);
    }
}

#[test]
fn a_coded_session_needs_a_server_for_every_place() {
    let (b, _) = fake_servers(5, "redundancy=ec:4+2 transport=socket", None, None);
    let e = match b {
        Ok(_) => panic!("ec:4+2 over 5 servers was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("ec:4+2") && e.contains("5 are given"), "{e}");
}

#[test]
fn a_coded_place_that_reads_back_wrong_is_taken_as_lost_and_rebuilt() {
    let (b, stores) = backend(7, "stripe=1 conns=1 redundancy=ec:4+2");
    let pages: Vec<u64> = (0..56).collect();
    write(&b, &pages, 1).unwrap();
    // Server 3 starts sending bad pages. Writing one page of each row reads
    // that page's old bytes and the row's parity: where one of them is on
    // server 3, its checksum gives it away, and the row is written from
    // its other places instead.
    stores[3].lock().unwrap().corrupt = true;
    let firsts: Vec<u64> = (0..14).map(|r| r * 4).collect();
    write(&b, &firsts, 2).unwrap();
    assert!(b.is_down(3));
    for &p in &pages {
        check(&b, &[p], if firsts.contains(&p) { 2 } else { 1 });
    }
    let pass = b.repair_pass(&|p| p < 56, 56).unwrap();
    assert_eq!((pass.pages_left_short, pass.pages_lost), (0, 0), "{pass:?}");
    // Rebuilt on the spare: two more losses lose nothing.
    kill(&stores, 0);
    kill(&stores, 6);
    for &p in &pages {
        check(&b, &[p], if firsts.contains(&p) { 2 } else { 1 });
    }
}

#[test]
fn a_leaving_servers_coded_places_move_off_and_it_is_released() {
    let (b, stores) = backend(7, "stripe=2 conns=1 redundancy=ec:4+2");
    let pages: Vec<u64> = (0..56).collect();
    write(&b, &pages, 1).unwrap();
    stores[2].lock().unwrap().draining = true;
    assert!(b.watch().unwrap());
    let pass = b.repair_pass(&|p| p < 56, 56).unwrap();
    assert!(pass.pages_copied > 0, "{pass:?}");
    assert_eq!((pass.pages_left_short, pass.pages_lost), (0, 0), "{pass:?}");
    // Released; its places are elsewhere, so two more losses lose nothing.
    assert!(b.is_down(2));
    kill(&stores, 2);
    kill(&stores, 0);
    kill(&stores, 5);
    for &p in &pages {
        check(&b, &[p], 1);
    }
    assert_eq!(b.short_writes(), 0);
}

/// A unit of 64 rows rebuilt in batches (48 rows, then the rest) with
/// some rows holding no content: every row with content gets its lost
/// place back, the empty ones are skipped, and two more losses after the
/// rebuild lose nothing.
#[test]
fn coded_rows_are_rebuilt_in_batches_skipping_empty_rows() {
    let (b, stores) = backend(7, "stripe=64 conns=2 redundancy=ec:4+2");
    // Three units' worth of rows (64 rows, 256 pages each), but rows
    // 5r + 2 never written.
    let rows = 3 * 64;
    let written: Vec<u64> = (0..rows)
        .filter(|r| r % 5 != 2)
        .flat_map(|r| r * 4..r * 4 + 4)
        .collect();
    for chunk in written.chunks(crate::MAX_BATCH) {
        write(&b, chunk, 1).unwrap();
    }
    kill(&stores, 1);
    for chunk in written.chunks(crate::MAX_BATCH) {
        check(&b, chunk, 1);
    }
    assert!(b.is_down(1));
    let stored = |p: u64| (p / 4) % 5 != 2 && p < rows * 4;
    // Server 1 held one place of every row of every unit it is in: one
    // page rebuilt for each row with content there, none for the others.
    let expected: u64 = (0..3)
        .filter(|&u| (0..6).any(|j| b.placement.server(u, j) == 1))
        .map(|u| (u * 64..u * 64 + 64).filter(|r| r % 5 != 2).count() as u64)
        .sum();
    assert!(expected > 0);
    let pass = b.repair_pass(&stored, rows * 4).unwrap();
    assert_eq!((pass.pages_left_short, pass.pages_lost), (0, 0), "{pass:?}");
    assert_eq!(pass.pages_copied, expected, "{pass:?}");
    kill(&stores, 0);
    kill(&stores, 4);
    for chunk in written.chunks(crate::MAX_BATCH) {
        check(&b, chunk, 1);
    }
    let mut buf = vec![0xAAu8; 4 * PAGE_SIZE];
    b.read(&[8, 9, 10, 11], &mut buf).unwrap();
    assert!(
        buf.iter().all(|&x| x == 0),
        "an empty row read as something"
    );
}
