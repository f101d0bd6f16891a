//! Pins and advice: `fm_advise`, and the pins that keep a system call's far
//! buffer resident while the kernel uses it.

use crate::fork::is_forked_child;
use crate::page::{self, Event, State};
use crate::sync::Backoff;
use crate::{config, Advice, Runtime, RuntimeError};
use farmem_sys::PAGE_SIZE;
use std::sync::atomic::Ordering;

/// Pinned pages for a system call on a far buffer; unpinned on drop.
pub struct IoPin {
    rt: &'static Runtime,
    first: usize,
    last: usize,
}

impl Drop for IoPin {
    fn drop(&mut self) {
        for p in self.first..=self.last {
            self.rt.unpin(p);
        }
        self.rt.budget.unpin(self.last - self.first + 1);
    }
}

impl Runtime {
    pub(crate) fn unpin(&self, p: usize) {
        let _ = self.arena.table().transition(p, Event::Unpin);
    }

    /// `fm_advise`.
    pub fn advise(&self, addr: usize, len: usize, advice: Advice) -> Result<(), RuntimeError> {
        self.check_not_forked()?;
        let (first, last) = self.range_of(addr, len)?;
        let set_bits = |set: u32, clear: u32| {
            for p in first..=last {
                let _ = self.arena.table().word(p).fetch_update(
                    Ordering::AcqRel,
                    Ordering::Acquire,
                    |w| Some((w & !clear) | set),
                );
            }
        };
        match advice {
            Advice::Normal => set_bits(0, page::ADVICE_MASK),
            Advice::Sequential => set_bits(page::ADV_SEQUENTIAL, page::ADV_RANDOM),
            Advice::Random => set_bits(page::ADV_RANDOM, page::ADV_SEQUENTIAL),
            Advice::ReadMostly => set_bits(page::ADV_READ_MOSTLY, 0),
            Advice::WillNeed => {
                // Bring in at most half the budget; the rest would only evict it.
                let n = (last - first + 1).min(self.budget.pages() / 2);
                for p in first..first + n {
                    let w = self.arena.table().load(p);
                    if w.state() == State::Absent && !w.has(page::HIDDEN) {
                        // SAFETY: p is an allocated far page; a read fault
                        // brings it in (with a prefetch window).
                        unsafe { std::ptr::read_volatile(self.addr_of(p) as *const u8) };
                    }
                }
            }
            Advice::DontNeed => self.evict_range(first, last),
            Advice::Pin => {
                let n = last - first + 1;
                if !self.budget.pin_within_limit(n) {
                    return Err(RuntimeError::PinBudget {
                        want: config::format_size((n * PAGE_SIZE) as u64),
                        budget: config::format_size(self.budget_bytes()),
                    });
                }
                for p in first..=last {
                    let backoff = Backoff::new();
                    while self.arena.table().transition(p, Event::Pin).is_err() {
                        backoff.snooze();
                    }
                    self.touch_pinned(p, self.addr_of(p), false);
                }
            }
            Advice::Unpin => {
                if (first..=last).any(|p| self.arena.table().load(p).pins() == 0) {
                    return Err(RuntimeError::NotPinned);
                }
                for p in first..=last {
                    self.unpin(p);
                }
                self.budget.unpin(last - first + 1);
            }
        }
        Ok(())
    }

