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

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::OnceLock;
use thiserror::Error;

mod abi;
pub mod packed;
pub use abi::*;

type Ptr = *mut c_void;

/// The entry points, resolved once.
#[allow(clippy::type_complexity)]
struct Lib {
    config_read: unsafe extern "C" fn(*const c_char, *const c_char, *mut Ptr) -> Status,
    config_modify: unsafe extern "C" fn(Ptr, *const c_char, *const c_char) -> Status,
    config_release: unsafe extern "C" fn(Ptr),
    init_version: unsafe extern "C" fn(c_uint, c_uint, *const UcpParams, Ptr, *mut Ptr) -> Status,
    cleanup: unsafe extern "C" fn(Ptr),
    context_query: unsafe extern "C" fn(Ptr, *mut UcpContextAttr) -> Status,
    context_print_info: unsafe extern "C" fn(Ptr, *mut libc::FILE),
    worker_create: unsafe extern "C" fn(Ptr, *const UcpWorkerParams, *mut Ptr) -> Status,
    worker_destroy: unsafe extern "C" fn(Ptr),
    worker_get_address: unsafe extern "C" fn(Ptr, *mut Ptr, *mut usize) -> Status,
    worker_release_address: unsafe extern "C" fn(Ptr, Ptr),
    worker_progress: unsafe extern "C" fn(Ptr) -> c_uint,
    worker_get_efd: unsafe extern "C" fn(Ptr, *mut c_int) -> Status,
    worker_arm: unsafe extern "C" fn(Ptr) -> Status,
    ep_create: unsafe extern "C" fn(Ptr, *const UcpEpParams, *mut Ptr) -> Status,
    ep_close_nbx: unsafe extern "C" fn(Ptr, *const UcpRequestParam) -> Ptr,
    mem_map: unsafe extern "C" fn(Ptr, *const UcpMemMapParams, *mut Ptr) -> Status,
    mem_unmap: unsafe extern "C" fn(Ptr, Ptr) -> Status,
    mem_query: unsafe extern "C" fn(Ptr, *mut UcpMemAttr) -> Status,
    rkey_pack: unsafe extern "C" fn(Ptr, Ptr, *mut Ptr, *mut usize) -> Status,
    rkey_buffer_release: unsafe extern "C" fn(Ptr),
    ep_rkey_unpack: unsafe extern "C" fn(Ptr, *const c_void, *mut Ptr) -> Status,
    rkey_destroy: unsafe extern "C" fn(Ptr),
    rkey_ptr: unsafe extern "C" fn(Ptr, u64, *mut Ptr) -> Status,
    put_nbx:
        unsafe extern "C" fn(Ptr, *const c_void, usize, u64, Ptr, *const UcpRequestParam) -> Ptr,
    get_nbx: unsafe extern "C" fn(Ptr, *mut c_void, usize, u64, Ptr, *const UcpRequestParam) -> Ptr,
    ep_flush_nbx: unsafe extern "C" fn(Ptr, *const UcpRequestParam) -> Ptr,
    request_check_status: unsafe extern "C" fn(Ptr) -> Status,
    get_version_string: unsafe extern "C" fn() -> *const c_char,
    status_string: unsafe extern "C" fn(Status) -> *const c_char,
}

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

fn lib() -> Result<&'static Lib, UcxError> {
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

fn status_text(l: &Lib, s: Status) -> String {
    // SAFETY: UCX returns a static NUL-terminated string for any status.
    unsafe { CStr::from_ptr((l.status_string)(s)) }
        .to_string_lossy()
        .into_owned()
}

fn check(l: &Lib, call: &'static str, s: Status) -> Result<(), UcxError> {
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

/// Which UCX transports a [`Context`] may use: only those whose RMA the
/// NIC or the kernel checks, so that a remote key is a capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transports {
    /// RDMA verbs: UCX 1.13's aliases `rc` (`rc_mlx5`, `rc_verbs`) and `dc`
    /// (`dc_mlx5`), whose gets and puts the NIC checks against its rkeys.
    /// The aliases bring `ud_mlx5`/`ud_verbs` as auxiliary transports
    /// (`:aux`), which UCX uses for connection set-up only and never picks
    /// for a lane; a `ud` that is not auxiliary is refused.
    Verbs,
    /// [`Transports::Verbs`] and, on one host, UCX's `posix` shared memory:
    /// a test path, so that the UCX code runs on machines without RDMA.
    /// What it trusts: a peer reaches a posix segment by opening
    /// `/proc/<pid>/fd/<fd>` (`POSIX_USE_PROC_LINK=y`; the name is unlinked
    /// at once), which the kernel allows the same uid only (ptrace access
    /// rules). So any process of the same user can read and write the
    /// memory, as it could with ptrace anyway; never `sysv` (group-readable
    /// segments) or `cma` (`PR_SET_PTRACER_ANY`).
    PosixTestPath,
}

