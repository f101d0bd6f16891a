//! Installing fetched pages: the one sequence that demand windows
//! (`Runtime::fetch`) and pipelined windows (`Runtime::finish_async`,
//! `Runtime::unpark`) both end in. Check each received page against its
//! checksum, map the pages in runs (`UFFDIO_COPY`, or `UFFDIO_MOVE` of
//! recycled pages for a writable run: `crate::recycle`), mark them
//! resident, and hand them to the replacement queues.

use crate::cost::Phase;
use crate::page::{self, Event, PageWord};
use crate::replacement::{fetched_as, page_u32, Aux as _, Fetched, Queues};
use crate::{runs, Runtime};
use farmem_sys::msg::MsgBuf;
use farmem_sys::uffd::CopyOutcome;
use farmem_sys::PAGE_SIZE;
use std::fmt::Write as _;

/// The source of a page installed zero-filled (never written back).
pub(crate) const ZERO: usize = usize::MAX;

impl Runtime {
    /// Install `pages` (owned by the caller: Fetching), page `i` from page
    /// `src[i]` of `buf` (a slot's buffer of received pages), or zero-filled
    /// where `src[i]` is [`ZERO`]: writable and dirty if `dirty`, otherwise
    /// write-protected (clean). Afterwards they are resident and in the
    /// replacement queues. A received page whose checksum differs is read
    /// again or stops the program before anything is mapped
    /// ([`Runtime::verify_sum`]). `stream`: they were fetched for a stream
    /// (its window, or pipelined ahead of it), which the replacement
    /// queues weigh when one page comes alone ([`Fetched::AloneInStream`]).
    pub(crate) fn install(
        &self,
        pages: &[usize],
        src: &[usize],
        buf: *mut u8,
        dirty: bool,
        stream: bool,
    ) {
        let page_of = |j: usize| buf.wrapping_add(j * PAGE_SIZE);
        let timed = self.span();
        for (&q, &j) in pages.iter().zip(src) {
            if j != ZERO {
                // SAFETY: the caller's slot holds received page j; the
                // caller owns the slot, so nothing else reads or writes it.
                let data = unsafe { std::slice::from_raw_parts_mut(page_of(j), PAGE_SIZE) };
                self.verify_sum(q, data);
            }
        }
        self.charge(timed, Phase::Verify);
        let timed = self.span();
        // A run: consecutive pages whose sources are all the zero page or
        // consecutive pages of the buffer. One UFFDIO_COPY each.
        let zero = |k: usize| src[k] == ZERO;
        let same_run = |j: usize| {
            pages[j] == pages[j - 1] + 1
                && zero(j) == zero(j - 1)
                && (zero(j) || src[j] == src[j - 1] + 1)
        };
        for run in runs(pages.len(), same_run) {
            let i = run.start;
            // A writable run may take recycled pages (see `crate::recycle`).
            let done = if dirty {
                let from = (!zero(i)).then(|| page_of(src[i]).cast_const());
                self.install_recycled(pages[i], run.len(), from)
            } else {
                0
            };
            if done == run.len() {
                continue;
            }
            let from = if zero(i) {
                self.arena.zero()
            } else {
                page_of(src[i] + done).cast_const()
            };
            // SAFETY: `from` is the caller's slot buffer or the zero mapping
            // (MAX_BATCH pages, at least the run), readable for the run's
            // pages past `done`; the destination pages are in the registered
            // arena and owned by the caller (Fetching).
            let res = unsafe {
                self.arena.uffd().copy(
                    self.addr_of(pages[i] + done),
                    from,
                    (run.len() - done) * PAGE_SIZE,
                    !dirty,
                )
            };
            if !matches!(res, Ok(CopyOutcome::Done)) {
                let mut m = MsgBuf::new();
                let _ = writeln!(
                    m,
                    "farmem: cannot install far page {:#x}: {:?}",
                    self.addr_of(pages[i] + done),
                    res
                );
                farmem_sys::fatal(m.as_bytes());
            }
        }
        self.charge(timed, Phase::Install);
        let timed = self.span();
        for &q in pages {
            self.arena.table().must(q, Event::Installed { dirty });
        }
        // Every page that comes back tells its refault distance, prefetched
        // or not (a loop is prefetched as a stream); SEQUENTIAL pages are not
        // to be kept.
        let fetched = match (pages.first(), pages.last()) {
            (Some(&a), Some(&b)) => fetched_as(a as u64, b as u64, pages.len(), stream),
            _ => Fetched::Alone,
        };
        let mut queues = self.budget.queues();
        for &q in pages {
            let w = self.arena.table().load(q);
            let refault =
                (!w.has(page::ADV_SEQUENTIAL)).then(|| self.arena.table().aux(page_u32(q)));
            self.admit(&mut queues, q, w, refault, fetched);
        }
        drop(queues);
        self.charge(timed, Phase::Admit);
    }

    /// Admit installed page `q` (word `w`, loaded after its install) to
    /// `queues`, whose lock the caller holds. A page evicted out of its turn
    /// still has its old entry (STALE): that entry serves it again, so that
    /// no page is ever in the queues twice.
    pub(crate) fn admit(
        &self,
        queues: &mut Queues,
        q: usize,
        w: PageWord,
        refault: Option<u32>,
        fetched: Fetched,
    ) {
        if w.has(page::STALE) && self.arena.table().clear_stale(q) {
            self.budget.unstale(1);
            self.observe.stats().block_back_soon.add(1);
            return;
        }
        if !queues.admit(page_u32(q), refault, fetched) {
            farmem_sys::fatal(b"farmem: internal error: replacement queues overflow\n");
        }
    }
}
