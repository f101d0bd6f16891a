//! The UCP context: RMA on an explicit transport list.

use super::abi::{
    UcpContextAttr, UcpParams, UCP_API_MAJOR, UCP_API_MINOR, UCP_ATTR_FIELD_REQUEST_SIZE,
    UCP_ATTR_FIELD_THREAD_MODE, UCP_FEATURE_RMA, UCP_FEATURE_WAKEUP, UCP_PARAM_FIELD_FEATURES,
    UCP_PARAM_FIELD_MT_WORKERS_SHARED, UCP_PARAM_FIELD_NAME, UCS_OK,
};
use super::load::{check, lib, status_text};
use super::{parse_resources, Ptr, Resource, Transports, UcxError};
use std::ffi::{c_char, c_int, CStr, CString};

/// A `ucp_context_h` with RMA (and wake-up events, for a server's
/// progress thread), on an explicit transport list, shared by workers of
/// several threads (`mt_workers_shared`: UCX locks the context's own
/// state, such as memory registration, itself).
pub struct Context {
    pub(super) h: Ptr,
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
