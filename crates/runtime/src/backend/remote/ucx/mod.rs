//! One-sided page I/O through UCX: a demand fetch is a `ucp_get_nbx`
//! into the fetch slot, polled to completion by the faulting thread; a
//! write-back is a `ucp_put_nbx` per copy from registered staging memory,
//! then a flush, so a page counts as far only once every put is complete
//! at its target. No memory server's CPU takes part over shared memory or
//! RDMA, and no thread of this process is woken.
//!
//! **Lanes, not a global lock.** Each lane is a UCX worker with an
//! endpoint to every server, its staging pages and its request memory. A
//! faulting thread takes a free lane (one atomic flag; it starts at a lane
//! chosen by its thread id, so threads rarely meet) and holds it for one
//! batch. Nothing is allocated on that path: UCX gets its request memory
//! from the lane (`UCP_OP_ATTR_FIELD_REQUEST`), remote keys are unpacked
//! for every lane when a chunk is granted (at allocation, outside the
//! fault handler: see [`UcxPages::ensure`]), and UCX's malloc and mmap
//! hooks are off (`farmem_sys::ucx`).
//!
//! Hazard (ordering): a read issued after a write of the same page must
//! return the written bytes, whichever lanes carry them. Thread A evicts
//! page p: put p on lane 1. Thread B refaults p at once: get p on lane 2.
//! Had A returned when the put was merely *issued* (UCX's completion means
//! the source buffer is reusable, not that the bytes arrived), B's get
//! could overtake the put and read the old bytes. So a write flushes every
//! endpoint it used (`ucp_ep_flush_nbx`: complete at the target) before it
//! returns, and only then does the runtime mark p far and let B fault it.
//!
//! Failures: endpoints run without UCX's peer-failure mode (which on one
//! host moves RMA off shared memory, measured 5× slower). A server that
//! dies is found by its control connection closing (checked before each
//! write-back), by an operation's error status, or by an operation not
//! completing within `FARMEM_TIMEOUT_MS`. The caller fails the server over
//! as on sockets.
//!
//! Hazard (a lane released with operations in flight): thread A's batch
//! has gets 1..4 in flight on lane 1; get 2 completes with an error. Had A
//! returned at once and released the lane, thread B could take lane 1 and
//! start a get in request slot 3 while UCX still owns it, or get 3 could
//! land late in a fetch slot the runtime has since checked and handed on.
//! So a batch never ends with an operation in flight: after a failure, the
//! rest are still waited for, within the same `FARMEM_TIMEOUT_MS`; whatever
//! is still in flight then retires the lane for good (a [`Retirable`]: it
//! stays held forever, and every taker skips it, never waits on it).

use crate::backend::{BackendError, Failure, OneSided};
use crate::config::MAX_REPLICAS;
use crate::sync::{Backoff, Retirable, RetirableGuard, Take};
use farmem_sys::ucx::{
    self, Context, Endpoint, Memory, Op, RemoteKey, Started, Transports, Worker,
};
use farmem_sys::PAGE_SIZE;
use farmem_wire::CHUNK_PAGES;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Mutex, OnceLock};

/// Most pages in one read or write.
const MAX_BATCH: usize = super::MAX_BATCH;

/// A page in a chunk without a key: never granted, or (a farmem bug) its
/// key missing for a live lane.
fn ungranted(s: usize, p: u64) -> Failure {
    Failure {
        server: s,
        why: format!("page {p} is in a chunk never granted (a farmem bug)"),
    }
}

/// One chunk's base address on a server and its key, unpacked per lane
/// (`None` for a lane retired before the grant: never used again).
struct ChunkKeys {
    base: u64,
    keys: Box<[Option<RemoteKey>]>,
}

/// The chunks granted on one server (a null pointer: not yet).
struct ServerChunks {
    chunks: Box<[AtomicPtr<ChunkKeys>]>,
}