impl Transports {
    /// The value of UCX's `TLS` setting.
    pub fn tls(self) -> &'static str {
        match self {
            Transports::Verbs => "rc,dc",
            Transports::PosixTestPath => "rc,dc,posix",
        }
    }

    /// Whether a context may hold transport `tl` (`aux`: for connection
    /// set-up only).
    pub fn allows(self, tl: &str, aux: bool) -> bool {
        match tl {
            "rc_mlx5" | "rc_verbs" | "dc_mlx5" => true,
            "ud_mlx5" | "ud_verbs" => aux,
            "posix" => self == Transports::PosixTestPath,
            _ => false,
        }
    }

    /// The transports of `resources` this list does not allow, as
    /// `tl/device` names (empty: all allowed).
    pub fn unexpected(self, resources: &[Resource]) -> Vec<String> {
        resources
            .iter()
            .filter(|r| !self.allows(&r.tl, r.aux))
            .map(|r| format!("{}/{}{}", r.tl, r.dev, if r.aux { " (aux)" } else { "" }))
            .collect()
    }
}

/// One transport resource of a context (`ucp_context_print_info`'s
/// `resource` lines): every worker of the context opens its interfaces on
/// these and no others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    pub tl: String,
    pub dev: String,
    /// For connection set-up only (`flags a-`).
    pub aux: bool,
}

/// The resources listed in `ucp_context_print_info`'s text: lines of the
/// form `#      resource 0  :  md 0  dev 0  flags -- posix/memory`.
pub fn parse_resources(text: &str) -> Vec<Resource> {
    text.lines()
        .filter_map(|l| {
            let rest = l.trim_start_matches('#').trim_start();
            let rest = rest.strip_prefix("resource")?;
            let after = &rest[rest.find("flags ")? + "flags ".len()..];
            let (flags, name) = after.split_once(char::is_whitespace)?;
            let (tl, dev) = name.trim().split_once('/')?;
            Some(Resource {
                tl: tl.to_string(),
                dev: dev.to_string(),
                aux: flags.starts_with('a'),
            })
        })
        .collect()
}

/// A `ucp_context_h` with RMA (and wake-up events, for a server's
/// progress thread), on an explicit transport list, shared by workers of
/// several threads (`mt_workers_shared`: UCX locks the context's own
/// state, such as memory registration, itself).
pub struct Context {
    h: Ptr,
    request_size: usize,
}

