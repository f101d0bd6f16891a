//! The C API declared in `include/farmem.h`: `fm_init`, `fm_alloc`,
//! `fm_free`, `fm_advise`, the statistics and the error strings. It sits on
//! top of the interposers only to start the raw-call net with the runtime.

use crate::dispatch;
use farmem_runtime::{self as rt, Advice, Config, RuntimeError};
use libc::{c_char, c_int, c_void, size_t};
use std::cell::RefCell;
use std::ffi::{CStr, CString};

pub const FM_OK: c_int = 0;
pub const FM_ECONFIG: c_int = 1;
pub const FM_EBACKEND: c_int = 2;
pub const FM_ENOSYS: c_int = 3;
pub const FM_EALREADY: c_int = 4;
pub const FM_ENOMEM: c_int = 5;
pub const FM_EINVAL: c_int = 6;
pub const FM_EBUDGET: c_int = 7;
pub const FM_EFORK: c_int = 8;

pub const FM_ADV_NORMAL: c_int = 0;
pub const FM_ADV_SEQUENTIAL: c_int = 1;
pub const FM_ADV_RANDOM: c_int = 2;
pub const FM_ADV_WILLNEED: c_int = 3;
pub const FM_ADV_DONTNEED: c_int = 4;
pub const FM_ADV_PIN: c_int = 5;
pub const FM_ADV_UNPIN: c_int = 6;
pub const FM_ADV_READ_MOSTLY: c_int = 7;

/// `struct fm_stats`; layout checked against the C header by a test.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct FmStats {
    pub faults: u64,
    pub wp_faults: u64,
    pub bytes_fetched: u64,
    pub bytes_written_back: u64,
    pub evictions: u64,
    pub prefetched: u64,
    pub prefetch_used: u64,
    pub prefetch_wasted: u64,
    pub zero_filled_pages: u64,
    pub io_pins: u64,
    pub resident_bytes: u64,
    pub budget_bytes: u64,
    pub fault_p50_ns: u64,
    pub fault_p90_ns: u64,
    pub fault_p99_ns: u64,
    pub fault_max_ns: u64,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn code_of(e: &RuntimeError) -> c_int {
    match e {
        RuntimeError::Config(_) | RuntimeError::Trace(..) => FM_ECONFIG,
        RuntimeError::Backend(_) | RuntimeError::Server(_) => FM_EBACKEND,
        RuntimeError::Uffd(_) | RuntimeError::Signal(_) | RuntimeError::PageSize(_) => FM_ENOSYS,
        RuntimeError::AlreadyInitialized => FM_EALREADY,
        RuntimeError::Map { .. } | RuntimeError::OutOfSpace { .. } | RuntimeError::Remap(..) => {
            FM_ENOMEM
        }
        RuntimeError::PinBudget { .. } => FM_EBUDGET,
        RuntimeError::Forked => FM_EFORK,
        RuntimeError::NotInitialized
        | RuntimeError::InvalidPointer(_)
        | RuntimeError::InvalidRange { .. }
        | RuntimeError::ZeroSize
        | RuntimeError::NotPinned => FM_EINVAL,
    }
}

/// Record `e` as this thread's last error and return its (negative) code.
fn fail(e: RuntimeError) -> c_int {
    let msg = CString::new(format!("farmem: {e}")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = msg);
    -code_of(&e)
}

fn runtime_or_init() -> Result<&'static rt::Runtime, RuntimeError> {
    if let Some(r) = rt::get() {
        return Ok(r);
    }
    match rt::init(Config::from_env()?) {
        Ok(r) => {
            dispatch::start();
            Ok(r)
        }
        // Another thread won the race.
        Err(RuntimeError::AlreadyInitialized) => rt::get().ok_or(RuntimeError::NotInitialized),
        Err(e) => Err(e),
    }
}

/// `int fm_init(const char *config)`.
///
/// # Safety
/// `config` is NULL or a NUL-terminated string.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn fm_init(config: *const c_char) -> c_int {
    let cfg = if config.is_null() {
        Config::from_env()
    } else {
        // SAFETY: the caller passes a NUL-terminated string.
        let s = unsafe { CStr::from_ptr(config) }.to_string_lossy();
        Config::from_str_config(&s)
    };
    match cfg.map_err(RuntimeError::from).and_then(rt::init) {
        Ok(_) => {
            dispatch::start();
            FM_OK
        }
        Err(e) => fail(e),
    }
}

/// `void *fm_alloc(size_t size)`: NULL on failure (see `fm_last_error`).
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn fm_alloc(size: size_t) -> *mut c_void {
    match runtime_or_init().and_then(|r| r.alloc(size)) {
        Ok(p) => p.cast(),
        Err(e) => {
            fail(e);
            std::ptr::null_mut()
        }
    }
}

