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
//! completing within `FARMEM_TIMEOUT_MS`. A lane whose operation timed out
//! is retired for good (UCX may still write its request memory), and the
//! caller fails the server over as on sockets.

use super::BackendError;
use crate::config::MAX_REPLICAS;
use farmem_sys::ucx::{self, Context, Endpoint, Memory, Op, RemoteKey, Started, Worker};
use farmem_sys::PAGE_SIZE;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Mutex, OnceLock};

/// Most pages in one read or write.
const MAX_BATCH: usize = super::MAX_BATCH;

/// Why a batch did not complete: which server, and what happened.
pub(crate) struct Failure {
    pub(crate) server: usize,
    pub(crate) why: String,
}

/// One chunk's base address on a server and its key, unpacked per lane.
struct ChunkKeys {
    base: u64,
    keys: Box<[RemoteKey]>,
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

struct Lane {
    busy: AtomicBool,
    /// Timed out with operations in flight: never used again.
    retired: AtomicBool,
    inner: UnsafeCell<LaneInner>,
}

// SAFETY: `inner` is only reached by the thread that set `busy` (Acquire),
// until it clears it (Release).
unsafe impl Sync for Lane {}
// SAFETY: as above.
unsafe impl Send for Lane {}

/// The UCX side of the remote backend.
pub(crate) struct UcxPages {
    // Drop order: keys, then endpoints and workers, then the slot
    // registration, then the context.
    servers: Box<[ServerChunks]>,
    lanes: Box<[Lane]>,
    slots: OnceLock<(usize, usize, Memory)>,
    grants: Mutex<()>,
    ctx: Context,
    chunk_pages: u64,
    stride: usize,
    timeout_ns: u64,
    /// Whether the first chunk's memory is mapped here (shared memory).
    local: AtomicBool,
}

/// A held lane; released on drop unless retired.
struct Held<'a> {
    lane: &'a Lane,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if !self.lane.retired.load(Ordering::Relaxed) {
            self.lane.busy.store(false, Ordering::Release);
        }
    }
}

impl Held<'_> {
    fn inner(&self) -> &LaneInner {
        // SAFETY: this thread holds `busy` (see `Lane`); no `&mut` to the
        // lane's state is ever made (what UCX writes lives in cells).
        unsafe { &*self.lane.inner.get() }
    }
}

impl UcxPages {
    /// A context and `lanes` lanes, each with an endpoint to every server
    /// (`addresses`, their UCX worker addresses).
    pub(crate) fn new(
        addresses: &[Vec<u8>],
        max_pages: u64,
        chunk_pages: u64,
        timeout_ns: u64,
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
        let ctx = Context::new(c"farmem", false, &[])?;
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
            lanes.push(Lane {
                busy: AtomicBool::new(false),
                retired: AtomicBool::new(false),
                inner: UnsafeCell::new(LaneInner {
                    eps,
                    staging,
                    requests: (0..slots * stride).map(|_| UnsafeCell::new(0)).collect(),
                    worker,
                }),
            });
        }
        let nchunks = farmem_sys::usize_from(max_pages.div_ceil(chunk_pages));
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
            chunk_pages,
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