// SAFETY: a UCP context made with `mt_workers_shared = 1` is thread-safe
// for the calls farmem makes on it (worker creation, memory mapping, key
// packing); UCX takes its context lock.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Context {
    /// [`Context::with_transports`] on [`Transports::PosixTestPath`].
    pub fn new(name: &CStr, wakeup: bool, settings: &[(&str, &str)]) -> Result<Context, UcxError> {
        Context::with_transports(name, wakeup, Transports::PosixTestPath, settings)
    }

    /// A context on `transports` only. `settings` are other UCX
    /// configuration names without the `UCX_` prefix (`NET_DEVICES`); the
    /// environment's `UCX_*` apply first, then `settings`, then the
    /// transport list (`TLS`, posix's `USE_PROC_LINK`), which neither may
    /// widen. Fails with [`UcxError::Transports`] when UCX still gives the
    /// context another transport.
    pub fn with_transports(
        name: &CStr,
        wakeup: bool,
        transports: Transports,
        settings: &[(&str, &str)],
    ) -> Result<Context, UcxError> {
        let l = lib()?;
        let mut cfg: Ptr = std::ptr::null_mut();
        // SAFETY: null prefix and file mean the defaults and the environment.
        check(l, "ucp_config_read", unsafe {
            (l.config_read)(std::ptr::null(), std::ptr::null(), &mut cfg)
        })?;
        // USE_PROC_LINK: posix's own setting (UCX_POSIX_USE_PROC_LINK in
        // the environment; through this API, UCT settings go by their
        // name in the component's table).
        // WARN_INVALID_CONFIG: UCX would warn on every host without RDMA
        // that `rc` and `dc` are missing; what the context got is checked
        // below instead.
        let forced = [
            ("TLS", transports.tls()),
            ("USE_PROC_LINK", "y"),
            ("WARN_INVALID_CONFIG", "n"),
        ];
        for (k, v) in settings.iter().chain(forced.iter()) {
            let (Ok(k), Ok(v)) = (CString::new(*k), CString::new(*v)) else {
                continue;
            };
            // SAFETY: a live config and NUL-terminated strings.
            let s = unsafe { (l.config_modify)(cfg, k.as_ptr(), v.as_ptr()) };
            if let Err(e) = check(l, "ucp_config_modify", s) {
                // SAFETY: releasing the config read above.
                unsafe { (l.config_release)(cfg) };
                return Err(e);
            }
        }
        let params = UcpParams {
            field_mask: UCP_PARAM_FIELD_FEATURES
                | UCP_PARAM_FIELD_NAME
                | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
            features: UCP_FEATURE_RMA | if wakeup { UCP_FEATURE_WAKEUP } else { 0 },
            request_size: 0,
            request_init: std::ptr::null(),
            request_cleanup: std::ptr::null(),
            tag_sender_mask: 0,
            mt_workers_shared: 1,
            estimated_num_eps: 0,
            estimated_num_ppn: 0,
            name: name.as_ptr(),
        };
        let mut h: Ptr = std::ptr::null_mut();
        // SAFETY: valid params and config; `h` receives the context.
        let s = unsafe { (l.init_version)(UCP_API_MAJOR, UCP_API_MINOR, &params, cfg, &mut h) };
        // SAFETY: the config is no longer needed once init returned.
        unsafe { (l.config_release)(cfg) };
        if s != UCS_OK {
            return Err(UcxError::Call {
                call: "ucp_init",
                status: format!(
                    "{} (transports {}: RDMA verbs{})",
                    status_text(l, s),
                    transports.tls(),
                    if transports == Transports::PosixTestPath {
                        ", or posix shared memory on one host"
                    } else {
                        ""
                    }
                ),
            });
        }
        let mut attr = UcpContextAttr {
            field_mask: UCP_ATTR_FIELD_REQUEST_SIZE,
            request_size: 0,
            thread_mode: 0,
            memory_types: 0,
            name: [0; 32],
        };
        // SAFETY: a live context and an attribute struct to fill.
        let s = unsafe { (l.context_query)(h, &mut attr) };
        let ctx = Context {
            h,
            request_size: attr.request_size,
        };
        check(l, "ucp_context_query", s)?;
        // Before any worker exists, so no interface (no listener) ever
        // opens on a transport outside the list.
        let unexpected = transports.unexpected(&ctx.resources()?);
        if !unexpected.is_empty() {
            return Err(UcxError::Transports {
                allowed: transports.tls(),
                unexpected: unexpected.join(", "),
            });
        }
        Ok(ctx)
    }

    /// The transport resources this context's workers open interfaces on
    /// (UCX 1.13 reports them only as text: `ucp_context_print_info`).
    pub fn resources(&self) -> Result<Vec<Resource>, UcxError> {
        let l = lib()?;
        let mut buf: *mut c_char = std::ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: open_memstream keeps `buf` and `len` updated until fclose.
        let f = unsafe { libc::open_memstream(&mut buf, &mut len) };
        if f.is_null() {
            return Err(UcxError::Call {
                call: "open_memstream",
                status: std::io::Error::last_os_error().to_string(),
            });
        }
        // SAFETY: a live context and an open stream.
        unsafe { (l.context_print_info)(self.h, f) };
        // SAFETY: closing the stream opened above; `buf` then holds `len`
        // bytes (NUL-terminated) that this function owns.
        let closed = unsafe { libc::fclose(f) };
        let text = if buf.is_null() {
            String::new()
        } else {
            // SAFETY: as above.
            let t = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
            let t = String::from_utf8_lossy(t).into_owned();
            // SAFETY: the buffer open_memstream allocated, freed once.
            unsafe { libc::free(buf.cast()) };
            t
        };
        if closed != 0 {
            return Err(UcxError::Call {
                call: "ucp_context_print_info",
                status: "its output could not be read".into(),
            });
        }
        Ok(parse_resources(&text))
    }

    /// The context's thread mode (`UCS_THREAD_MODE_MULTI` when workers
    /// share it across threads).
    pub fn thread_mode(&self) -> Result<c_int, UcxError> {
        let l = lib()?;
        let mut attr = UcpContextAttr {
            field_mask: UCP_ATTR_FIELD_THREAD_MODE,
            request_size: 0,
            thread_mode: 0,
            memory_types: 0,
            name: [0; 32],
        };
        // SAFETY: a live context and an attribute struct to fill.
        check(l, "ucp_context_query", unsafe {
            (l.context_query)(self.h, &mut attr)
        })?;
        Ok(attr.thread_mode)
    }

    /// Bytes UCX needs before each caller-provided request.
    pub fn request_size(&self) -> usize {
        self.request_size
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        if let Ok(l) = lib() {
            // SAFETY: the context is live and every object made from it
            // has been released by its owner first.
            unsafe { (l.cleanup)(self.h) };
        }
    }
}

