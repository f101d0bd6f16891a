//! One-sided operations (get, put, flush) whose request memory the
//! caller provides, so that starting one allocates nothing.

use super::abi::{
    Status, UcpRequestParam, UCP_OP_ATTR_FIELD_MEMH, UCP_OP_ATTR_FIELD_REQUEST, UCS_ERR_LAST,
};
use super::load::lib;
use super::{Endpoint, Ptr, RemoteKey};
use std::ffi::c_void;

impl UcpRequestParam {
    pub const EMPTY: UcpRequestParam = UcpRequestParam {
        op_attr_mask: 0,
        flags: 0,
        request: std::ptr::null_mut(),
        cb: std::ptr::null(),
        datatype: 0,
        user_data: std::ptr::null_mut(),
        reply_buffer: std::ptr::null_mut(),
        memory_type: 0,
        recv_info: std::ptr::null_mut(),
        memh: std::ptr::null_mut(),
    };
}

pub(super) fn is_request(p: Ptr) -> bool {
    let v = p as usize;
    // UCS_PTR_IS_PTR: neither NULL (done) nor an error status.
    v.wrapping_sub(1) < UCS_ERR_LAST.cast_unsigned().wrapping_sub(1)
}

/// What a non-blocking operation returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Started {
    /// Complete already.
    Done,
    /// In flight in the caller's request memory; poll it with [`poll`].
    Pending,
    Failed(Status),
}

fn started(p: Ptr) -> Started {
    if p.is_null() {
        Started::Done
    } else if is_request(p) {
        Started::Pending
    } else {
        // UCS_PTR_RAW_STATUS: the low byte of the pointer-encoded status.
        #[allow(clippy::cast_possible_truncation)]
        Started::Failed(p as isize as Status)
    }
}

/// One RMA operation's parameters: where UCX keeps the request (caller
/// memory: nothing is allocated) and, optionally, the local buffer's
/// registration.
pub struct Op {
    param: UcpRequestParam,
}

impl Op {
    /// `request` points just past [`Context::request_size`] bytes the
    /// caller owns until the operation completes.
    ///
    /// [`Context::request_size`]: super::Context::request_size
    pub fn new(request: *mut u8, memh: Option<*mut c_void>) -> Op {
        Op {
            param: UcpRequestParam {
                op_attr_mask: UCP_OP_ATTR_FIELD_REQUEST
                    | if memh.is_some() {
                        UCP_OP_ATTR_FIELD_MEMH
                    } else {
                        0
                    },
                request: request.cast(),
                memh: memh.unwrap_or(std::ptr::null_mut()),
                ..UcpRequestParam::EMPTY
            },
        }
    }

    /// Start reading `len` bytes at `raddr` (under `rkey`) into `buf`.
    ///
    /// # Safety
    /// `buf` must be writable for `len` bytes, and it and the request memory
    /// must stay untouched until the operation is complete.
    pub unsafe fn get(
        &self,
        ep: &Endpoint,
        buf: *mut u8,
        len: usize,
        raddr: u64,
        rkey: &RemoteKey,
    ) -> Started {
        let Ok(l) = lib() else {
            return Started::Failed(-1);
        };
        // SAFETY: the caller's contract; live endpoint and key.
        started(unsafe { (l.get_nbx)(ep.h, buf.cast(), len, raddr, rkey.h, &self.param) })
    }

    /// Start writing `len` bytes from `buf` to `raddr`.
    ///
    /// # Safety
    /// As [`Op::get`], with `buf` readable.
    pub unsafe fn put(
        &self,
        ep: &Endpoint,
        buf: *const u8,
        len: usize,
        raddr: u64,
        rkey: &RemoteKey,
    ) -> Started {
        let Ok(l) = lib() else {
            return Started::Failed(-1);
        };
        // SAFETY: the caller's contract; live endpoint and key.
        started(unsafe { (l.put_nbx)(ep.h, buf.cast(), len, raddr, rkey.h, &self.param) })
    }

    /// Start a flush: complete when every put issued on `ep` before it is
    /// complete at the target.
    ///
    /// # Safety
    /// The request memory stays untouched until the flush completes.
    pub unsafe fn flush(&self, ep: &Endpoint) -> Started {
        let Ok(l) = lib() else {
            return Started::Failed(-1);
        };
        // SAFETY: live endpoint; the caller's request memory.
        started(unsafe { (l.ep_flush_nbx)(ep.h, &self.param) })
    }

    /// The request's status: [`UCS_INPROGRESS`](super::UCS_INPROGRESS)
    /// until it completes.
    ///
    /// # Safety
    /// Only for an operation that returned [`Started::Pending`] and was not
    /// polled to completion yet.
    pub unsafe fn poll(&self) -> Status {
        let Ok(l) = lib() else { return -1 };
        // SAFETY: the caller's contract: a request in flight.
        unsafe { (l.request_check_status)(self.param.request) }
    }
}

/// The status of the operation whose request memory is `request`:
/// [`UCS_INPROGRESS`](super::UCS_INPROGRESS) until it completes.
///
/// # Safety
/// Only for an operation started with that request memory that returned
/// [`Started::Pending`] and was not yet seen complete.
pub unsafe fn poll(request: *mut u8) -> Status {
    let Ok(l) = lib() else { return -1 };
    // SAFETY: the caller's contract: a request in flight.
    unsafe { (l.request_check_status)(request.cast()) }
}