impl Drop for ServerChunks {
    fn drop(&mut self) {
        for c in self.chunks.iter() {
            let p = c.swap(std::ptr::null_mut(), Ordering::AcqRel);
            if !p.is_null() {
                // SAFETY: every non-null pointer came from Box::into_raw in
                // `ensure` and is taken out exactly once, here.
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
}

struct LaneInner {
    /// One endpoint per server, in the backend's server order.
    eps: Vec<Endpoint>,
    staging: Memory,
    /// Request memory: `slots` requests of `stride` bytes, UCX's part
    /// before each pointer handed out. UCX writes it while the lane's
    /// holder has only a shared reference, hence the cells.
    requests: Box<[UnsafeCell<u8>]>,
    worker: Worker,
}

/// Why no lane was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NoLane {
    /// Every live lane is held: try again.
    AllBusy,
    /// Every lane is retired.
    AllRetired,
}

/// Take the first free lane of `lanes`, looking from `start` round;
/// retired lanes are skipped.
fn take_any<T>(
    lanes: &[Retirable<T>],
    start: usize,
) -> Result<(usize, RetirableGuard<'_, T>), NoLane> {
    let n = lanes.len();
    let mut live = false;
    for k in 0..n {
        let i = (start + k) % n;
        match lanes[i].try_take() {
            Take::Taken(g) => return Ok((i, g)),
            Take::Busy => live = true,
            Take::Retired => {}
        }
    }
    Err(if live {
        NoLane::AllBusy
    } else {
        NoLane::AllRetired
    })
}

/// How waiting for a batch's operations ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drained {
    /// None is in flight; `failed`: the first that completed with an
    /// error (its server, its status).
    Complete {
        failed: Option<(usize, ucx::Status)>,
    },
    /// `left` still in flight at the deadline (the first on `server`), and
    /// the first failure seen before.
    TimedOut {
        failed: Option<(usize, ucx::Status)>,
        server: usize,
        left: usize,
    },
}

/// Wait for every operation in `pending` (request index, server), calling
/// `progress` between rounds and `poll` for a request's status, until all
/// are complete or `timeout_ns` has passed on `now`: a failure does not
/// stop the wait (hazard in the module doc). Completed entries are moved
/// past the ones still in flight.
fn drain(
    pending: &mut [(usize, usize)],
    timeout_ns: u64,
    mut progress: impl FnMut(),
    mut poll: impl FnMut(usize) -> ucx::Status,
    mut now: impl FnMut() -> u64,
) -> Drained {
    let start = now();
    let mut left = pending.len();
    let mut failed = None;
    while left > 0 {
        progress();
        let mut k = 0;
        while k < left {
            let (r, s) = pending[k];
            let st = poll(r);
            if st == ucx::UCS_INPROGRESS {
                k += 1;
                continue;
            }
            if st != ucx::UCS_OK && failed.is_none() {
                failed = Some((s, st));
            }
            pending.swap(k, left - 1);
            left -= 1;
        }
        if left > 0 && now().saturating_sub(start) > timeout_ns {
            return Drained::TimedOut {
                failed,
                server: pending[0].1,
                left,
            };
        }
    }
    Drained::Complete { failed }
}

/// A lane: retired for good when a batch ends with operations still in
/// flight in its request memory (hazard in the module doc).
type Lane = Retirable<LaneInner>;

/// The UCX side of the remote backend.
pub(crate) struct UcxPages {
    // Drop order: keys, then endpoints and workers, then the slot
    // registration, then the context.
    servers: Box<[ServerChunks]>,
    lanes: Box<[Lane]>,
    slots: OnceLock<(usize, usize, Memory)>,
    grants: Mutex<()>,
    ctx: Context,
    stride: usize,
    timeout_ns: u64,
    /// Whether the first chunk's memory is mapped here (shared memory).
    local: AtomicBool,
}

/// A held lane (released on drop unless retired), and its index.
struct Held<'a> {
    index: usize,
    lane: RetirableGuard<'a, LaneInner>,
}

