//! A spin lock usable inside the SIGBUS handler, a lock its holder may
//! retire for good, and the fixed-capacity ring that the replacement queues
//! are made of.

/// How every wait in the runtime backs off (page states, locks, lanes,
/// slots): spin a little longer each round, then yield the CPU, in case the
/// thread waited for was preempted on this one (2 vCPUs, or an
/// oversubscribed node). Async-signal-safe: no allocation, and
/// `sched_yield` at most.
pub(crate) use crossbeam_utils::Backoff;

/// Lock `m`, taking it over from a thread that panicked while holding it
/// (the data it guards stays consistent between statements).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// A test-and-test-and-set lock. Held only for a few hundred instructions,
/// never across I/O, with one exception: a memory-server connection's lock
/// (`backend/remote/conn.rs`), held for one request and its reply, since the
/// stream has one position; another thread that wants that connection
/// waits for the request, as it would for the socket. Code in normal (non-handler) context that takes it must
/// block signals first (farmem_sys::signal::SignalBlock), so that no signal
/// handler on the same thread can fault into far memory and spin on it forever.
pub struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the lock serialises all access to `value`.
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: moving the lock moves the value; T: Send suffices.
unsafe impl<T: Send> Send for SpinLock<T> {}

pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> SpinLock<T> {
    pub fn new(value: T) -> SpinLock<T> {
        SpinLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    pub fn lock(&self) -> SpinGuard<'_, T> {
        let backoff = Backoff::new();
        loop {
            if !self.locked.load(Ordering::Relaxed)
                && self
                    .locked
                    .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return SpinGuard { lock: self };
            }
            backoff.snooze();
        }
    }

    /// The lock if it is free now; never waits.
    pub fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        // The guard made only on success: dropping one releases the lock.
        self.locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then(|| SpinGuard { lock: self })
    }
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while the lock is held.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard exists only while the lock is held, exclusively.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

/// A lock its holder may retire for good: for a resource that can be left
/// in a state nobody may touch again (a UCX lane whose request memory
/// operations may still write: `backend/remote/ucx/`). A retired lock stays held
/// forever, and a taker finds it retired instead of waiting on it.
///
/// `busy` is set by a taker and cleared by the guard's drop; `retired` is
/// set by the holder only, and then `busy` is never cleared.
pub struct Retirable<T> {
    busy: AtomicBool,
    retired: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: `value` is reached only through a `RetirableGuard`, and at most
// one exists at a time: a taker sets `busy` (Acquire) before making one and
// its drop clears it (Release), never once the lock is retired.
unsafe impl<T: Send> Sync for Retirable<T> {}

/// What one try to take a [`Retirable`] found.
pub enum Take<'a, T> {
    Taken(RetirableGuard<'a, T>),
    Busy,
    Retired,
}

/// A taken [`Retirable`]: given back when dropped, unless retired.
pub struct RetirableGuard<'a, T> {
    lock: &'a Retirable<T>,
}

impl<T> Retirable<T> {
    pub fn new(value: T) -> Retirable<T> {
        Retirable {
            busy: AtomicBool::new(false),
            retired: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// One try.
    pub fn try_take(&self) -> Take<'_, T> {
        if self.retired.load(Ordering::Acquire) {
            return Take::Retired;
        }
        match self
            .busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => Take::Taken(RetirableGuard { lock: self }),
            // Retired by its holder meanwhile: `busy` stays set for good.
            Err(_) if self.retired.load(Ordering::Acquire) => Take::Retired,
            Err(_) => Take::Busy,
        }
    }

    /// Take it, waiting while another thread holds it; `None` when it is
    /// or becomes retired.
    pub fn take_unless_retired(&self) -> Option<RetirableGuard<'_, T>> {
        let backoff = Backoff::new();
        loop {
            match self.try_take() {
                Take::Taken(g) => return Some(g),
                Take::Retired => return None,
                Take::Busy => backoff.snooze(),
            }
        }
    }
}

impl<T> RetirableGuard<'_, T> {
    /// Give the lock up for good: it stays held after this guard drops.
    pub fn retire(&self) {
        self.lock.retired.store(true, Ordering::Release);
    }
}

impl<T> Deref for RetirableGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while `busy` is held by it.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for RetirableGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard exists only while `busy` is held by it, alone.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for RetirableGuard<'_, T> {
    fn drop(&mut self) {
        if !self.lock.retired.load(Ordering::Relaxed) {
            self.lock.busy.store(false, Ordering::Release);
        }
    }
}

/// Fixed-capacity FIFO of page indices (the eviction order). Allocated once;
/// never grows, so it can be used in the signal handler.
pub struct Ring {
    buf: Box<[u64]>,
    head: usize,
    len: usize,
}

