//! Memory UCX allocates (or registers) for one-sided access, and its
//! packed remote key.

use super::abi::{
    UcpMemAttr, UcpMemMapParams, UCP_MEM_ATTR_FIELD_ADDRESS, UCP_MEM_ATTR_FIELD_LENGTH,
    UCP_MEM_MAP_ALLOCATE, UCP_MEM_MAP_PARAM_FIELD_ADDRESS, UCP_MEM_MAP_PARAM_FIELD_FLAGS,
    UCP_MEM_MAP_PARAM_FIELD_LENGTH,
};
use super::load::{check, lib};
use super::{Context, Ptr, UcxError};
use std::ffi::c_void;

/// Memory allocated and registered by UCX (`UCP_MEM_MAP_ALLOCATE`): UCX
/// picks memory its transports reach one-sided (a shared-memory segment
/// on one host; registered memory for RDMA).
pub struct Memory {
    ctx: Ptr,
    h: Ptr,
    addr: *mut u8,
    len: usize,
}

// SAFETY: the handle is only used for unmap and rkey packing, which UCX
// allows from any thread; the bytes are reached through raw pointers.
unsafe impl Send for Memory {}
// SAFETY: as above.
unsafe impl Sync for Memory {}

impl Memory {
    /// `len` bytes allocated by UCX, or (with `at`) `len` bytes at `at`
    /// registered as they are.
    pub fn map(ctx: &Context, len: usize, at: Option<*mut u8>) -> Result<Memory, UcxError> {
        let l = lib()?;
        let params = UcpMemMapParams {
            field_mask: UCP_MEM_MAP_PARAM_FIELD_LENGTH
                | UCP_MEM_MAP_PARAM_FIELD_FLAGS
                | if at.is_some() {
                    UCP_MEM_MAP_PARAM_FIELD_ADDRESS
                } else {
                    0
                },
            address: at.unwrap_or(std::ptr::null_mut()).cast(),
            length: len,
            flags: if at.is_some() {
                0
            } else {
                UCP_MEM_MAP_ALLOCATE
            },
            prot: 0,
            memory_type: 0,
        };
        let mut h: Ptr = std::ptr::null_mut();
        // SAFETY: a live context; params valid; `at`, when given, is the
        // caller's mapping of `len` bytes.
        check(l, "ucp_mem_map", unsafe {
            (l.mem_map)(ctx.h, &params, &mut h)
        })?;
        let mut attr = UcpMemAttr {
            field_mask: UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH,
            address: std::ptr::null_mut(),
            length: 0,
            mem_type: 0,
        };
        let mut mem = Memory {
            ctx: ctx.h,
            h,
            addr: std::ptr::null_mut(),
            len: 0,
        };
        // SAFETY: a live memory handle (unmapped by `mem`'s drop on error).
        check(l, "ucp_mem_query", unsafe { (l.mem_query)(h, &mut attr) })?;
        mem.addr = attr.address.cast();
        mem.len = attr.length;
        Ok(mem)
    }

    pub fn addr(&self) -> *mut u8 {
        self.addr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The raw handle, for an [`Op`](super::Op)'s `memh`.
    pub fn handle(&self) -> *mut c_void {
        self.h
    }

    /// The packed remote key: a peer that has it can read and write this
    /// memory. Give it only to the session that owns the memory.
    pub fn pack_rkey(&self) -> Result<Vec<u8>, UcxError> {
        let l = lib()?;
        let mut b: Ptr = std::ptr::null_mut();
        let mut n = 0usize;
        // SAFETY: a live context and memory handle.
        check(l, "ucp_rkey_pack", unsafe {
            (l.rkey_pack)(self.ctx, self.h, &mut b, &mut n)
        })?;
        // SAFETY: UCX returned `n` readable bytes at `b`.
        let v = unsafe { std::slice::from_raw_parts(b.cast::<u8>(), n) }.to_vec();
        // SAFETY: releasing the buffer UCX gave.
        unsafe { (l.rkey_buffer_release)(b) };
        Ok(v)
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        if self.h.is_null() {
            return;
        }
        if let Ok(l) = lib() {
            // SAFETY: the handle is live and its context outlives it (the
            // owner's field order).
            unsafe { (l.mem_unmap)(self.ctx, self.h) };
        }
    }
}
