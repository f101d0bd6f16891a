//! UCX (`libucp`), bound at run time with `dlopen`: the one-sided page path.
//!
//! Why `dlopen` and not a link-time dependency: farmem must start, and say
//! one clear line, on a machine without UCX; a program linked against
//! `libucp.so.0` would not even load there. The declarations below are
//! written by hand from UCX 1.13's `ucp.h`; `tests/ucx_abi.rs` compiles a C
//! program against the installed headers and checks every size, offset and
//! constant used here.
//!
//! Only what farmem uses: a context with RMA, workers, endpoints from a
//! worker address, memory allocated and registered by UCX, packed remote
//! keys, `ucp_get_nbx`/`ucp_put_nbx`/`ucp_ep_flush_nbx` with request memory
//! given by the caller (so an operation allocates nothing), and progress.
//!
//! The handle types own their UCX object and release it on `Drop`; the
//! caller keeps owners in the order UCX needs (keys and endpoints before
//! their worker, workers and memory before their context).
//!
//! **Transports.** A UCX remote key is a capability only where the NIC (or
//! the kernel) enforces it: over transports without hardware RMA, UCX
//! emulates gets and puts with messages whose handlers copy to and from
//! any address a peer names (`rma_sw.c`). So every [`Context`] gets an
//! explicit transport list through UCX's config API, never the
//! environment ([`Transports`]): RDMA verbs (`rc`, `dc`) and, as the
//! one-host test path, `posix` shared memory (which the kernel limits to
//! the same uid). The context refuses to exist when UCX gives it any
//! other transport. `cma` is never loaded: its probe alone calls
//! `prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)`.
//!
//! The module by concern: `load` (the library, loaded once, and its
//! status texts), `transports` (which transports a context may hold),
//! `context`, `worker`, `memory` and `endpoint` (the handle types, each
//! owning its UCX object), `op` (one-sided operations in caller-provided
//! request memory), with `abi` (the C declarations) and `packed` (a peer's
//! blobs, checked before UCX reads them).

use std::ffi::c_void;
use thiserror::Error;

mod abi;
mod context;
mod endpoint;
mod load;
mod memory;
mod op;
pub mod packed;
mod transports;
mod worker;

pub use abi::*;
pub use context::Context;
pub use endpoint::{Endpoint, RemoteKey};
pub use load::{available, status_string, version};
pub use memory::Memory;
pub use op::{poll, Op, Started};
pub use transports::{parse_resources, Resource, Transports};
pub use worker::Worker;

type Ptr = *mut c_void;

#[derive(Debug, Error, Clone)]
pub enum UcxError {
    #[error("UCX is not available: {0}; install it (Debian: apt-get install libucx0, or libucx-dev) or use FARMEM_TRANSPORT=socket")]
    Missing(String),
    #[error("UCX {call} failed: {status}")]
    Call { call: &'static str, status: String },
    #[error("UCX gave this process transports outside farmem's list ({allowed}): {unexpected}; farmem will not use a UCX transport that does not enforce remote keys (use FARMEM_TRANSPORT=socket)")]
    Transports {
        allowed: &'static str,
        unexpected: String,
    },
}

#[cfg(test)]
mod tests;
