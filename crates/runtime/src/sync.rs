//! A spin lock usable inside the SIGBUS handler, and the fixed-capacity ring
//! that the replacement queues are made of.

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
        let mut spins = 0u32;
        loop {
            if !self.locked.load(Ordering::Relaxed)
                && self
                    .locked
                    .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return SpinGuard { lock: self };
            }
            spins += 1;
            if spins.is_multiple_of(64) {
                // The holder may have been preempted on this CPU.
                farmem_sys::sched_yield();
            } else {
                farmem_sys::cpu_relax();
            }
        }
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

    /// Append; returns false when full (a broken invariant, reported by the caller).
    pub fn push(&mut self, v: u64) -> bool {
        if self.len == self.buf.len() {
            return false;
        }
        let i = (self.head + self.len) % self.buf.len();
        self.buf[i] = v;
        self.len += 1;
        true
    }

    /// Put `v` at the front (next to pop); returns false when full.
    pub fn push_front(&mut self, v: u64) -> bool {
        if self.len == self.buf.len() {
            return false;
        }
        self.head = (self.head + self.buf.len() - 1) % self.buf.len();
        self.buf[self.head] = v;
        self.len += 1;
        true
    }

    pub fn pop(&mut self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let v = self.buf[self.head];
        self.head = (self.head + 1) % self.buf.len();
        self.len -= 1;
        Some(v)
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
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The ring behaves as a bounded VecDeque.
        #[test]
        fn ring_matches_vecdeque(ops in proptest::collection::vec((0u8..4, any::<u64>()), 0..300), cap in 1usize..16) {
            let mut r = Ring::with_capacity(cap);
            let mut m = std::collections::VecDeque::new();
            for (op, v) in ops {
                match op {
                    0 if v % 2 == 0 => { let ok = r.push_front(v); prop_assert_eq!(ok, m.len() < cap); if ok { m.push_front(v); } }
                    0 | 1 => { let ok = r.push(v); prop_assert_eq!(ok, m.len() < cap); if ok { m.push_back(v); } }
                    2 => prop_assert_eq!(r.pop(), m.pop_front()),
                    _ => { r.retain(|x| x % 3 != v % 3); m.retain(|x| x % 3 != v % 3); }
                }
                prop_assert_eq!(r.len(), m.len());
            }
            let rest: Vec<u64> = std::iter::from_fn(|| r.pop()).collect();
            prop_assert_eq!(rest, m.into_iter().collect::<Vec<_>>());
        }
    }
}