/// A `ucp_worker_h` in serialized mode: any thread may use it, one at a
/// time (the caller's lock).
pub struct Worker {
    h: Ptr,
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

    /// The worker's address, for a peer's [`Endpoint::connect`].
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

    /// The raw handle, for an [`Op`]'s `memh`.
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

/// A `ucp_ep_h` to a peer worker, without peer-failure mode: failures are
/// found by the control connection and by timeouts (see the runtime).
pub struct Endpoint {
    h: Ptr,
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
    h: Ptr,
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

fn is_request(p: Ptr) -> bool {
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

    /// The request's status: [`UCS_INPROGRESS`] until it completes.
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
/// [`UCS_INPROGRESS`] until it completes.
///
/// # Safety
/// Only for an operation started with that request memory that returned
/// [`Started::Pending`] and was not yet seen complete.
pub unsafe fn poll(request: *mut u8) -> Status {
    let Ok(l) = lib() else { return -1 };
    // SAFETY: the caller's contract: a request in flight.
    unsafe { (l.request_check_status)(request.cast()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRINTED: &str = "#
# UCP context
#
#     component 0  :  self
#     component 1  :  tcp
#
#            md 0  :  component 0  self 
#            md 1  :  component 1  tcp
#
#      resource 0  :  md 0  dev 0  flags -- self/memory
#      resource 1  :  md 1  dev 1  flags -- tcp/lo
#      resource 2  :  md 2  dev 2  flags a- ud_mlx5/mlx5_0:1
#      resource 3  :  md 2  dev 2  flags -- rc_mlx5/mlx5_0:1
#      resource 4  :  md 3  dev 3  flags -- posix/memory
#
";

    #[test]
    fn resources_parse_with_their_aux_flag() {
        let r = parse_resources(PRINTED);
        let names: Vec<_> = r
            .iter()
            .map(|r| (r.tl.as_str(), r.dev.as_str(), r.aux))
            .collect();
        assert_eq!(
            names,
            [
                ("self", "memory", false),
                ("tcp", "lo", false),
                ("ud_mlx5", "mlx5_0:1", true),
                ("rc_mlx5", "mlx5_0:1", false),
                ("posix", "memory", false),
            ]
        );
    }

    #[test]
    fn only_verbs_rma_and_the_posix_test_path_are_allowed() {
        let r = parse_resources(PRINTED);
        assert_eq!(
            Transports::Verbs.unexpected(&r),
            ["self/memory", "tcp/lo", "posix/memory"]
        );
        assert_eq!(
            Transports::PosixTestPath.unexpected(&r),
            ["self/memory", "tcp/lo"]
        );
        for tl in ["tcp", "sysv", "cma", "self", "knem", "xpmem"] {
            assert!(!Transports::PosixTestPath.allows(tl, false), "{tl}");
            assert!(!Transports::PosixTestPath.allows(tl, true), "{tl}");
        }
        // ud carries RMA in software: only for connection set-up.
        assert!(!Transports::Verbs.allows("ud_verbs", false));
        assert!(Transports::Verbs.allows("ud_verbs", true));
        assert!(!Transports::Verbs.allows("posix", false));
    }

    /// The contexts farmem makes: posix only on this kind of host, shared
    /// across threads, memory hooks and cma off without the environment.
    #[test]
    fn contexts_get_only_the_listed_transports() {
        // libc's `mmap` as it starts, before UCX could patch it.
        let entry = || {
            // SAFETY: lookup of a NUL-terminated name in the global scope.
            let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"mmap".as_ptr()) };
            // SAFETY: the first bytes of a function's code, readable.
            unsafe { std::ptr::read_volatile(f.cast::<[u8; 16]>()) }
        };
        let before = entry();
        if available().is_err() {
            return; // no UCX here: nothing to check
        }
        let ctx = Context::new(c"farmem-unit", false, &[]).unwrap();
        // A registration would install the memory hooks were they on.
        let mem = Memory::map(&ctx, 1 << 20, None).unwrap();
        drop(mem);
        let hooks_by_user = ["UCX_MEM_EVENTS", "UCX_MEM_MMAP_HOOK_MODE"]
            .iter()
            .any(|v| std::env::var_os(v).is_some());
        if !hooks_by_user {
            assert_eq!(before, entry(), "UCX patched mmap");
        }
        let r = ctx.resources().unwrap();
        assert!(!r.is_empty());
        assert_eq!(
            Transports::PosixTestPath.unexpected(&r),
            Vec::<String>::new()
        );
        assert_eq!(ctx.thread_mode().unwrap(), UCS_THREAD_MODE_MULTI);
        // A caller's TLS cannot widen the list.
        let wide = Context::new(c"farmem-unit", false, &[("TLS", "all")]).unwrap();
        assert_eq!(
            Transports::PosixTestPath.unexpected(&wide.resources().unwrap()),
            Vec::<String>::new()
        );
        // Without RDMA, the verbs list gives no context at all.
        if !r.iter().any(|r| Transports::Verbs.allows(&r.tl, r.aux)) {
            assert!(
                Context::with_transports(c"farmem-unit", false, Transports::Verbs, &[]).is_err()
            );
        }
        // cma's module was never loaded (its probe sets PR_SET_PTRACER_ANY).
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        assert!(!maps.contains("libuct_cma"), "{maps}");
        // The hooks are off in libucm's options, not in the environment.
        // SAFETY: lookup of a NUL-terminated name in the global scope.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"ucm_global_opts".as_ptr()) };
        assert!(!p.is_null());
        // SAFETY: libucm's options (layout checked below), loaded for good.
        let o = unsafe { p.cast::<UcmGlobalConfig>().read() };
        for (var, value) in [
            ("UCX_MEM_EVENTS", o.enable_events),
            ("UCX_MEM_MMAP_HOOK_MODE", o.mmap_hook_mode),
            ("UCX_MEM_MALLOC_HOOKS", o.enable_malloc_hooks),
        ] {
            if std::env::var_os(var).is_none() {
                assert_eq!(value, 0, "{var}");
            }
        }
    }

    #[test]
    fn ucm_options_match_the_installed_header() {
        const PROGRAM: &str = r#"
#include <ucm/api/ucm.h>
#include <stdio.h>
#include <stddef.h>
#define O(f) printf("%zu ", offsetof(ucm_global_config_t, f))
int main(void) {
    printf("%zu ", sizeof(ucm_global_config_t));
    O(log_level); O(enable_events); O(mmap_hook_mode); O(enable_malloc_hooks);
    O(enable_malloc_reloc); O(cuda_hook_modes); O(enable_dynamic_mmap_thresh);
    O(alloc_alignment); O(dlopen_process_rpath); O(module_unload_prevent_mode);
    printf("%d %d %lld\n", (int)UCM_MMAP_HOOK_NONE, (int)UCS_THREAD_MODE_MULTI,
           (long long)UCP_PARAM_FIELD_MT_WORKERS_SHARED);
    return 0;
}
"#;
        let program = PROGRAM.replace(
            "#include <stdio.h>",
            "#include <ucp/api/ucp.h>\n#include <stdio.h>",
        );
        let dir = std::env::temp_dir().join(format!("farmem-ucm-abi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (src, bin) = (dir.join("ucm.c"), dir.join("ucm"));
        std::fs::write(&src, program).unwrap();
        let Ok(cc) = std::process::Command::new("gcc")
            .arg(&src)
            .arg("-o")
            .arg(&bin)
            .output()
        else {
            return; // no compiler: tests/ucx_abi.rs says so
        };
        if !cc.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
            assert!(
                String::from_utf8_lossy(&cc.stderr).contains("No such file"),
                "{}",
                String::from_utf8_lossy(&cc.stderr)
            );
            return; // no UCX headers: tests/ucx_abi.rs says so
        }
        let out = std::process::Command::new(&bin).output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        use std::mem::{offset_of, size_of};
        type C = UcmGlobalConfig;
        let want = format!(
            "{} {} {} {} {} {} {} {} {} {} {} {} {} {}\n",
            size_of::<C>(),
            offset_of!(C, log_level),
            offset_of!(C, enable_events),
            offset_of!(C, mmap_hook_mode),
            offset_of!(C, enable_malloc_hooks),
            offset_of!(C, enable_malloc_reloc),
            offset_of!(C, cuda_hook_modes),
            offset_of!(C, enable_dynamic_mmap_thresh),
            offset_of!(C, alloc_alignment),
            offset_of!(C, dlopen_process_rpath),
            offset_of!(C, module_unload_prevent_mode),
            UCM_MMAP_HOOK_NONE,
            UCS_THREAD_MODE_MULTI,
            UCP_PARAM_FIELD_MT_WORKERS_SHARED,
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), want);
    }
}