/// `void fm_free(void *p)`: NULL is ignored; a pointer not from `fm_alloc`
/// is reported on stderr and otherwise ignored.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn fm_free(p: *mut c_void) {
    if p.is_null() {
        return;
    }
    match rt::get() {
        Some(r) => {
            if let Err(e) = r.free(p.cast()) {
                eprintln!("farmem: fm_free: {e}");
                fail(e);
            }
        }
        None => eprintln!("farmem: fm_free({p:p}) before any fm_alloc"),
    }
}

/// `int fm_advise(void *p, size_t len, int advice)`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn fm_advise(p: *mut c_void, len: size_t, advice: c_int) -> c_int {
    let adv = match advice {
        FM_ADV_NORMAL => Advice::Normal,
        FM_ADV_SEQUENTIAL => Advice::Sequential,
        FM_ADV_RANDOM => Advice::Random,
        FM_ADV_WILLNEED => Advice::WillNeed,
        FM_ADV_DONTNEED => Advice::DontNeed,
        FM_ADV_PIN => Advice::Pin,
        FM_ADV_UNPIN => Advice::Unpin,
        FM_ADV_READ_MOSTLY => Advice::ReadMostly,
        _ => {
            let msg = CString::new(format!(
                "farmem: unknown advice {advice} (use an FM_ADV_* constant)"
            ))
            .unwrap_or_default();
            LAST_ERROR.with(|l| *l.borrow_mut() = msg);
            return -FM_EINVAL;
        }
    };
    let Some(r) = rt::get() else {
        return fail(RuntimeError::NotInitialized);
    };
    match r.advise(p as usize, len, adv) {
        Ok(()) => FM_OK,
        Err(e) => fail(e),
    }
}

/// `int fm_stats(struct fm_stats *out)`.
///
/// # Safety
/// `out` is NULL or points to a writable `struct fm_stats`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn fm_stats(out: *mut FmStats) -> c_int {
    if out.is_null() {
        let msg = CString::new("farmem: fm_stats: NULL output pointer").unwrap_or_default();
        LAST_ERROR.with(|l| *l.borrow_mut() = msg);
        return -FM_EINVAL;
    }
    let Some(r) = rt::get() else {
        return fail(RuntimeError::NotInitialized);
    };
    let s = r.snapshot();
    let v = FmStats {
        faults: s.faults,
        wp_faults: s.wp_faults,
        bytes_fetched: s.bytes_fetched,
        bytes_written_back: s.bytes_written_back,
        evictions: s.evictions,
        prefetched: s.prefetched,
        prefetch_used: s.prefetch_used,
        prefetch_wasted: s.prefetch_wasted,
        zero_filled_pages: s.pages_zero_filled,
        io_pins: s.io_pins,
        resident_bytes: s.resident_bytes,
        budget_bytes: s.budget_bytes,
        fault_p50_ns: s.fault_p50_ns,
        fault_p90_ns: s.fault_p90_ns,
        fault_p99_ns: s.fault_p99_ns,
        fault_max_ns: s.fault_max_ns,
    };
    // SAFETY: the caller passes a writable fm_stats.
    unsafe { out.write(v) };
    FM_OK
}

/// `void fm_stats_reset_latency(void)`: start a new latency measurement.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn fm_stats_reset_latency() {
    if let Some(r) = rt::get() {
        r.reset_latency();
    }
}

/// `void fm_stats_print(void)`: the human table on stderr.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn fm_stats_print() {
    if let Some(r) = rt::get() {
        eprint!("{}", r.stats_text());
    }
}

/// `int fm_is_far(const void *p)`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn fm_is_far(p: *const c_void) -> c_int {
    rt::get().is_some_and(|r| r.contains(p as usize)) as c_int
}

/// `const char *fm_strerror(int code)`: static text for a code (either sign).
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn fm_strerror(code: c_int) -> *const c_char {
    let s: &'static CStr = match code.saturating_abs() {
        FM_OK => c"success",
        FM_ECONFIG => {
            c"invalid configuration (see the FARMEM_* reference in docs/configuration.md)"
        }
        FM_EBACKEND => c"the far-memory backend (memory server or file) failed or is unreachable",
        FM_ENOSYS => c"userfaultfd is not available on this system",
        FM_EALREADY => c"farmem is already initialised",
        FM_ENOMEM => c"out of far memory or address space",
        FM_EINVAL => c"invalid argument",
        FM_EBUDGET => c"the request does not fit the local-memory budget",
        FM_EFORK => c"far memory is not available in a forked child",
        _ => c"unknown farmem error code",
    };
    s.as_ptr()
}

/// `const char *fm_last_error(void)`: this thread's last detailed message
/// (valid until the thread's next failing farmem call).
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn fm_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

/// `const char *fm_version(void)`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn fm_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
