//! A UCP worker: addresses, progress and wake-up.

use super::abi::{
    UcpWorkerParams, UCP_WORKER_PARAM_FIELD_THREAD_MODE, UCS_OK, UCS_THREAD_MODE_SERIALIZED,
    WORKER_PARAMS_REST,
};
use super::load::{check, lib};
use super::{Context, Ptr, UcxError};
use std::ffi::c_int;

/// A `ucp_worker_h` in serialized mode: any thread may use it, one at a
/// time (the caller's lock).
pub struct Worker {
    pub(super) h: Ptr,
}

// SAFETY: serialized mode: callers use a worker from one thread at a time.
unsafe impl Send for Worker {}
// SAFETY: as above; the owners guard each worker with their own lock.
unsafe impl Sync for Worker {}

impl Worker {
    pub fn new(ctx: &Context) -> Result<Worker, UcxError> {
        let l = lib()?;
        let params = UcpWorkerParams {
            field_mask: UCP_WORKER_PARAM_FIELD_THREAD_MODE,
            thread_mode: UCS_THREAD_MODE_SERIALIZED,
            rest: [0; WORKER_PARAMS_REST],
        };
        let mut h: Ptr = std::ptr::null_mut();
        // SAFETY: a live context, valid params.
        check(l, "ucp_worker_create", unsafe {
            (l.worker_create)(ctx.h, &params, &mut h)
        })?;
        Ok(Worker { h })
    }

    /// The worker's address, for a peer's
    /// [`Endpoint::connect`](super::Endpoint::connect).
    pub fn address(&self) -> Result<Vec<u8>, UcxError> {
        let l = lib()?;
        let mut a: Ptr = std::ptr::null_mut();
        let mut n = 0usize;
        // SAFETY: a live worker; UCX fills an address it owns.
        check(l, "ucp_worker_get_address", unsafe {
            (l.worker_get_address)(self.h, &mut a, &mut n)
        })?;
        // SAFETY: UCX returned `n` readable bytes at `a`.
        let v = unsafe { std::slice::from_raw_parts(a.cast::<u8>(), n) }.to_vec();
        // SAFETY: releasing the address UCX gave.
        unsafe { (l.worker_release_address)(self.h, a) };
        Ok(v)
    }

    /// Progress communication; how many events completed. No allocation
    /// on shared-memory transports' RMA path.
    pub fn progress(&self) -> u32 {
        // SAFETY: a live worker (lib() succeeded when it was made).
        lib().map_or(0, |l| unsafe { (l.worker_progress)(self.h) })
    }

    /// The file descriptor that becomes readable when the worker has events
    /// (needs a context made with `wakeup`).
    pub fn event_fd(&self) -> Result<c_int, UcxError> {
        let l = lib()?;
        let mut fd = -1;
        // SAFETY: a live worker.
        check(l, "ucp_worker_get_efd", unsafe {
            (l.worker_get_efd)(self.h, &mut fd)
        })?;
        Ok(fd)
    }

    /// Arm the event fd; false when events are pending (progress first).
    pub fn arm(&self) -> bool {
        // SAFETY: a live worker.
        lib().is_ok_and(|l| unsafe { (l.worker_arm)(self.h) } == UCS_OK)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Ok(l) = lib() {
            // SAFETY: the worker's endpoints were closed by their owners.
            unsafe { (l.worker_destroy)(self.h) };
        }
    }
}