    /// Make `[addr, addr+len)` safe for a system call: pin its far pages and
    /// fault them in from user mode (for `for_write`, as writes, so they are
    /// writable and marked dirty). In SIGBUS mode the kernel cannot fault far
    /// pages in for a system call; it would fail with EFAULT.
    ///
    /// Returns `None` when the range holds no far memory. The caller keeps
    /// the range under a quarter of the budget (`io_chunk`).
    pub fn pin_for_io(&'static self, addr: usize, len: usize, for_write: bool) -> Option<IoPin> {
        if len == 0 {
            return None;
        }
        let end = addr.checked_add(len)?;
        let lo = addr.max(self.arena.base());
        let hi = end.min(self.arena.base() + self.arena.len());
        if lo >= hi {
            return None;
        }
        if is_forked_child() {
            farmem_sys::fatal(b"farmem: a fork() child passed far memory to a system call; far memory stays with the parent\n");
        }
        let first = (lo - self.arena.base()) / PAGE_SIZE;
        let last = (hi - 1 - self.arena.base()) / PAGE_SIZE;
        let want = last - first + 1;
        self.wait_for_pins(want);
        let mut pinned_to = first;
        let backoff = Backoff::new();
        for p in first..=last {
            // A page another thread owns for the moment (being evicted or
            // fetched) refuses the pin; wait for it to settle. Only an
            // unallocated page (or one the program made inaccessible) ends
            // the range: the kernel reports EFAULT for it itself, as for
            // any unmapped address.
            // Hazard: giving up on a busy page instead would let the call
            // run on a page that is mid-eviction, and the kernel would see
            // it missing (a silent EFAULT, seen under a thread that evicted
            // while another called writev).
            let mut pinned = false;
            while !pinned {
                pinned = self.arena.table().transition(p, Event::Pin).is_ok();
                if !pinned {
                    let w = self.arena.table().load(p);
                    if !w.has(crate::page::ALLOCATED) || w.has(crate::page::HIDDEN) {
                        break;
                    }
                    // Touching it runs the fault path, which completes a
                    // pipelined fetch in flight or waits out an eviction.
                    // SAFETY: p is an allocated far page.
                    unsafe { std::ptr::read_volatile(self.addr_of(p) as *const u8) };
                    backoff.snooze();
                }
            }
            if !pinned {
                break;
            }
            pinned_to = p + 1;
        }
        for p in first..pinned_to {
            self.touch_pinned(p, self.addr_of(p).max(lo), for_write);
        }
        self.observe.stats().io_pins.add(1);
        self.budget.unpin(want - (pinned_to - first));
        if pinned_to == first {
            return None;
        }
        Some(IoPin {
            rt: self,
            first,
            last: pinned_to - 1,
        })
    }

    /// Bring pinned page `p` in through `a` (an address in it), and make it
    /// writable and dirty for `for_write`: touch until the page is resident.
    ///
    /// Hazard: a pin does not stop an eviction that already started (the
    /// evictor owns the page in Evicting while it is still mapped). A touch
    /// then succeeds without a fault, and the unmap that follows would leave
    /// the kernel a missing page:
    ///   evictor: EvictStart (pins 0)     caller: Pin (pins 1), touch ok
    ///   evictor: MADV_DONTNEED / MOVE    caller: readv -> EFAULT
    /// So wait out the eviction, and touch again: the pin keeps the page from
    /// being chosen again once it is back.
    fn touch_pinned(&self, p: usize, a: usize, for_write: bool) {
        let backoff = Backoff::new();
        loop {
            if for_write {
                // SAFETY: `a` is inside an allocated far page. `lock or 0` is
                // an atomic write that leaves the byte's value unchanged (also
                // against concurrent writers), forcing a write fault.
                unsafe {
                    core::arch::asm!("lock or byte ptr [{0}], 0", in(reg) a, options(nostack))
                };
            } else {
                // SAFETY: `a` is inside an allocated far page.
                unsafe { std::ptr::read_volatile(a as *const u8) };
            }
            let st = self.arena.table().load(p).state();
            if st == State::Dirty || (!for_write && st == State::Clean) {
                return;
            }
            backoff.snooze();
        }
    }

    /// Count `n` pages against the pin limit (3/4 of the budget, shared with
    /// `FM_ADV_PIN`), waiting while concurrent system calls hold too many:
    /// pins beyond the limit would leave `make_room` nothing to evict.
    fn wait_for_pins(&self, n: usize) {
        let start = farmem_sys::now_ns();
        let backoff = Backoff::new();
        loop {
            if self.budget.try_pin(n) {
                return;
            }
            self.observe.stats().pin_waits.add(1);
            backoff.snooze();
            if farmem_sys::now_ns() - start > self.cfg.timeout_ms * 1_000_000 {
                farmem_sys::fatal(
                    b"farmem: system calls on far buffers keep 3/4 of the local budget pinned; raise FARMEM_LOCAL\n",
                );
            }
        }
    }

    /// Most bytes all system calls together may hold pinned (3/4 of the budget).
    pub fn pin_limit_bytes(&self) -> usize {
        self.budget.pin_limit() * PAGE_SIZE
    }

    /// Largest buffer one system call may pin at once.
    pub fn io_chunk(&self) -> usize {
        // A quarter of the whole local budget (the hold included), within
        // the pin limit's 3/4 of the resident part.
        ((self.budget.pages() + self.budget.hold().slots()) * PAGE_SIZE / 4)
            .clamp(PAGE_SIZE, 64 << 20)
    }
}
