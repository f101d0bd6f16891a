//! UCX 1.13's types and constants, as `ucp.h` declares them: every size,
//! offset and value here is checked against the installed headers by
//! `tests/ucx_abi.rs`.

use std::ffi::{c_char, c_int, c_uint, c_void};

/// `ucs_status_t`: a packed (one-byte) enum in UCX.
pub type Status = i8;
pub const UCS_OK: Status = 0;
pub const UCS_INPROGRESS: Status = 1;
pub const UCS_ERR_LAST: isize = -100;

// ucp_params_t.field_mask / features
pub const UCP_PARAM_FIELD_FEATURES: u64 = 1 << 0;
pub const UCP_PARAM_FIELD_MT_WORKERS_SHARED: u64 = 1 << 5;
pub const UCP_PARAM_FIELD_NAME: u64 = 1 << 8;
pub const UCP_FEATURE_RMA: u64 = 1 << 1;
pub const UCP_FEATURE_WAKEUP: u64 = 1 << 4;
// ucp_context_attr_t.field_mask
pub const UCP_ATTR_FIELD_REQUEST_SIZE: u64 = 1 << 0;
pub const UCP_ATTR_FIELD_THREAD_MODE: u64 = 1 << 1;
// ucp_worker_params_t
pub const UCP_WORKER_PARAM_FIELD_THREAD_MODE: u64 = 1 << 0;
pub const UCS_THREAD_MODE_SERIALIZED: c_int = 1;
pub const UCS_THREAD_MODE_MULTI: c_int = 2;
// ucp_ep_params_t
pub const UCP_EP_PARAM_FIELD_REMOTE_ADDRESS: u64 = 1 << 0;
pub const UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE: u64 = 1 << 1;
pub const UCP_ERR_HANDLING_MODE_NONE: c_int = 0;
pub const UCP_EP_CLOSE_FLAG_FORCE: u32 = 1 << 0;
// ucp_mem_map_params_t / ucp_mem_attr_t
pub const UCP_MEM_MAP_PARAM_FIELD_LENGTH: u64 = 1 << 1;
pub const UCP_MEM_MAP_PARAM_FIELD_ADDRESS: u64 = 1 << 0;
pub const UCP_MEM_MAP_PARAM_FIELD_FLAGS: u64 = 1 << 2;
pub const UCP_MEM_MAP_ALLOCATE: c_uint = 1 << 1;
pub const UCP_MEM_ATTR_FIELD_ADDRESS: u64 = 1 << 0;
pub const UCP_MEM_ATTR_FIELD_LENGTH: u64 = 1 << 1;
// ucp_request_param_t.op_attr_mask
pub const UCP_OP_ATTR_FIELD_REQUEST: u32 = 1 << 0;
pub const UCP_OP_ATTR_FIELD_FLAGS: u32 = 1 << 4;
pub const UCP_OP_ATTR_FIELD_MEMH: u32 = 1 << 8;
/// The API version this binding was written against (`ucp_version.h`).
pub const UCP_API_MAJOR: c_uint = 1;
pub const UCP_API_MINOR: c_uint = 13;

#[repr(C)]
pub struct UcpParams {
    pub field_mask: u64,
    pub features: u64,
    pub request_size: usize,
    pub request_init: *const c_void,
    pub request_cleanup: *const c_void,
    pub tag_sender_mask: u64,
    pub mt_workers_shared: c_int,
    pub estimated_num_eps: usize,
    pub estimated_num_ppn: usize,
    pub name: *const c_char,
}

#[repr(C)]
pub struct UcpContextAttr {
    pub field_mask: u64,
    pub request_size: usize,
    pub thread_mode: c_int,
    pub memory_types: u64,
    pub name: [c_char; 32],
}

/// `ucp_worker_params_t`: the fields farmem sets, then the rest as bytes
/// (UCX reads only the fields its mask names).
#[repr(C)]
pub struct UcpWorkerParams {
    pub field_mask: u64,
    pub thread_mode: c_int,
    pub rest: [u8; WORKER_PARAMS_REST],
}
/// `sizeof(ucp_worker_params_t)` less the two leading fields (and padding).
pub const WORKER_PARAMS_SIZE: usize = 200;
pub const WORKER_PARAMS_REST: usize = WORKER_PARAMS_SIZE - 12;

#[repr(C)]
pub struct UcpErrHandler {
    pub cb: *const c_void,
    pub arg: *mut c_void,
}

/// `ucp_ep_params_t`: the leading fields farmem sets, the rest as bytes.
#[repr(C)]
pub struct UcpEpParams {
    pub field_mask: u64,
    pub address: *const c_void,
    pub err_mode: c_int,
    pub err_handler: UcpErrHandler,
    pub rest: [u8; EP_PARAMS_REST],
}
pub const EP_PARAMS_SIZE: usize = 104;
pub const EP_PARAMS_REST: usize = EP_PARAMS_SIZE - 40;

#[repr(C)]
pub struct UcpMemMapParams {
    pub field_mask: u64,
    pub address: *mut c_void,
    pub length: usize,
    pub flags: c_uint,
    pub prot: c_uint,
    pub memory_type: c_int,
}

#[repr(C)]
pub struct UcpMemAttr {
    pub field_mask: u64,
    pub address: *mut c_void,
    pub length: usize,
    pub mem_type: c_int,
}

#[repr(C)]
pub struct UcpRequestParam {
    pub op_attr_mask: u32,
    pub flags: u32,
    pub request: *mut c_void,
    pub cb: *const c_void,
    pub datatype: u64,
    pub user_data: *mut c_void,
    pub reply_buffer: *mut c_void,
    pub memory_type: c_int,
    pub recv_info: *mut c_void,
    pub memh: *mut c_void,
}

/// `ucm_mmap_hook_mode_t`: `UCM_MMAP_HOOK_NONE`.
pub const UCM_MMAP_HOOK_NONE: c_int = 0;

/// `ucm_global_config_t` (`ucm/api/ucm.h`): libucm's options, which decide
/// whether UCX patches `mmap`, `munmap`, `brk` and `malloc`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UcmGlobalConfig {
    pub log_level: c_int,
    pub enable_events: c_int,
    pub mmap_hook_mode: c_int,
    pub enable_malloc_hooks: c_int,
    pub enable_malloc_reloc: c_int,
    pub cuda_hook_modes: c_int,
    pub enable_dynamic_mmap_thresh: c_int,
    pub alloc_alignment: usize,
    pub dlopen_process_rpath: c_int,
    pub module_unload_prevent_mode: c_int,
}