impl Held<'_> {
    fn inner(&self) -> &LaneInner {
        &self.lane
    }
}

/// Check a chunk's `base` from its server against what it must be: page
/// aligned, a whole chunk before the address space ends, and where the key
/// maps the chunk into this process (shared memory, the one-host test
/// path), inside one mapping, so that no copy reaches memory beyond it.
/// Over verbs the NIC holds the key to its registered range. Whether the
/// chunk is mapped here.
fn check_base(base: u64, key: &RemoteKey) -> Result<bool, String> {
    let len = CHUNK_PAGES * PAGE_SIZE as u64;
    if base == 0 || !base.is_multiple_of(PAGE_SIZE as u64) || base.checked_add(len).is_none() {
        return Err(format!(
            "the server's base address {base:#x} cannot start a chunk of {len} bytes"
        ));
    }
    let Some(p) = key.local_ptr(base) else {
        return Ok(false);
    };
    match farmem_sys::mem::within_one_mapping(p as usize, farmem_sys::usize_from(len)) {
        Ok(true) => Ok(true),
        Ok(false) => Err(format!(
            "the server's base address {base:#x} puts the chunk outside the memory its key maps here"
        )),
        Err(e) => Err(format!("this process's mappings cannot be read (/proc/self/maps: {e})")),
    }
}

impl UcxPages {
    /// A context on `transports` and `lanes` lanes, each with an endpoint
    /// to every server (`addresses`, their UCX worker addresses).
    pub(crate) fn new(
        addresses: &[Vec<u8>],
        max_pages: u64,
        timeout_ns: u64,
        transports: Transports,
    ) -> Result<UcxPages, ucx::UcxError> {
        let _inside = farmem_sys::Inside::enter();
        if addresses.len() > 64 {
            return Err(ucx::UcxError::Call {
                call: "connect",
                status: format!(
                    "{} servers; UCX pages reach at most 64 (use FARMEM_TRANSPORT=socket)",
                    addresses.len()
                ),
            });
        }
        let ctx = Context::with_transports(c"farmem", false, transports, &[])?;
        let nlanes = (farmem_sys::online_cpus() * 2).clamp(2, 16);
        let stride = ctx.request_size().next_multiple_of(64) + 64;
        let slots = MAX_BATCH * MAX_REPLICAS + addresses.len();
        let mut lanes = Vec::with_capacity(nlanes);
        for _ in 0..nlanes {
            let worker = Worker::new(&ctx)?;
            let eps = addresses
                .iter()
                .map(|a| Endpoint::connect(&worker, a))
                .collect::<Result<Vec<_>, _>>()?;
            let staging = Memory::map(&ctx, MAX_BATCH * PAGE_SIZE, None)?;
            lanes.push(Lane::new(LaneInner {
                eps,
                staging,
                requests: (0..slots * stride).map(|_| UnsafeCell::new(0)).collect(),
                worker,
            }));
        }
        let nchunks = farmem_sys::usize_from(max_pages.div_ceil(CHUNK_PAGES));
        let servers = addresses
            .iter()
            .map(|_| ServerChunks {
                chunks: (0..nchunks)
                    .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                    .collect(),
            })
            .collect();
        Ok(UcxPages {
            servers,
            lanes: lanes.into_boxed_slice(),
            slots: OnceLock::new(),
            grants: Mutex::new(()),
            ctx,
            stride,
            timeout_ns,
            local: AtomicBool::new(false),
        })
    }

    /// Register the runtime's fetch slots once, so gets land there without
    /// UCX registering anything on the fault path (best effort: without
    /// it UCX copies, as shared-memory transports always do).
    pub(crate) fn register_slots(&self, ptr: *mut u8, len: usize) {
        if let Ok(m) = Memory::map(&self.ctx, len, Some(ptr)) {
            let _ = self.slots.set((ptr as usize, ptr as usize + len, m));
        }
    }

