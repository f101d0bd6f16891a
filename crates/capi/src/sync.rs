//! Mutexes, condition variables, read-write locks, semaphores and barriers
//! that live in far memory.
//!
//! Their futex words are read by the kernel (`FUTEX_WAIT` compares the word,
//! PI operations write it). In SIGBUS mode a non-resident word would make
//! the call fail with EFAULT, which glibc treats as fatal, and a word
//! evicted while a thread sleeps on it would be fetched back stale. So while
//! a thread *waits* in one of these calls on a far object, the object's
//! pages stay pinned: never evicted, never non-resident.
//!
//! Only the waiting calls are wrapped. Unlock, signal, broadcast and post
//! reach the kernel only to wake a waiter (`FUTEX_WAKE` on a private futex
//! reads no user memory), and a waiter holds the object's pages pinned for
//! as long as it waits, so the page a waker touches is resident. Locks try
//! the non-blocking form first: taken in user mode (where a far fault is an
//! ordinary one), they need no pin; only a call that may sleep pins. An
//! object in ordinary memory costs one range check.

use crate::forward::real;
use farmem_runtime as rt;
use libc::{
    c_int, c_void, clockid_t, pthread_cond_t, pthread_mutex_t, pthread_rwlock_t, sem_t, timespec,
};

/// Whether any of `objs` lies in far memory.
#[inline]
fn any_far(objs: &[(*const c_void, usize)]) -> Option<&'static rt::Runtime> {
    let r = rt::get()?;
    objs.iter()
        .any(|&(p, n)| r.overlaps(p as usize, n))
        .then_some(r)
}

/// `name(args) -> ret [pinned objects] try(fast path)`: the fast path (a
/// non-blocking attempt returning `Some(result)` when it settled the call)
/// runs first for far objects; otherwise the call runs with the objects
/// pinned.
macro_rules! sync_wrap {
    ($( $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty [ $($obj:ident : $oty:ty),* ]
        $(try $fast:expr)? ; )*) => { $(
        #[doc = concat!("`", stringify!($name), "`, with its far object pinned while it waits.")]
        ///
        /// # Safety
        /// As the C library function of this name.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            type F = unsafe extern "C" fn($($ty),*) -> $ret;
            let f = crate::forward::real!(crate::forward::c_name!($name), F);
            let objs = [$(($obj as *const c_void, std::mem::size_of::<$oty>())),*];
            let Some(r) = any_far(&objs) else {
                // SAFETY: forwarded unchanged.
                return unsafe { f($($arg),*) };
            };
            $(
                // SAFETY: the non-blocking form of the same call, on the
                // caller's object.
                if let Some(done) = unsafe { $fast } {
                    return done;
                }
            )?
            let pins: [Option<rt::IoPin>; 2] = std::array::from_fn(|i| {
                objs.get(i).and_then(|&(p, n)| r.pin_for_io(p as usize, n, true))
            });
            // SAFETY: forwarded unchanged, the objects pinned.
            let ret = unsafe { f($($arg),*) };
            drop(pins);
            ret
        }
    )* };
}

type TryFn<T> = unsafe extern "C" fn(*mut T) -> c_int;

/// The non-blocking form `f` on `obj`: `Some(result)` unless it returned
/// `busy` (then the blocking call must run).
///
/// # Safety
/// `obj` is a valid object for `f`.
unsafe fn attempt<T>(f: TryFn<T>, obj: *mut T, busy: c_int) -> Option<c_int> {
    // SAFETY: per the contract.
    let r = unsafe { f(obj) };
    (r != busy).then_some(r)
}

/// `sem_trywait` reports "would block" as -1 with errno EAGAIN.
///
/// # Safety
/// `s` is a valid semaphore.
unsafe fn sem_attempt(s: *mut sem_t) -> Option<c_int> {
    // SAFETY: per the contract.
    let r = unsafe { attempt(real!(c"sem_trywait", TryFn<sem_t>), s, c_int::MIN) }?;
    // SAFETY: errno is thread-local.
    let again = r == -1 && unsafe { *libc::__errno_location() } == libc::EAGAIN;
    (!again).then_some(r)
}

sync_wrap! {
    pthread_mutex_lock(m: *mut pthread_mutex_t) -> c_int [m: pthread_mutex_t]
        try attempt(real!(c"pthread_mutex_trylock", TryFn<pthread_mutex_t>), m, libc::EBUSY);
    pthread_mutex_timedlock(m: *mut pthread_mutex_t, t: *const timespec) -> c_int
        [m: pthread_mutex_t] try attempt(real!(c"pthread_mutex_trylock", TryFn<pthread_mutex_t>), m, libc::EBUSY);
    pthread_mutex_clocklock(m: *mut pthread_mutex_t, c: clockid_t, t: *const timespec) -> c_int
        [m: pthread_mutex_t] try attempt(real!(c"pthread_mutex_trylock", TryFn<pthread_mutex_t>), m, libc::EBUSY);
    pthread_cond_wait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t) -> c_int
        [c: pthread_cond_t, m: pthread_mutex_t];
    pthread_cond_timedwait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, t: *const timespec)
        -> c_int [c: pthread_cond_t, m: pthread_mutex_t];
    pthread_cond_clockwait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, k: clockid_t,
        t: *const timespec) -> c_int [c: pthread_cond_t, m: pthread_mutex_t];
    pthread_rwlock_rdlock(l: *mut pthread_rwlock_t) -> c_int [l: pthread_rwlock_t]
        try attempt(real!(c"pthread_rwlock_tryrdlock", TryFn<pthread_rwlock_t>), l, libc::EBUSY);
    pthread_rwlock_wrlock(l: *mut pthread_rwlock_t) -> c_int [l: pthread_rwlock_t]
        try attempt(real!(c"pthread_rwlock_trywrlock", TryFn<pthread_rwlock_t>), l, libc::EBUSY);
    pthread_rwlock_timedrdlock(l: *mut pthread_rwlock_t, t: *const timespec) -> c_int
        [l: pthread_rwlock_t] try attempt(real!(c"pthread_rwlock_tryrdlock", TryFn<pthread_rwlock_t>), l, libc::EBUSY);
    pthread_rwlock_timedwrlock(l: *mut pthread_rwlock_t, t: *const timespec) -> c_int
        [l: pthread_rwlock_t] try attempt(real!(c"pthread_rwlock_trywrlock", TryFn<pthread_rwlock_t>), l, libc::EBUSY);
    sem_wait(s: *mut sem_t) -> c_int [s: sem_t] try sem_attempt(s);
    sem_timedwait(s: *mut sem_t, t: *const timespec) -> c_int [s: sem_t] try sem_attempt(s);
    sem_clockwait(s: *mut sem_t, c: clockid_t, t: *const timespec) -> c_int [s: sem_t]
        try sem_attempt(s);
    pthread_barrier_wait(b: *mut libc::pthread_barrier_t) -> c_int [b: libc::pthread_barrier_t];
}
