//! libucp, libucs and libucm, loaded once with UCX's memory hooks and
//! `cma` off; the entry points farmem calls, and UCX's status texts.

use super::abi::{
    Status, UcmGlobalConfig, UcpContextAttr, UcpEpParams, UcpMemAttr, UcpMemMapParams, UcpParams,
    UcpRequestParam, UcpWorkerParams, UCM_MMAP_HOOK_NONE, UCS_OK,
};
use super::{Ptr, UcxError};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

/// The entry points, resolved once.
#[allow(clippy::type_complexity)]
pub(super) struct Lib {
    pub(super) config_read: unsafe extern "C" fn(*const c_char, *const c_char, *mut Ptr) -> Status,
    pub(super) config_modify: unsafe extern "C" fn(Ptr, *const c_char, *const c_char) -> Status,
    pub(super) config_release: unsafe extern "C" fn(Ptr),
    pub(super) init_version:
        unsafe extern "C" fn(c_uint, c_uint, *const UcpParams, Ptr, *mut Ptr) -> Status,
    pub(super) cleanup: unsafe extern "C" fn(Ptr),
    pub(super) context_query: unsafe extern "C" fn(Ptr, *mut UcpContextAttr) -> Status,
    pub(super) context_print_info: unsafe extern "C" fn(Ptr, *mut libc::FILE),
    pub(super) worker_create: unsafe extern "C" fn(Ptr, *const UcpWorkerParams, *mut Ptr) -> Status,
    pub(super) worker_destroy: unsafe extern "C" fn(Ptr),
    pub(super) worker_get_address: unsafe extern "C" fn(Ptr, *mut Ptr, *mut usize) -> Status,
    pub(super) worker_release_address: unsafe extern "C" fn(Ptr, Ptr),
    pub(super) worker_progress: unsafe extern "C" fn(Ptr) -> c_uint,
    pub(super) worker_get_efd: unsafe extern "C" fn(Ptr, *mut c_int) -> Status,
    pub(super) worker_arm: unsafe extern "C" fn(Ptr) -> Status,
    pub(super) ep_create: unsafe extern "C" fn(Ptr, *const UcpEpParams, *mut Ptr) -> Status,
    pub(super) ep_close_nbx: unsafe extern "C" fn(Ptr, *const UcpRequestParam) -> Ptr,
    pub(super) mem_map: unsafe extern "C" fn(Ptr, *const UcpMemMapParams, *mut Ptr) -> Status,
    pub(super) mem_unmap: unsafe extern "C" fn(Ptr, Ptr) -> Status,
    pub(super) mem_query: unsafe extern "C" fn(Ptr, *mut UcpMemAttr) -> Status,
    pub(super) rkey_pack: unsafe extern "C" fn(Ptr, Ptr, *mut Ptr, *mut usize) -> Status,
    pub(super) rkey_buffer_release: unsafe extern "C" fn(Ptr),
    pub(super) ep_rkey_unpack: unsafe extern "C" fn(Ptr, *const c_void, *mut Ptr) -> Status,
    pub(super) rkey_destroy: unsafe extern "C" fn(Ptr),
    pub(super) rkey_ptr: unsafe extern "C" fn(Ptr, u64, *mut Ptr) -> Status,
    pub(super) put_nbx:
        unsafe extern "C" fn(Ptr, *const c_void, usize, u64, Ptr, *const UcpRequestParam) -> Ptr,
    pub(super) get_nbx:
        unsafe extern "C" fn(Ptr, *mut c_void, usize, u64, Ptr, *const UcpRequestParam) -> Ptr,
    pub(super) ep_flush_nbx: unsafe extern "C" fn(Ptr, *const UcpRequestParam) -> Ptr,
    pub(super) request_check_status: unsafe extern "C" fn(Ptr) -> Status,
    pub(super) get_version_string: unsafe extern "C" fn() -> *const c_char,
    pub(super) status_string: unsafe extern "C" fn(Status) -> *const c_char,
}

static LIB: OnceLock<Result<Lib, UcxError>> = OnceLock::new();

/// UCX's memory hooks patch `mmap`, `munmap`, `brk` and `malloc` to keep
/// its registration cache coherent. Under farmem's shim they would wrap the
/// calls the shim itself interposes, and could call back into UCX from a
/// fault handler. farmem registers its own buffers once instead, so the
/// hooks go off, set in libucm's own options (`ucm_set_global_opts`), never
/// in the environment: `setenv` in a multi-threaded process is undefined
/// behaviour, and `UCX_*` would leak into the program's children. A user's
/// own `UCX_MEM_*` variable still wins for its option.
fn hooks_off(opts: &mut UcmGlobalConfig) {
    let user = |k: &str| std::env::var_os(k).is_some();
    if !user("UCX_MEM_EVENTS") {
        opts.enable_events = 0;
    }
    if !user("UCX_MEM_MMAP_HOOK_MODE") {
        opts.mmap_hook_mode = UCM_MMAP_HOOK_NONE;
    }
    if !user("UCX_MEM_MALLOC_HOOKS") {
        opts.enable_malloc_hooks = 0;
    }
}

