//! What the runtime's test programs share: a far allocation seen as words.

use farmem_runtime::Runtime;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard};

pub const PAGE: usize = farmem_sys::PAGE_SIZE;

pub struct Region {
    rt: &'static Runtime,
    pub ptr: *mut u64,
    pub words: usize,
}
// SAFETY: the tests coordinate access by index ranges or use atomics.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    pub fn new(rt: &'static Runtime, bytes: usize) -> Region {
        Region {
            rt,
            ptr: rt.alloc(bytes).unwrap().cast(),
            words: bytes / 8,
        }
    }

    pub fn word(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.words);
        // SAFETY: i is in bounds of the live, 8-byte aligned allocation.
        unsafe { &*self.ptr.add(i).cast::<AtomicU64>() }
    }

    pub fn addr(&self, i: usize) -> usize {
        self.ptr as usize + i * 8
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        self.rt.free(self.ptr.cast()).unwrap();
    }
}

/// `cfg` with `transport=` from the environment's `FARMEM_TRANSPORT`, so
/// scripts/test.sh runs the same test over sockets and over UCX.
#[allow(dead_code)] // page_cost takes the whole configuration from the environment
pub fn with_transport(cfg: &str) -> String {
    match std::env::var("FARMEM_TRANSPORT") {
        Ok(t) if !t.is_empty() => format!("{cfg} transport={t}"),
        _ => cfg.to_string(),
    }
}

/// This test program's runtime, started on first use with the
/// configuration `cfg` makes (and the environment's transport): one runtime
/// per process.
#[allow(dead_code)] // older test programs start their own
pub fn runtime(cfg: impl FnOnce() -> String) -> &'static Runtime {
    static RT: std::sync::OnceLock<&'static Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        let cfg = farmem_runtime::Config::from_str_config(&with_transport(&cfg())).unwrap();
        farmem_runtime::init(cfg).expect("init")
    })
}

/// The page after `p` in a walk over `pages` (a power of two) that visits
/// each once per period (an LCG with a ≡ 1 mod 4 and c odd), in an order no
/// prefetch stream follows, so that faults are mostly single demand pages.
#[allow(dead_code)] // not every test program walks
pub fn scattered_next(p: usize, pages: usize, round: u64) -> usize {
    let round = usize::try_from(round).expect("a small round");
    (p * 1_103_515_245 + 12_345 + 2 * round) % pages
}

/// A turn for a test that counts what the shared runtime does: the test
/// harness runs a program's tests on threads at once, and another test's
/// pages would change the counts.
#[allow(dead_code)] // not every test program counts
pub fn alone() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