    /// Whether the servers' memory is mapped in this process (UCX chose
    /// shared memory: the server is on this host).
    pub(crate) fn is_local(&self) -> bool {
        self.local.load(Ordering::Relaxed)
    }

    /// Make sure chunk `c` of server `s` is granted and its key unpacked on
    /// every lane; `grant` asks the server (a control round trip). Called
    /// when far memory is allocated, outside any fault handler: unpacking
    /// allocates inside UCX.
    pub(crate) fn ensure(
        &self,
        s: usize,
        c: u64,
        name: &str,
        grant: impl FnOnce() -> Result<(u64, Vec<u8>), BackendError>,
    ) -> Result<(), BackendError> {
        let _inside = farmem_sys::Inside::enter();
        let slot = &self.servers[s].chunks[farmem_sys::usize_from(c)];
        if !slot.load(Ordering::Acquire).is_null() {
            return Ok(());
        }
        let _g = self.grants.lock().unwrap_or_else(|p| p.into_inner());
        if !slot.load(Ordering::Acquire).is_null() {
            return Ok(());
        }
        let (base, packed) = grant()?;
        let mut keys = Vec::with_capacity(self.lanes.len());
        for i in 0..self.lanes.len() {
            // A retired lane is skipped, never waited on: it stays busy
            // for good, and no read or write takes it again, so its key
            // is never needed.
            let Some(held) = self.hold_live(i) else {
                keys.push(None);
                continue;
            };
            let key = held.inner().eps[s]
                .unpack(&packed)
                .map_err(|e| BackendError::Protocol {
                    server: name.to_string(),
                    why: format!("chunk {c}: its remote key is refused: {e}"),
                })?;
            if keys.iter().all(Option::is_none) {
                let local = check_base(base, &key).map_err(|why| BackendError::Protocol {
                    server: name.to_string(),
                    why: format!("chunk {c}: {why}"),
                })?;
                if s == 0 && c == 0 {
                    self.local.store(local, Ordering::Relaxed);
                }
            }
            keys.push(Some(key));
        }
        let boxed = Box::new(ChunkKeys {
            base,
            keys: keys.into_boxed_slice(),
        });
        slot.store(Box::into_raw(boxed), Ordering::Release);
        Ok(())
    }

    /// Chunk and offset of `page`.
    fn place(&self, page: u64) -> (usize, u64) {
        (
            farmem_sys::usize_from(page / CHUNK_PAGES),
            (page % CHUNK_PAGES) * PAGE_SIZE as u64,
        )
    }

    /// The granted keys of `page`'s chunk on server `s`.
    fn keys(&self, s: usize, page: u64) -> Option<&ChunkKeys> {
        let (c, _) = self.place(page);
        let p = self.servers[s].chunks.get(c)?.load(Ordering::Acquire);
        // SAFETY: non-null pointers are live boxes until `self` drops.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    /// The remote address of `page` on server `s` and its key on `lane`
    /// (a lane taken is live, so its key was unpacked at the grant).
    fn key(&self, s: usize, page: u64, lane: usize) -> Option<(u64, &RemoteKey)> {
        let keys = self.keys(s, page)?;
        Some((keys.base + self.place(page).1, keys.keys[lane].as_ref()?))
    }

    /// Lane `i`, waiting while another thread holds it; `None` when it is
    /// (or becomes) retired.
    fn hold_live(&self, i: usize) -> Option<Held<'_>> {
        let lane = self.lanes[i].take_unless_retired()?;
        Some(Held { index: i, lane })
    }

