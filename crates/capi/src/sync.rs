//! Mutexes, condition variables, read-write locks, semaphores and barriers
//! that live in far memory.
//!
//! Their futex words are read by the kernel (`FUTEX_WAIT` compares the word,
//! PI operations write it). In SIGBUS mode a non-resident word would make
//! the call fail with EFAULT, which glibc treats as fatal, and a word
//! evicted while a thread sleeps on it would be fetched back stale. So while
//! a thread is inside one of these calls on a far object, the object's pages
//! stay pinned: never evicted, never non-resident. Objects in ordinary memory
//! cost one range check.

use crate::io::next_fn;
use farmem_runtime as rt;
use libc::{
    c_int, c_void, clockid_t, pthread_cond_t, pthread_mutex_t, pthread_rwlock_t, sem_t, timespec,
};
use std::sync::atomic::AtomicUsize;

/// Run `call` with `[obj, obj+size)` (and a second object) pinned if far.
#[inline]
fn with_pinned<R>(objs: &[(*const c_void, usize)], call: impl FnOnce() -> R) -> R {
    let Some(r) = rt::get() else {
        return call();
    };
    let mut pins: [Option<rt::IoPin>; 2] = [None, None];
    for (slot, &(p, n)) in pins.iter_mut().zip(objs) {
        if r.overlaps(p as usize, n) {
            *slot = r.pin_for_io(p as usize, n, true);
        }
    }
    let ret = call();
    drop(pins);
    ret
}

/// `name(args) -> ret [pinned objects as (arg, type)]`.
macro_rules! sync_wrap {
    ($( $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty [ $($obj:ident : $oty:ty),* ] ; )*) => { $(
        #[doc = concat!("`", stringify!($name), "`, with its far object pinned.")]
        ///
        /// # Safety
        /// As the C library function of this name.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            type F = unsafe extern "C" fn($($ty),*) -> $ret;
            static SLOT: AtomicUsize = AtomicUsize::new(0);
            const NAME: &std::ffi::CStr =
                match std::ffi::CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                    Ok(c) => c,
                    Err(_) => panic!("bad symbol name"),
                };
            // SAFETY: the next definition of this symbol has prototype F.
            let f = unsafe { std::mem::transmute::<usize, F>(next_fn(&SLOT, NAME)) };
            with_pinned(
                &[$(($obj as *const c_void, std::mem::size_of::<$oty>())),*],
                // SAFETY: forwarded unchanged.
                || unsafe { f($($arg),*) },
            )
        }
    )* };
}

sync_wrap! {
    pthread_mutex_lock(m: *mut pthread_mutex_t) -> c_int [m: pthread_mutex_t];
    pthread_mutex_trylock(m: *mut pthread_mutex_t) -> c_int [m: pthread_mutex_t];
    pthread_mutex_timedlock(m: *mut pthread_mutex_t, t: *const timespec) -> c_int
        [m: pthread_mutex_t];
    pthread_mutex_clocklock(m: *mut pthread_mutex_t, c: clockid_t, t: *const timespec) -> c_int
        [m: pthread_mutex_t];
    pthread_mutex_unlock(m: *mut pthread_mutex_t) -> c_int [m: pthread_mutex_t];
    pthread_cond_wait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t) -> c_int
        [c: pthread_cond_t, m: pthread_mutex_t];
    pthread_cond_timedwait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, t: *const timespec)
        -> c_int [c: pthread_cond_t, m: pthread_mutex_t];
    pthread_cond_clockwait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, k: clockid_t,
        t: *const timespec) -> c_int [c: pthread_cond_t, m: pthread_mutex_t];
    pthread_cond_signal(c: *mut pthread_cond_t) -> c_int [c: pthread_cond_t];
    pthread_cond_broadcast(c: *mut pthread_cond_t) -> c_int [c: pthread_cond_t];
    pthread_rwlock_rdlock(l: *mut pthread_rwlock_t) -> c_int [l: pthread_rwlock_t];
    pthread_rwlock_wrlock(l: *mut pthread_rwlock_t) -> c_int [l: pthread_rwlock_t];
    pthread_rwlock_timedrdlock(l: *mut pthread_rwlock_t, t: *const timespec) -> c_int
        [l: pthread_rwlock_t];
    pthread_rwlock_timedwrlock(l: *mut pthread_rwlock_t, t: *const timespec) -> c_int
        [l: pthread_rwlock_t];
    pthread_rwlock_unlock(l: *mut pthread_rwlock_t) -> c_int [l: pthread_rwlock_t];
    sem_wait(s: *mut sem_t) -> c_int [s: sem_t];
    sem_timedwait(s: *mut sem_t, t: *const timespec) -> c_int [s: sem_t];
    sem_clockwait(s: *mut sem_t, c: clockid_t, t: *const timespec) -> c_int [s: sem_t];
    sem_post(s: *mut sem_t) -> c_int [s: sem_t];
    pthread_barrier_wait(b: *mut libc::pthread_barrier_t) -> c_int [b: libc::pthread_barrier_t];
}
