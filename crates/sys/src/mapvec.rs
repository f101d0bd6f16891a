//! A vector that lives in an anonymous mapping of its own: for code that
//! must not allocate (signal handlers, and what they call), where `Vec`
//! would call `malloc`, which a handler may have interrupted while it held
//! its lock. `mmap`, `mremap` and `munmap` are plain system calls.

use crate::{cvt_long, PAGE_SIZE};
use std::io;
use std::marker::PhantomData;
use std::ptr::NonNull;

/// A growable array of `T` in memory mapped for it. It grows with
/// `mremap(MREMAP_MAYMOVE)`, which moves the elements bitwise, as Rust
/// moves any value. No mapping exists until the first element.
pub struct MapVec<T> {
    ptr: NonNull<T>,
    /// Mapped bytes (0: nothing mapped).
    bytes: usize,
    len: usize,
    _owns: PhantomData<T>,
}

// SAFETY: a MapVec owns its elements as a Vec does.
unsafe impl<T: Send> Send for MapVec<T> {}
// SAFETY: shared access only reads elements, as for a Vec.
unsafe impl<T: Sync> Sync for MapVec<T> {}

impl<T> MapVec<T> {
    /// An empty vector; maps nothing.
    pub const fn new() -> MapVec<T> {
        MapVec {
            ptr: NonNull::dangling(),
            bytes: 0,
            len: 0,
            _owns: PhantomData,
        }
    }

    /// A vector with room for `n` elements mapped at once.
    pub fn with_capacity(n: usize) -> io::Result<MapVec<T>> {
        let mut v = MapVec::new();
        v.reserve(n)?;
        Ok(v)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many elements fit without growing.
    pub fn capacity(&self) -> usize {
        self.bytes.checked_div(size_of::<T>()).unwrap_or(usize::MAX)
    }

    /// Room for `more` elements past the current ones.
    pub fn reserve(&mut self, more: usize) -> io::Result<()> {
        let want = self.len.checked_add(more).ok_or_else(too_long)?;
        if want <= self.capacity() {
            return Ok(());
        }
        let at_least = want.checked_mul(size_of::<T>()).ok_or_else(too_long)?;
        let bytes = at_least
            .max(self.bytes.saturating_mul(2))
            .next_multiple_of(PAGE_SIZE);
        let p = if self.bytes == 0 {
            // SAFETY: a fresh private anonymous mapping touches no existing
            // memory.
            cvt_long(unsafe {
                crate::raw_syscall!(
                    libc::SYS_mmap,
                    0usize,
                    bytes,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1i64,
                    0usize
                )
            })?
        } else {
            // SAFETY: ptr/bytes are this vector's own mapping; the kernel
            // moves it whole, and nothing borrows it across `&mut self`.
            cvt_long(unsafe {
                crate::raw_syscall!(
                    libc::SYS_mremap,
                    self.ptr.as_ptr(),
                    self.bytes,
                    bytes,
                    libc::MREMAP_MAYMOVE
                )
            })?
        };
        self.ptr = NonNull::new(p as *mut T).ok_or_else(|| io::Error::other("mmap gave NULL"))?;
        self.bytes = bytes;
        Ok(())
    }

    /// Append `v`, growing the mapping when full; an error (no memory for
    /// the mapping) hands `v` back.
    pub fn push(&mut self, v: T) -> Result<(), (T, io::Error)> {
        if let Err(e) = self.reserve(1) {
            return Err((v, e));
        }
        // SAFETY: reserve made room for slot `len`, past the live elements;
        // the mapping is page-aligned, so aligned for any T up to a page.
        unsafe { self.ptr.as_ptr().add(self.len).write(v) };
        self.len += 1;
        Ok(())
    }

    /// Remove element `i`, putting the last one in its place.
    pub fn swap_remove(&mut self, i: usize) -> T {
        assert!(i < self.len, "swap_remove index {i} past {}", self.len);
        let base = self.ptr.as_ptr();
        // SAFETY: i and len-1 are live slots; the value read from `i` is
        // owned by the caller from here on and the last slot is no longer
        // counted, so each element is moved, never duplicated.
        unsafe {
            let v = base.add(i).read();
            self.len -= 1;
            if i != self.len {
                base.add(i).write(base.add(self.len).read());
            }
            v
        }
    }

    /// Keep the elements for which `keep` holds (order not kept).
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        let mut i = 0;
        while i < self.len {
            if keep(&self.as_slice()[i]) {
                i += 1;
            } else {
                drop(self.swap_remove(i));
            }
        }
    }

    pub fn as_slice(&self) -> &[T] {
        // SAFETY: the first `len` slots are initialized; a dangling but
        // aligned pointer is valid for an empty slice.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Default for MapVec<T> {
    fn default() -> MapVec<T> {
        MapVec::new()
    }
}

impl<T> Drop for MapVec<T> {
    fn drop(&mut self) {
        // SAFETY: the first `len` slots are initialized and dropped once,
        // here, before the mapping goes.
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                self.ptr.as_ptr(),
                self.len,
            ))
        };
        if self.bytes != 0 {
            // SAFETY: ptr/bytes are exactly the mapping this owns.
            unsafe { crate::mem::unmap(self.ptr.as_ptr() as usize, self.bytes) };
        }
    }
}

fn too_long() -> io::Error {
    io::Error::new(io::ErrorKind::OutOfMemory, "MapVec length overflows")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn it_grows_keeps_order_and_drops_each_element_once() {
        let token = Rc::new(());
        let mut v = MapVec::new();
        assert_eq!(v.capacity(), 0);
        for i in 0..3000usize {
            v.push((i, token.clone()))
                .unwrap_or_else(|_| panic!("push"));
        }
        assert!(v.capacity() >= 3000);
        assert!(v.as_slice().iter().enumerate().all(|(i, x)| x.0 == i));
        assert_eq!(Rc::strong_count(&token), 3001);
        let (x, _) = v.swap_remove(0);
        assert_eq!(x, 0);
        assert_eq!(v.as_slice()[0].0, 2999);
        v.retain(|x| x.0 % 2 == 0);
        assert_eq!(v.len(), 1499);
        assert!(v.as_slice().iter().all(|x| x.0 % 2 == 0));
        assert_eq!(Rc::strong_count(&token), 1500);
        drop(v);
        assert_eq!(Rc::strong_count(&token), 1);
    }

    #[test]
    fn with_capacity_maps_once() {
        let v = MapVec::<[u8; 24]>::with_capacity(100).unwrap();
        assert!(v.capacity() >= 100);
        assert!(v.is_empty());
    }
}