    /// Any free lane, starting at one chosen by the thread's number (no
    /// system call, as the fetch slots choose theirs).
    fn any_lane(&self) -> Result<Held<'_>, Failure> {
        let n = self.lanes.len();
        let start = crate::counter::thread_number() % n;
        let backoff = Backoff::new();
        loop {
            match take_any(&self.lanes, start) {
                Ok((index, lane)) => return Ok(Held { index, lane }),
                Err(NoLane::AllRetired) => {
                    return Err(Failure {
                        server: 0,
                        why: "every UCX lane timed out with operations in flight".into(),
                    })
                }
                Err(NoLane::AllBusy) => {}
            }
            backoff.snooze();
        }
    }

    fn request(&self, held: &Held<'_>, i: usize) -> *mut u8 {
        let requests = &held.inner().requests;
        debug_assert!((i + 1) * self.stride <= requests.len());
        // In bounds (above): UCX's part is the `stride - 64` bytes before.
        UnsafeCell::raw_get(
            requests
                .as_ptr()
                .wrapping_add(i * self.stride + self.stride - 64),
        )
    }

    fn memh_for(&self, ptr: *const u8, len: usize) -> Option<*mut std::ffi::c_void> {
        let (lo, hi, m) = self.slots.get()?;
        let p = ptr as usize;
        (p >= *lo && p + len <= *hi).then(|| m.handle())
    }

    /// Wait for the operations in `pending` (request index, server) to
    /// complete, progressing the lane's worker; a failure names its server.
    /// Returns only when none is in flight, or with the lane retired.
    fn wait(&self, held: &Held<'_>, pending: &mut [(usize, usize)]) -> Result<(), Failure> {
        let inner = held.inner();
        let drained = drain(
            pending,
            self.timeout_ns,
            || {
                inner.worker.progress();
            },
            // SAFETY: `drain` polls only requests still in flight (each
            // returned Pending and has not been seen complete).
            |r| unsafe { ucx::poll(self.request(held, r)) },
            farmem_sys::now_ns,
        );
        let failed = |s: usize, st: ucx::Status| Failure {
            server: s,
            why: format!("a UCX operation failed: {}", ucx::status_string(st)),
        };
        match drained {
            Drained::Complete { failed: None } => Ok(()),
            Drained::Complete {
                failed: Some((s, st)),
            } => Err(failed(s, st)),
            Drained::TimedOut {
                failed: first,
                server,
                left,
            } => {
                // UCX may still write the requests: retire the lane.
                held.lane.retire();
                let late = format!(
                    "{left} UCX operation(s) got no reply within {} ms (FARMEM_TIMEOUT_MS)",
                    self.timeout_ns / 1_000_000
                );
                Err(match first {
                    Some((s, st)) => {
                        let mut f = failed(s, st);
                        f.why = format!("{}; then {late}", f.why);
                        f
                    }
                    None => Failure { server, why: late },
                })
            }
        }
    }

    /// Give up a batch with `failure`, once the operations already in
    /// flight are complete (or the lane is retired).
    fn abandon(
        &self,
        held: &Held<'_>,
        pending: &mut [(usize, usize)],
        failure: Failure,
    ) -> Failure {
        let _ = self.wait(held, pending);
        failure
    }

    /// Note what starting an operation returned: a pending one joins
    /// `pending` (request index, server); a failure first lets the earlier
    /// operations finish (their memory is in use), then names the server.
    fn track(
        &self,
        started: Started,
        op: (usize, usize),
        held: &Held<'_>,
        pending: &mut [(usize, usize)],
        n: &mut usize,
        what: &str,
    ) -> Result<(), Failure> {
        match started {
            Started::Done => Ok(()),
            Started::Pending => {
                pending[*n] = op;
                *n += 1;
                Ok(())
            }
            Started::Failed(st) => {
                let f = Failure {
                    server: op.1,
                    why: format!("a UCX {what} failed: {}", ucx::status_string(st)),
                };
                Err(self.abandon(held, &mut pending[..*n], f))
            }
        }
    }
}

impl OneSided for UcxPages {
    /// Whether `page`'s chunk is granted on server `s`.
    fn granted(&self, s: usize, page: u64) -> bool {
        self.keys(s, page).is_some()
    }