impl Ring {
    pub fn with_capacity(n: usize) -> Ring {
        Ring {
            buf: vec![0; n.max(1)].into_boxed_slice(),
            head: 0,
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Slot `head + i` wrapped, for `i` within the capacity: a subtraction,
    /// not a division (a 64-bit `%` costs tens of cycles, and the queues
    /// walk up to 64 entries per admission under their lock).
    fn at(&self, i: usize) -> usize {
        let j = self.head + i;
        if j >= self.buf.len() {
            j - self.buf.len()
        } else {
            j
        }
    }

    /// Append; returns false when full (a broken invariant, reported by the caller).
    pub fn push(&mut self, v: u64) -> bool {
        if self.len == self.buf.len() {
            return false;
        }
        let i = self.at(self.len);
        self.buf[i] = v;
        self.len += 1;
        true
    }

    /// Put `v` at the front (next to pop); returns false when full.
    pub fn push_front(&mut self, v: u64) -> bool {
        if self.len == self.buf.len() {
            return false;
        }
        self.head = self.at(self.buf.len() - 1);
        self.buf[self.head] = v;
        self.len += 1;
        true
    }

    /// The first `n` entries (at most all), as the two slices of the
    /// buffer they lie in, in order.
    pub fn front(&self, n: usize) -> (&[u64], &[u64]) {
        let n = n.min(self.len);
        let first = n.min(self.buf.len() - self.head);
        (
            &self.buf[self.head..self.head + first],
            &self.buf[..n - first],
        )
    }

    /// Move the first `k` entries (at most all) to the back, in order.
    pub fn rotate(&mut self, k: usize) {
        let k = k.min(self.len);
        if self.len + k <= self.buf.len() {
            // The k slots past the back are free: copy, then drop the front.
            for j in 0..k {
                let (from, to) = (self.at(j), self.at(self.len + j));
                self.buf[to] = self.buf[from];
            }
            self.head = self.at(k);
        } else {
            for _ in 0..k {
                if let Some(v) = self.pop() {
                    self.push(v);
                }
            }
        }
    }

    pub fn pop(&mut self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let v = self.buf[self.head];
        self.head = self.at(1);
        self.len -= 1;
        Some(v)
    }

    /// Call `f` on every entry, in order.
    pub fn for_each(&self, mut f: impl FnMut(u64)) {
        for r in 0..self.len {
            f(self.buf[self.at(r)]);
        }
    }

    /// Keep only the entries for which `keep` holds, in order.
    pub fn retain(&mut self, mut keep: impl FnMut(u64) -> bool) {
        let n = self.len;
        let cap = self.buf.len();
        let mut w = 0;
        for r in 0..n {
            let v = self.buf[(self.head + r) % cap];
            if keep(v) {
                self.buf[(self.head + w) % cap] = v;
                w += 1;
            }
        }
        self.len = w;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_failed_try_lock_leaves_the_holder_its_lock() {
        let l = super::SpinLock::new(0);
        let held = l.lock();
        assert!(l.try_lock().is_none());
        assert!(l.try_lock().is_none(), "the first try released the lock");
        drop(held);
        assert!(l.try_lock().is_some());
    }

    fn taken<T>(t: Take<'_, T>) -> RetirableGuard<'_, T> {
        match t {
            Take::Taken(g) => g,
            Take::Busy => panic!("busy"),
            Take::Retired => panic!("retired"),
        }
    }

    #[test]
    fn a_released_retirable_is_taken_again() {
        let l = Retirable::new(5u32);
        let g = taken(l.try_take());
        assert!(matches!(l.try_take(), Take::Busy));
        assert_eq!(*g, 5);
        drop(g);
        let mut g = taken(l.try_take());
        *g = 6;
        drop(g);
        assert_eq!(*taken(l.try_take()), 6);
    }

    #[test]
    fn a_retired_lock_is_never_taken_again() {
        let l = Retirable::new(());
        let g = taken(l.try_take());
        g.retire();
        drop(g);
        assert!(matches!(l.try_take(), Take::Retired));
        // Found retired at once: this would spin forever if it waited on
        // `busy`.
        assert!(l.take_unless_retired().is_none());
    }

    #[test]
    fn a_lock_retired_while_another_waits_releases_the_waiter() {
        let l = Retirable::new(());
        let g = taken(l.try_take());
        std::thread::scope(|sc| {
            let waiter = sc.spawn(|| l.take_unless_retired().is_some());
            std::thread::sleep(std::time::Duration::from_millis(20));
            g.retire();
            drop(g);
            assert!(!waiter.join().unwrap(), "a retired lock is never taken");
        });
        assert!(matches!(l.try_take(), Take::Retired));
    }

    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The ring behaves as a bounded VecDeque, wrapping around many
        /// times: pushes at either end, pops, rotations (with the slots past
        /// the back free or not) and retains; `front` shows its first entries.
        #[test]
        fn ring_matches_vecdeque(ops in proptest::collection::vec((0u8..5, any::<u64>()), 0..300), cap in 1usize..16) {
            let mut r = Ring::with_capacity(cap);
            let mut m = std::collections::VecDeque::new();
            for (op, v) in ops {
                match op {
                    0 if v % 2 == 0 => { let ok = r.push_front(v); prop_assert_eq!(ok, m.len() < cap); if ok { m.push_front(v); } }
                    0 | 1 => { let ok = r.push(v); prop_assert_eq!(ok, m.len() < cap); if ok { m.push_back(v); } }
                    2 => prop_assert_eq!(r.pop(), m.pop_front()),
                    3 => {
                        let k = usize::try_from(v % 20).unwrap();
                        r.rotate(k);
                        m.rotate_left(k.min(m.len()));
                    }
                    _ => { r.retain(|x| x % 3 != v % 3); m.retain(|x| x % 3 != v % 3); }
                }
                prop_assert_eq!(r.len(), m.len());
                let k = usize::try_from(v % 20).unwrap();
                let (a, b) = r.front(k);
                let front: Vec<u64> = a.iter().chain(b).copied().collect();
                prop_assert_eq!(front, m.iter().take(k).copied().collect::<Vec<_>>());
            }
            let rest: Vec<u64> = std::iter::from_fn(|| r.pop()).collect();
            prop_assert_eq!(rest, m.into_iter().collect::<Vec<_>>());
        }
    }
}
