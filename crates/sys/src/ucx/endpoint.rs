//! Endpoints to a peer worker, and the peer's remote keys unpacked on
//! them.

use super::abi::{
    UcpEpParams, UcpErrHandler, UcpRequestParam, EP_PARAMS_REST, UCP_EP_CLOSE_FLAG_FORCE,
    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE, UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
    UCP_ERR_HANDLING_MODE_NONE, UCP_OP_ATTR_FIELD_FLAGS, UCS_INPROGRESS, UCS_OK,
};
use super::load::{check, lib};
use super::op::is_request;
use super::{packed, Ptr, UcxError, Worker};
use std::ffi::c_void;

/// A `ucp_ep_h` to a peer worker, without peer-failure mode: failures are
/// found by the control connection and by timeouts (see the runtime).
pub struct Endpoint {
    pub(super) h: Ptr,
    worker: Ptr,
}

// SAFETY: used under its worker's lock only.
unsafe impl Send for Endpoint {}
// SAFETY: as above.
unsafe impl Sync for Endpoint {}

impl Endpoint {
    /// An endpoint to the worker at `peer` (a peer's address: checked
    /// against this UCX's own, and handed over zero-padded, see [`packed`]).
    pub fn connect(worker: &Worker, peer: &[u8]) -> Result<Endpoint, UcxError> {
        let l = lib()?;
        packed::check_address(peer, &worker.address()?)?;
        let peer = packed::padded(peer);
        let params = UcpEpParams {
            field_mask: UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
            address: peer.as_ptr().cast(),
            err_mode: UCP_ERR_HANDLING_MODE_NONE,
            err_handler: UcpErrHandler {
                cb: std::ptr::null(),
                arg: std::ptr::null_mut(),
            },
            rest: [0; EP_PARAMS_REST],
        };
        let mut h: Ptr = std::ptr::null_mut();
        // SAFETY: a live worker; `peer` is of this UCX's address version
        // and followed by zeros of our own, so UCX's parse, which takes no
        // length, reads inside our buffer; it is read during the call only.
        check(l, "ucp_ep_create", unsafe {
            (l.ep_create)(worker.h, &params, &mut h)
        })?;
        Ok(Endpoint {
            h,
            worker: worker.h,
        })
    }

    /// Unpack a peer's remote key for use on this endpoint (its layout
    /// checked first, and handed over zero-padded, see [`packed`]).
    pub fn unpack(&self, key: &[u8]) -> Result<RemoteKey, UcxError> {
        let l = lib()?;
        packed::check_rkey(key)?;
        let packed = packed::padded(key);
        let mut h: Ptr = std::ptr::null_mut();
        // SAFETY: a live endpoint; the key's lengths add up to its size
        // and zeros of ours follow it, so UCX, which takes no length,
        // reads inside our buffer, during the call only.
        check(l, "ucp_ep_rkey_unpack", unsafe {
            (l.ep_rkey_unpack)(self.h, packed.as_ptr().cast(), &mut h)
        })?;
        Ok(RemoteKey { h })
    }

    pub fn handle(&self) -> *mut c_void {
        self.h
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let Ok(l) = lib() else { return };
        let p = UcpRequestParam {
            flags: UCP_EP_CLOSE_FLAG_FORCE,
            op_attr_mask: UCP_OP_ATTR_FIELD_FLAGS,
            ..UcpRequestParam::EMPTY
        };
        // SAFETY: a live endpoint; the close request is UCX's own, polled
        // to completion below (bounded: a dead peer is forced closed).
        let r = unsafe { (l.ep_close_nbx)(self.h, &p) };
        if is_request(r) {
            for _ in 0..100_000 {
                // SAFETY: live worker and request.
                unsafe { (l.worker_progress)(self.worker) };
                // SAFETY: as above.
                if unsafe { (l.request_check_status)(r) } != UCS_INPROGRESS {
                    break;
                }
            }
        }
    }
}

/// An unpacked remote key.
pub struct RemoteKey {
    pub(super) h: Ptr,
}

// SAFETY: used under its endpoint's worker lock only.
unsafe impl Send for RemoteKey {}
// SAFETY: as above.
unsafe impl Sync for RemoteKey {}

impl RemoteKey {
    pub fn handle(&self) -> *mut c_void {
        self.h
    }

    /// Whether the remote memory is mapped in this process (a shared-memory
    /// transport): then the peer is on this host.
    pub fn is_local(&self, raddr: u64) -> bool {
        self.local_ptr(raddr).is_some()
    }

    /// Where remote address `raddr` is mapped in this process, on a
    /// shared-memory transport (UCX adds the mapping's offset; it checks
    /// no bounds).
    pub fn local_ptr(&self, raddr: u64) -> Option<*mut u8> {
        let l = lib().ok()?;
        let mut p: Ptr = std::ptr::null_mut();
        // SAFETY: a live key; UCX only computes an address.
        (unsafe { (l.rkey_ptr)(self.h, raddr, &mut p) } == UCS_OK).then_some(p.cast())
    }
}

impl Drop for RemoteKey {
    fn drop(&mut self) {
        if let Ok(l) = lib() {
            // SAFETY: a live key, destroyed once.
            unsafe { (l.rkey_destroy)(self.h) };
        }
    }
}