    /// Read `pages` into `buf` (page i at `i * PAGE_SIZE`), page i from
    /// server `from[i]`, all gets in flight at once.
    fn read(&self, pages: &[u64], from: &[usize], buf: &mut [u8]) -> Result<(), Failure> {
        let _inside = farmem_sys::Inside::enter();
        let held = self.any_lane()?;
        let inner = held.inner();
        let mut pending = [(0usize, 0usize); MAX_BATCH];
        let mut n = 0;
        let memh = self.memh_for(buf.as_ptr(), buf.len());
        let lane = held.index;
        for (i, (&p, &s)) in pages.iter().zip(from).enumerate() {
            let Some(key) = self.key(s, p, lane) else {
                let f = ungranted(s, p);
                return Err(self.abandon(&held, &mut pending[..n], f));
            };
            let op = Op::new(self.request(&held, i), memh);
            let dst = buf[i * PAGE_SIZE..].as_mut_ptr();
            // SAFETY: dst is writable for a page; it and the request stay
            // untouched until `wait` sees the get complete.
            let r = unsafe { op.get(&inner.eps[s], dst, PAGE_SIZE, key.0, key.1) };
            self.track(r, (i, s), &held, &mut pending, &mut n, "get")?;
        }
        self.wait(&held, &mut pending[..n])
    }

    /// Write `data[i]` as `pages[i]` to every server in `to[i]` (its live
    /// copies; `None` past the last), then flush those servers: complete at
    /// the target when this returns Ok.
    fn write(
        &self,
        pages: &[u64],
        data: &[&[u8]],
        to: &[[Option<usize>; MAX_REPLICAS]],
    ) -> Result<(), Failure> {
        let _inside = farmem_sys::Inside::enter();
        let held = self.any_lane()?;
        let inner = held.inner();
        let lane = held.index;
        let staging = inner.staging.addr();
        let memh = inner.staging.handle();
        let mut pending = [(0usize, 0usize); MAX_BATCH * MAX_REPLICAS + 64];
        let mut n = 0;
        let mut used = [false; 64];
        let nservers = inner.eps.len();
        for (i, (&p, d)) in pages.iter().zip(data).enumerate() {
            // SAFETY: the staging area holds MAX_BATCH pages and i < MAX_BATCH; `d` is
            // one page the runtime keeps write-protected meanwhile.
            unsafe {
                std::ptr::copy_nonoverlapping(d.as_ptr(), staging.add(i * PAGE_SIZE), PAGE_SIZE)
            };
            for (k, s) in to[i].iter().enumerate() {
                let Some(s) = *s else { break };
                let Some(key) = self.key(s, p, lane) else {
                    let f = ungranted(s, p);
                    return Err(self.abandon(&held, &mut pending[..n], f));
                };
                let r = k * MAX_BATCH + i;
                let op = Op::new(self.request(&held, r), Some(memh));
                // SAFETY: the staging page stays untouched until `wait`.
                let st = unsafe {
                    op.put(
                        &inner.eps[s],
                        staging.add(i * PAGE_SIZE),
                        PAGE_SIZE,
                        key.0,
                        key.1,
                    )
                };
                used[s] = true;
                self.track(st, (r, s), &held, &mut pending, &mut n, "put")?;
            }
        }
        // The puts' local completion first (their request memory is reused
        // below), then one flush per server used.
        self.wait(&held, &mut pending[..n])?;
        n = 0;
        for s in (0..nservers).filter(|&s| used[s]) {
            let r = MAX_BATCH * MAX_REPLICAS + s;
            let op = Op::new(self.request(&held, r), None);
            // SAFETY: the request is free (everything above completed).
            let st = unsafe { op.flush(&inner.eps[s]) };
            self.track(st, (r, s), &held, &mut pending, &mut n, "flush")?;
        }
        self.wait(&held, &mut pending[..n])
    }
}

#[cfg(test)]
mod tests;