/// A symbol's address as the function pointer type `T`.
///
/// # Safety
/// `T` must be an `extern "C"` function pointer type matching the symbol.
unsafe fn fn_ptr<T: Copy>(p: *mut c_void) -> T {
    const { assert!(std::mem::size_of::<T>() == std::mem::size_of::<*mut c_void>()) };
    // SAFETY: same size (above); the caller vouches for the type.
    unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) }
}

/// Load UCX with its memory hooks and `cma` off.
///
/// Hazard (load order): libucs's constructor (`ucs_init`) reads `UCX_MEM_*`
/// from the environment and passes them to `ucm_set_global_opts`, whose
/// first call in the process (`ucm_library_init`, run once) patches `mmap`
/// and friends in place when events are on (UCX's default "bistro" mode).
/// Loading libucp first would install the hooks before farmem could say
/// no. So, in this order:
/// 1. libucm alone: it needs only libc, and its constructor only makes a
///    lock;
/// 2. farmem's options into libucm: the once-only init runs with events
///    off and installs nothing;
/// 3. libucs: its constructor overwrites the options with the
///    environment's (the defaults: hooks on), but the init has run;
/// 4. farmem's options again, before any context exists (malloc hooks
///    and event handlers install only when a context or a registration
///    cache asks, and read the options then);
/// 5. `MODULES=^cma` in UCX's global options (`ucs_global_opts_set_value`),
///    read when a first context loads UCT's modules: cma's probe would
///    otherwise call `prctl(PR_SET_PTRACER_ANY)`, whatever the transport
///    list says;
/// 6. libucp.
///
/// If the program loaded UCX itself before farmem, its constructors ran
/// already with its own settings; farmem then only turns off what is not
/// installed yet.
fn load() -> Result<Lib, UcxError> {
    let open = |name: &CStr, bind: c_int| {
        // SAFETY: dlopen of a NUL-terminated library name.
        let h = unsafe { libc::dlopen(name.as_ptr(), bind | libc::RTLD_GLOBAL) };
        if h.is_null() {
            // SAFETY: dlerror returns a thread-local NUL-terminated message or null.
            let e = unsafe { libc::dlerror() };
            let why = if e.is_null() {
                "not found".to_string()
            } else {
                // SAFETY: non-null, NUL-terminated (above).
                unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
            };
            return Err(UcxError::Missing(why));
        }
        Ok(h)
    };
    macro_rules! raw_sym {
        ($h:expr, $lib:expr, $name:literal) => {{
            // SAFETY: lookup of a NUL-terminated name in a live handle.
            let p = unsafe { libc::dlsym($h, $name.as_ptr()) };
            if p.is_null() {
                return Err(UcxError::Missing(format!(
                    "{} lacks {} (UCX older than 1.13?)",
                    $lib,
                    $name.to_string_lossy()
                )));
            }
            p
        }};
    }
    // The steps of the hazard above.
    // Lazy: libucm calls two functions of libucs (which needs libucm, so
    // libucm cannot name it); they bind at their first call, once libucs
    // is loaded (under LD_BIND_NOW this fails, and UCX stays off).
    let ucm = open(c"libucm.so.0", libc::RTLD_LAZY)?;
    let opts = raw_sym!(ucm, "libucm.so.0", c"ucm_global_opts").cast::<UcmGlobalConfig>();
    let p = raw_sym!(ucm, "libucm.so.0", c"ucm_set_global_opts");
    // SAFETY: `ucm_set_global_opts(const ucm_global_config_t *)` (ucm.h).
    let set_opts: unsafe extern "C" fn(*const UcmGlobalConfig) = unsafe { fn_ptr(p) };
    let apply = || {
        // SAFETY: `ucm_global_opts` is libucm's `ucm_global_config_t`
        // (layout checked by this module's tests), live while libucm is
        // loaded (never unloaded); nothing else writes it while this runs
        // (UCX's own writer is libucs's constructor, below or done).
        let mut o = unsafe { opts.read() };
        hooks_off(&mut o);
        // SAFETY: a valid options struct; libucm copies it.
        unsafe { set_opts(&o) };
    };
    apply();
    let ucs = open(c"libucs.so.0", libc::RTLD_NOW)?;
    apply();
    let p = raw_sym!(ucs, "libucs.so.0", c"ucs_global_opts_set_value");
    // SAFETY: `ucs_global_opts_set_value(const char *, const char *)`.
    let set_global: unsafe extern "C" fn(*const c_char, *const c_char) -> Status =
        unsafe { fn_ptr(p) };
    // SAFETY: NUL-terminated strings; called once, before any context.
    let s = unsafe { set_global(c"MODULES".as_ptr(), c"^cma".as_ptr()) };
    if s != UCS_OK {
        return Err(UcxError::Call {
            call: "ucs_global_opts_set_value(MODULES=^cma)",
            status: format!("status {s}"),
        });
    }
    let ucp = open(c"libucp.so.0", libc::RTLD_NOW)?;
    macro_rules! sym {
        ($h:expr, $name:literal) => {{
            let p = raw_sym!(
                $h,
                if $h == ucp {
                    "libucp.so.0"
                } else {
                    "libucs.so.0"
                },
                $name
            );
            // SAFETY: the symbol is the UCX function of that name, whose C
            // signature (ucp.h, UCX 1.13) the field's type spells out; the
            // ABI test checks the structures it takes.
            unsafe { fn_ptr(p) }
        }};
    }
    Ok(Lib {
        config_read: sym!(ucp, c"ucp_config_read"),
        config_modify: sym!(ucp, c"ucp_config_modify"),
        config_release: sym!(ucp, c"ucp_config_release"),
        init_version: sym!(ucp, c"ucp_init_version"),
        cleanup: sym!(ucp, c"ucp_cleanup"),
        context_query: sym!(ucp, c"ucp_context_query"),
        context_print_info: sym!(ucp, c"ucp_context_print_info"),
        worker_create: sym!(ucp, c"ucp_worker_create"),
        worker_destroy: sym!(ucp, c"ucp_worker_destroy"),
        worker_get_address: sym!(ucp, c"ucp_worker_get_address"),
        worker_release_address: sym!(ucp, c"ucp_worker_release_address"),
        worker_progress: sym!(ucp, c"ucp_worker_progress"),
        worker_get_efd: sym!(ucp, c"ucp_worker_get_efd"),
        worker_arm: sym!(ucp, c"ucp_worker_arm"),
        ep_create: sym!(ucp, c"ucp_ep_create"),
        ep_close_nbx: sym!(ucp, c"ucp_ep_close_nbx"),
        mem_map: sym!(ucp, c"ucp_mem_map"),
        mem_unmap: sym!(ucp, c"ucp_mem_unmap"),
        mem_query: sym!(ucp, c"ucp_mem_query"),
        rkey_pack: sym!(ucp, c"ucp_rkey_pack"),
        rkey_buffer_release: sym!(ucp, c"ucp_rkey_buffer_release"),
        ep_rkey_unpack: sym!(ucp, c"ucp_ep_rkey_unpack"),
        rkey_destroy: sym!(ucp, c"ucp_rkey_destroy"),
        rkey_ptr: sym!(ucp, c"ucp_rkey_ptr"),
        put_nbx: sym!(ucp, c"ucp_put_nbx"),
        get_nbx: sym!(ucp, c"ucp_get_nbx"),
        ep_flush_nbx: sym!(ucp, c"ucp_ep_flush_nbx"),
        request_check_status: sym!(ucp, c"ucp_request_check_status"),
        get_version_string: sym!(ucp, c"ucp_get_version_string"),
        status_string: sym!(ucs, c"ucs_status_string"),
    })
}

pub(super) fn lib() -> Result<&'static Lib, UcxError> {
    LIB.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// Whether UCX can be loaded here; the error says why not.
pub fn available() -> Result<(), UcxError> {
    lib().map(|_| ())
}

/// The loaded UCX's version string (`1.13.1`), if it loads.
pub fn version() -> Option<String> {
    let l = lib().ok()?;
    // SAFETY: UCX returns a static NUL-terminated string.
    Some(
        unsafe { CStr::from_ptr((l.get_version_string)()) }
            .to_string_lossy()
            .into_owned(),
    )
}

pub(super) fn status_text(l: &Lib, s: Status) -> String {
    // SAFETY: UCX returns a static NUL-terminated string for any status.
    unsafe { CStr::from_ptr((l.status_string)(s)) }
        .to_string_lossy()
        .into_owned()
}

pub(super) fn check(l: &Lib, call: &'static str, s: Status) -> Result<(), UcxError> {
    if s == UCS_OK {
        Ok(())
    } else {
        Err(UcxError::Call {
            call,
            status: status_text(l, s),
        })
    }
}

/// A UCX status as text (for messages).
pub fn status_string(s: Status) -> String {
    lib().map_or_else(|_| format!("status {s}"), |l| status_text(l, s))
}