    /// Pages per chunk (the servers' UcxOpenOk).
    pub(crate) fn chunk_pages(&self) -> u64 {
        self.chunk_pages
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
            let held = self.hold(i);
            let key = held.inner().eps[s]
                .unpack(&packed)
                .map_err(|e| BackendError::Protocol {
                    server: format!("#{s}"),
                    why: format!("its remote key does not unpack: {e}"),
                })?;
            if s == 0 && c == 0 && i == 0 {
                self.local.store(key.is_local(base), Ordering::Relaxed);
            }
            keys.push(key);
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
            farmem_sys::usize_from(page / self.chunk_pages),
            (page % self.chunk_pages) * PAGE_SIZE as u64,
        )
    }

    /// The granted keys of `page`'s chunk on server `s`.
    fn keys(&self, s: usize, page: u64) -> Option<&ChunkKeys> {
        let (c, _) = self.place(page);
        let p = self.servers[s].chunks.get(c)?.load(Ordering::Acquire);
        // SAFETY: non-null pointers are live boxes until `self` drops.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    /// Whether `page`'s chunk is granted on server `s`.
    pub(crate) fn granted(&self, s: usize, page: u64) -> bool {
        self.keys(s, page).is_some()
    }

    /// Lane `i`, waiting while another thread holds it.
    fn hold(&self, i: usize) -> Held<'_> {
        let lane = &self.lanes[i];
        while lane
            .busy
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            farmem_sys::cpu_relax();
        }
        Held { lane }
    }

    /// Any free lane, starting at one chosen by the thread id.
    fn any_lane(&self) -> Result<Held<'_>, Failure> {
        let n = self.lanes.len();
        let start = farmem_sys::usize_from(u64::from(farmem_sys::gettid().unsigned_abs())) % n;
        let mut spins = 0u32;
        loop {
            let mut live = false;
            for k in 0..n {
                let lane = &self.lanes[(start + k) % n];
                if lane.retired.load(Ordering::Relaxed) {
                    continue;
                }
                live = true;
                if lane
                    .busy
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return Ok(Held { lane });
                }
            }
            if !live {
                return Err(Failure {
                    server: 0,
                    why: "every UCX lane timed out with operations in flight".into(),
                });
            }
            spins += 1;
            if spins.is_multiple_of(32) {
                farmem_sys::sched_yield();
            } else {
                farmem_sys::cpu_relax();
            }
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
    fn wait(&self, held: &Held<'_>, pending: &mut [(usize, usize)]) -> Result<(), Failure> {
        let inner = held.inner();
        let start = farmem_sys::now_ns();
        let mut left = pending.len();
        while left > 0 {
            inner.worker.progress();
            let mut k = 0;
            while k < left {
                let (r, s) = pending[k];
                // SAFETY: request `r` is in flight (it returned Pending and
                // has not been seen complete).
                let st = unsafe { ucx::poll(self.request(held, r)) };
                if st == ucx::UCS_INPROGRESS {
                    k += 1;
                    continue;
                }
                if st != ucx::UCS_OK {
                    return Err(Failure {
                        server: s,
                        why: format!("a UCX operation failed: {}", ucx::status_string(st)),
                    });
                }
                pending.swap(k, left - 1);
                left -= 1;
            }
            if left > 0 && farmem_sys::now_ns() - start > self.timeout_ns {
                // The requests may still be written by UCX: retire the lane.
                held.lane.retired.store(true, Ordering::Release);
                return Err(Failure {
                    server: pending[0].1,
                    why: format!(
                        "no reply within {} ms (FARMEM_TIMEOUT_MS)",
                        self.timeout_ns / 1_000_000
                    ),
                });
            }
        }
        Ok(())
    }

    /// Read `pages` into `buf` (page i at `i * PAGE_SIZE`), page i from
    /// server `from[i]`, all gets in flight at once.
    pub(crate) fn read(
        &self,
        pages: &[u64],
        from: &[usize],
        buf: &mut [u8],
    ) -> Result<(), Failure> {
        let _inside = farmem_sys::Inside::enter();
        let held = self.any_lane()?;
        let inner = held.inner();
        let mut pending = [(0usize, 0usize); MAX_BATCH];
        let mut n = 0;
        let memh = self.memh_for(buf.as_ptr(), buf.len());
        for (i, (&p, &s)) in pages.iter().zip(from).enumerate() {
            let Some(keys) = self.keys(s, p) else {
                return Err(Failure {
                    server: s,
                    why: format!("page {p} is in a chunk never granted (a farmem bug)"),
                });
            };
            let lane = self.lane_index(&held);
            let op = Op::new(self.request(&held, i), memh);
            let dst = buf[i * PAGE_SIZE..].as_mut_ptr();
            // SAFETY: dst is writable for a page; it and the request stay
            // untouched until `wait` sees the get complete.
            let r = unsafe {
                op.get(
                    &inner.eps[s],
                    dst,
                    PAGE_SIZE,
                    keys.base + self.place(p).1,
                    &keys.keys[lane],
                )
            };
            self.track(r, (i, s), &held, &mut pending, &mut n, "get")?;
        }
        self.wait(&held, &mut pending[..n])
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
                let _ = self.wait(held, &mut pending[..*n]);
                Err(Failure {
                    server: op.1,
                    why: format!("a UCX {what} failed: {}", ucx::status_string(st)),
                })
            }
        }
    }

    fn lane_index(&self, held: &Held<'_>) -> usize {
        let base = self.lanes.as_ptr() as usize;
        (held.lane as *const Lane as usize - base) / std::mem::size_of::<Lane>()
    }

    /// Write `data[i]` as `pages[i]` to every server in `to[i]` (its live
    /// copies; `None` past the last), then flush those servers: complete at
    /// the target when this returns Ok.
    pub(crate) fn write(
        &self,
        pages: &[u64],
        data: &[&[u8]],
        to: &[[Option<usize>; MAX_REPLICAS]],
    ) -> Result<(), Failure> {
        let _inside = farmem_sys::Inside::enter();
        let held = self.any_lane()?;
        let inner = held.inner();
        let lane = self.lane_index(&held);
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
                let Some(keys) = self.keys(s, p) else {
                    return Err(Failure {
                        server: s,
                        why: format!("page {p} is in a chunk never granted (a farmem bug)"),
                    });
                };
                let r = k * MAX_BATCH + i;
                let op = Op::new(self.request(&held, r), Some(memh));
                // SAFETY: the staging page stays untouched until `wait`.
                let st = unsafe {
                    op.put(
                        &inner.eps[s],
                        staging.add(i * PAGE_SIZE),
                        PAGE_SIZE,
                        keys.base + self.place(p).1,
                        &keys.keys[lane],
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
