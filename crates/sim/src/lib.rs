//! The policy simulator: replays a page reference string under Belady's MIN,
//! under LRU seeing every hit, and under farmem's own policy (the [`readahead`](farmem_runtime::readahead)
//! planner and the [`replacement`](farmem_runtime::replacement) queues, the same code
//! the fault path runs) at the same budget, so that "pages fetched against the
//! least any policy must fetch" exists for any program.
//!
//! MIN with demand fetching is the lower bound on pages fetched at a budget
//! of B pages by any policy, prefetching included (prefetching can move a
//! fetch earlier, never save one). Write-backs are not bounded here.
//!
//! What the replay leaves out: timing. A pipelined window (requested ahead
//! of a forward stream) arrives at once, and its first page waits, as in the
//! runtime, until the program reaches it; eviction takes batches of
//! `FARMEM_EVICT_BATCH` pages as the runtime does. Pinned pages and advice
//! do not occur in a reference string. Pages the program gives back (freed,
//! unmapped) are dead from then on, for MIN, LRU and the replay alike.

use farmem_runtime::readahead::{Hint, Planner, Walk};
use farmem_runtime::replacement::{fetched_as, keeps_dirty, Aux, Fetched, Queues, Take};
use farmem_runtime::trace::{self, Kind, Why};
use std::cell::RefCell;
use std::collections::{BinaryHeap, HashMap, HashSet};

/// A reference string: dense page ids (in first-reference order), whether
/// each reference wrote, and the number of ids. A page the program gave back
/// (freed) and used again gets a new id: its old content is dead, and keeping
/// it helps no policy. So `distinct` counts a page freed and used again twice.
#[derive(Debug, Clone, Default)]
pub struct Refs {
    pub pages: Vec<u32>,
    pub writes: Vec<bool>,
    /// Where in its page each reference was, in cells (0 where the trace
    /// does not say: see [`trace::cell`]).
    pub cells: Vec<u8>,
    pub distinct: usize,
    /// Dense id -> page number in the arena (for the planner's strides).
    pub page_of: Vec<u64>,
    /// Ids given back, in order: (i, id) releases `id` before reference
    /// `pages[i]` (what MIN and LRU need).
    pub released: Vec<(usize, u32)>,
    /// The ranges given back, in order: (i, first page, pages) before
    /// reference `pages[i]`, whether or not the string referenced them (the
    /// replay may hold pages of the range it prefetched).
    pub freed: Vec<(usize, u64, u64)>,
}

impl Refs {
    /// The references of a trace (faults, write hits and waits for
    /// prefetched pages), in order, and the pages given back between them.
    pub fn from_records(records: &[u64]) -> Refs {
        let mut ids: HashMap<u64, u32> = HashMap::new();
        let mut r = Refs::default();
        for &rec in records {
            let Some((kind, page, detail)) = trace::decode(rec) else {
                continue;
            };
            if kind == Kind::Released {
                r.freed.push((r.pages.len(), page, u64::from(detail) + 1));
                for q in page..page + u64::from(detail) + 1 {
                    if let Some(id) = ids.remove(&q) {
                        r.released.push((r.pages.len(), id));
                    }
                }
                continue;
            }
            if !kind.is_reference() {
                continue;
            }
            let next = u32::try_from(r.page_of.len()).unwrap_or(u32::MAX);
            let id = *ids.entry(page).or_insert_with(|| {
                r.page_of.push(page);
                next
            });
            r.pages.push(id);
            r.writes
                .push(matches!(kind, Kind::FaultWrite | Kind::WriteHit));
            r.cells.push(trace::cell(rec));
        }
        r.distinct = r.page_of.len();
        r
    }

    /// A reference string of arena pages (for synthetic traces).
    pub fn from_pages(pages: &[u64], writes: bool) -> Refs {
        let recs: Vec<u64> = pages
            .iter()
            .map(|&p| {
                let k = if writes {
                    Kind::FaultWrite
                } else {
                    Kind::FaultRead
                };
                trace::encode(k, p, 0)
            })
            .collect();
        Refs::from_records(&recs)
    }

    /// A reference string of byte addresses in the arena (for synthetic
    /// traces whose strides are not whole pages).
    pub fn from_addresses(addrs: &[u64], writes: bool) -> Refs {
        let page = farmem_sys::PAGE_SIZE as u64;
        let cell = farmem_runtime::readahead::CELL as u64;
        let kind = if writes {
            Kind::FaultWrite
        } else {
            Kind::FaultRead
        };
        let recs: Vec<u64> = addrs
            .iter()
            // The cell of a page is below 256: the fallback is never taken.
            .map(|&a| {
                let c = u8::try_from((a % page) / cell).unwrap_or(u8::MAX);
                trace::encode_at(kind, a / page, 0, c)
            })
            .collect();
        Refs::from_records(&recs)
    }

    pub fn len(&self) -> usize {
        self.pages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }
}

/// Pages Belady's MIN fetches at `budget` resident pages (demand fetching:
/// evict the resident page whose next reference is furthest away).
pub fn min_fetches(refs: &Refs, budget: usize) -> u64 {
    min_fetches_by_page(refs, budget)
        .iter()
        .map(|&c| u64::from(c))
        .sum()
}

/// [`min_fetches`] page by page: how many times MIN fetches each page,
/// indexed by dense id (`refs.page_of` names the page).
pub fn min_fetches_by_page(refs: &Refs, budget: usize) -> Vec<u32> {
    let n = refs.pages.len();
    let budget = budget.max(1);
    let mut next_use = vec![usize::MAX; n];
    let mut last = vec![usize::MAX; refs.distinct];
    for i in (0..n).rev() {
        let p = refs.pages[i] as usize;
        next_use[i] = last[p];
        last[p] = i;
    }
    // Per page: its next use while resident (usize::MAX - 1 when never again),
    // or None. The heap holds (next use, page), stale entries skipped.
    let mut resident: Vec<Option<usize>> = vec![None; refs.distinct];
    let mut heap: BinaryHeap<(usize, u32)> = BinaryHeap::new();
    let mut count = 0usize;
    let mut fetches = vec![0u32; refs.distinct];
    let mut released = refs.released.iter().peekable();
    for (i, (&p, &nu)) in refs.pages.iter().zip(&next_use).enumerate() {
        while let Some(&(_, id)) = released.next_if(|&&(at, _)| at <= i) {
            // A dead page leaves at once (its stale heap entry is skipped).
            if resident[id as usize].take().is_some() {
                count -= 1;
            }
        }
        if resident[p as usize].is_none() {
            fetches[p as usize] = fetches[p as usize].saturating_add(1);
            if count == budget {
                while let Some((u, q)) = heap.pop() {
                    if resident[q as usize] == Some(u) {
                        resident[q as usize] = None;
                        count -= 1;
                        break;
                    }
                }
            }
            count += 1;
        }
        resident[p as usize] = Some(nu);
        heap.push((nu, p));
    }
    fetches
}

/// Pages fetched at a budget of `budget` pages by LRU that sees every hit
/// (least recently used page out, demand fetching): the policy a kernel
/// approximates with hardware access bits, which farmem cannot read here.
/// A reference point beside MIN, on the same string (farmem's policy
/// may fetch more or less than it): references the string hides (see [`Refs`]) are hits LRU does not
/// see either, so it may fetch a little more than it would on the full
/// string.
pub fn lru_fetches(refs: &Refs, budget: usize) -> u64 {
    // An intrusive list over dense ids, most recent at `head`; NIL ends it.
    const NIL: u32 = u32::MAX;
    let budget = budget.max(1);
    let mut prev = vec![NIL; refs.distinct];
    let mut next = vec![NIL; refs.distinct];
    let mut resident = vec![false; refs.distinct];
    let (mut head, mut tail, mut count, mut fetches) = (NIL, NIL, 0usize, 0u64);
    let mut released = refs.released.iter().peekable();
    let unlink = |prev: &mut [u32], next: &mut [u32], head: &mut u32, tail: &mut u32, q: u32| {
        let (a, b) = (prev[q as usize], next[q as usize]);
        if a == NIL {
            *head = b;
        } else {
            next[a as usize] = b;
        }
        if b == NIL {
            *tail = a;
        } else {
            prev[b as usize] = a;
        }
    };
    for (k, &p) in refs.pages.iter().enumerate() {
        while let Some(&(_, id)) = released.next_if(|&&(at, _)| at <= k) {
            if std::mem::take(&mut resident[id as usize]) {
                unlink(&mut prev, &mut next, &mut head, &mut tail, id);
                count -= 1;
            }
        }
        let i = p as usize;
        if resident[i] {
            if head == p {
                continue;
            }
            unlink(&mut prev, &mut next, &mut head, &mut tail, p);
        } else {
            fetches += 1;
            if count == budget {
                // The least recently used page leaves.
                let t = tail as usize;
                resident[t] = false;
                tail = prev[t];
                if tail == NIL {
                    head = NIL;
                } else {
                    next[tail as usize] = NIL;
                }
            } else {
                count += 1;
            }
            resident[i] = true;
        }
        // p to the front.
        prev[i] = NIL;
        next[i] = head;
        if head == NIL {
            tail = p;
        } else {
            prev[head as usize] = p;
        }
        head = p;
    }
    fetches
}

/// What the replay under farmem's policy did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replay {
    /// Pages fetched (demand and prefetched).
    pub fetched: u64,
    /// Runs of consecutive pages fetched: each costs a request, an install
    /// and later an unmap, whatever its length.
    pub runs: u64,
    pub faults: u64,
    pub prefetched: u64,
    /// Faults that caught a stream where eviction had taken its windows.
    pub streams_caught: u64,
    pub prefetch_used: u64,
    pub prefetch_wasted: u64,
    /// References that found their page in the hold.
    pub hold_reused: u64,
    /// Main pages displaced by a refaulting page: each leaves alone, and a
    /// dirty one costs a write-protect call of its own on the way out.
    pub displaced: u64,
    /// Prefetched and wasted pages by the reason they were prefetched for
    /// ([`trace::Why`] as index).
    pub prefetched_by_why: [u64; Why::COUNT],
    pub wasted_by_why: [u64; Why::COUNT],
}

impl Replay {
    /// Wasted prefetched pages as a share of those that ended (used or wasted).
    pub fn waste(&self) -> f64 {
        let ended = self.prefetch_used + self.prefetch_wasted;
        if ended == 0 {
            0.0
        } else {
            self.prefetch_wasted as f64 / ended as f64
        }
    }
}

#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum Slot {
    #[default]
    Absent,
    Resident,
    /// The first page of a pipelined window: counts against the budget, and
    /// the program's reference to it continues its stream.
    Parked,
    /// In the hold: local, unmapped; a reference reinstalls it, protected.
    Held,
}

#[derive(Clone, Copy, Default)]
struct Page {
    slot: Slot,
    prefetched: bool,
    dirty: bool,
    why: u8,
}

/// Eviction stamps by page number (0 = never evicted); a map, as page
/// numbers can be anywhere in an arena of up to 2^32 pages.
struct Stamps(RefCell<HashMap<u32, u32>>);
impl Aux for Stamps {
    fn aux(&self, p: u32) -> u32 {
        self.0.borrow().get(&p).copied().unwrap_or(0)
    }
    fn set_aux(&self, p: u32, v: u32) {
        self.0.borrow_mut().insert(p, v);
    }
}

/// The queues' key of page `p`: its page number, as in the runtime (the
/// queues count kept pages by block of addresses). Arena pages fit 32 bits
/// (`FARMEM_ARENA` is capped at 2^32 pages).
fn key(p: u64) -> u32 {
    u32::try_from(p).unwrap_or(u32::MAX)
}

/// The replay's state: pages indexed by arena page number (the planner works
/// on arena pages; the references are mapped back to them).
struct Sim {
    pages: HashMap<u64, Page>,
    /// The hold, oldest first (entries of pages that left it are skipped).
    held: std::collections::VecDeque<u64>,
    hold_cap: usize,
    /// Prefetched pages eviction has passed over once.
    second: HashSet<u64>,
    /// Victims of this round that came from main.
    mains: HashSet<u64>,
    /// Pages last evicted while still prefetched (`page::WASTED`).
    wasted: HashSet<u64>,
    stamps: Stamps,
    queues: Queues,
    planner: Planner,
    budget: usize,
    resident: usize,
    evict_batch: usize,
    /// `FARMEM_RESERVE`, capped as the runtime caps it.
    spare: usize,
    r: Replay,
    /// Pages fetched, by page number, when asked for.
    fetched_by_page: Option<HashMap<u64, u64>>,
}

impl Sim {
    fn page(&self, p: u64) -> Page {
        self.pages.get(&p).copied().unwrap_or_default()
    }

    fn reserve(&mut self, n: usize) {
        while self.resident + n > self.budget {
            let want = n
                .max(self.evict_batch)
                .min(farmem_runtime::config::MAX_EVICT_BATCH);
            if !self.evict_round(want) {
                return;
            }
        }
    }

    /// The runtime's `refill`: after a demand fetch that found room, evict
    /// until `spare` pages are free again.
    fn refill(&mut self) {
        let free = self.budget.saturating_sub(self.resident);
        if free < self.spare {
            let want = (self.spare - free)
                .max(self.evict_batch)
                .min(farmem_runtime::config::MAX_EVICT_BATCH);
            self.evict_round(want);
        }
    }

    /// Evict up to `want` pages (or install parked pages when nothing else
    /// is left). Returns false when there was nothing to do either.
    fn evict_round(&mut self, want: usize) -> bool {
        let mut victims = [0u32; farmem_runtime::config::MAX_EVICT_BATCH];
        let (k, stamp) = {
            let Sim {
                pages,
                queues,
                second,
                mains,
                ..
            } = self;
            queues.evict(&mut victims[..want], |id, from_main, kept_near| {
                let p = u64::from(id);
                let pg = pages.get(&p).copied().unwrap_or_default();
                if pg.slot != Slot::Resident {
                    return Take::Drop;
                }
                // The runtime's dirty holes in kept blocks, kept in main.
                let dirty = |q: u64| {
                    pages
                        .get(&q)
                        .is_some_and(|g| g.slot == Slot::Resident && g.dirty)
                };
                if !from_main
                    && pg.dirty
                    && keeps_dirty(kept_near, p > 0 && dirty(p - 1), dirty(p + 1))
                {
                    return Take::Promote;
                }
                // The runtime's one extra pass for prefetched pages not yet used.
                if pg.prefetched && second.insert(p) {
                    return Take::Keep;
                }
                if from_main {
                    mains.insert(p);
                }
                Take::Taken
            })
        };
        if k == 0 {
            // Only parked pages are left: install them as the runtime does.
            let parked: Vec<u64> = self
                .pages
                .iter()
                .filter(|(_, pg)| pg.slot == Slot::Parked)
                .map(|(&p, _)| p)
                .collect();
            if parked.is_empty() {
                return false;
            }
            for p in parked {
                self.install_parked(p);
            }
            return true;
        }
        for &id in &victims[..k] {
            let p = u64::from(id);
            self.second.remove(&p);
            // Pages leaving main proved themselves once; the hold is for
            // those the queues have not seen reused.
            if self.hold_cap == 0 || self.mains.remove(&p) {
                self.stamps.set_aux(id, stamp);
                self.gone(p);
                continue;
            }
            // Into the hold (stamped: a reuse there is a refault at its
            // real distance); the page held longest leaves for good.
            self.stamps.set_aux(id, stamp);
            if let Some(pg) = self.pages.get_mut(&p) {
                pg.slot = Slot::Held;
            }
            self.held.push_back(p);
            while self.held.len() > self.hold_cap {
                let Some(q) = self.held.pop_front() else {
                    break;
                };
                if self.page(q).slot == Slot::Held {
                    let qid = key(q);
                    self.stamps.set_aux(qid, self.queues.clock());
                    self.gone(q);
                }
            }
        }
        self.resident -= k;
        true
    }

    /// The program gave the pages of `ranges` (first page, pages) back:
    /// their content is dropped wherever it is (no write-back), prefetched
    /// or not, their room freed, their refault history reset, as the
    /// runtime's `release_pages` does.
    fn release(&mut self, ranges: &[(u64, u64)]) {
        let dead = |p: u64| ranges.iter().any(|&(a, n)| (a..a + n).contains(&p));
        for &(a, n) in ranges {
            for p in a..a + n {
                if let Some(pg) = self.pages.remove(&p) {
                    if matches!(pg.slot, Slot::Resident | Slot::Parked) {
                        self.resident -= 1;
                    }
                    self.second.remove(&p);
                    self.mains.remove(&p);
                }
                // No stamp reads as never evicted.
                self.stamps.0.borrow_mut().remove(&key(p));
            }
        }
        self.held.retain(|&q| !dead(q));
        self.queues.retain(|id| !dead(u64::from(id)));
    }

    /// Page `p` leaves local memory for good.
    fn gone(&mut self, p: u64) {
        let pg = self.pages.remove(&p).unwrap_or_default();
        if pg.prefetched {
            self.wasted.insert(p);
            self.r.prefetch_wasted += 1;
            self.r.wasted_by_why[usize::from(pg.why).min(Why::COUNT - 1)] += 1;
            self.planner.on_wasted(p);
        }
    }

    fn install_parked(&mut self, p: u64) {
        if let Some(pg) = self.pages.get_mut(&p) {
            pg.slot = Slot::Resident;
        }
        let id = key(p);
        let refault = Some(self.stamps.aux(id));
        // A pipelined window's first page, as the runtime's `unpark`.
        self.queues.admit(id, refault, Fetched::AloneInStream);
    }

    fn used(&mut self, p: u64) {
        if let Some(pg) = self.pages.get_mut(&p) {
            if pg.prefetched && pg.slot != Slot::Absent {
                pg.prefetched = false;
                self.r.prefetch_used += 1;
                self.planner.on_used(p);
            }
        }
    }

    /// Fetch the absent pages of `list` (the first is the demand page unless
    /// `all_prefetch`), parking `park` if given. `stream`: the window was
    /// planned for a stream or pipelined ahead of one.
    fn fetch(
        &mut self,
        list: &[u64],
        demand: bool,
        park: Option<u64>,
        write: bool,
        why: Why,
        stream: bool,
    ) {
        for q in list {
            self.wasted.remove(q);
        }
        let room = self.resident + list.len() <= self.budget;
        self.reserve(list.len());
        if demand && room {
            // The runtime sends the request, then refills while it travels.
            self.refill();
        }
        if !list.is_empty() {
            self.r.runs += 1 + list.windows(2).filter(|w| w[1] != w[0] + 1).count() as u64;
        }
        let fetched = match (list.first(), list.last()) {
            (Some(&a), Some(&b)) => fetched_as(a, b, list.len(), stream),
            _ => Fetched::Alone,
        };
        for (k, &q) in list.iter().enumerate() {
            let prefetched = k > 0 || !demand;
            let slot = if Some(q) == park {
                Slot::Parked
            } else {
                Slot::Resident
            };
            self.pages.insert(
                q,
                Page {
                    slot,
                    prefetched,
                    dirty: write,
                    why: why as u8,
                },
            );
            self.resident += 1;
            self.r.fetched += 1;
            if let Some(m) = &mut self.fetched_by_page {
                *m.entry(q).or_insert(0) += 1;
            }
            if prefetched {
                self.r.prefetched += 1;
                self.r.prefetched_by_why[usize::from(why as u8).min(Why::COUNT - 1)] += 1;
            }
            if slot == Slot::Resident {
                let id = key(q);
                let refault = Some(self.stamps.aux(id));
                self.queues.admit(id, refault, fetched);
            }
        }
    }

    /// Absent pages from `start` on, at most `want`, stopping at the first
    /// page that is neither absent nor resident.
    fn claim(&self, start: i64, want: usize) -> Vec<u64> {
        self.claim_span(Walk::pages(start, 1), 0, want, false).0
    }

    /// The absent pages of the `span` elements of `walk` from element
    /// `from` on, and how many of the span were passed (less where a page
    /// neither absent nor resident ends it). `skip`: resident pages are
    /// passed over, as a demand fault's window does (`Runtime::fetch`);
    /// otherwise they end it, as a pipelined window's consecutive run does.
    fn claim_span(&self, walk: Walk, from: usize, span: usize, skip: bool) -> (Vec<u64>, usize) {
        let mut v = Vec::new();
        for k in 0..span {
            let Ok(q) = u64::try_from(walk.page((from + k) as i64)) else {
                return (v, k);
            };
            match self.page(q).slot {
                Slot::Absent => v.push(q),
                Slot::Resident if skip => {}
                _ => return (v, k),
            }
        }
        (v, span)
    }

    fn reference(&mut self, p: u64, cell: u8, write: bool) {
        let pg = self.page(p);
        match pg.slot {
            Slot::Resident => {
                // Reads of resident pages are invisible, as in the runtime; a
                // write to a clean page faults once (write protection).
                if write && !pg.dirty {
                    self.used(p);
                    if let Some(x) = self.pages.get_mut(&p) {
                        x.dirty = true;
                    }
                }
            }
            Slot::Parked => {
                self.continue_stream(p, write);
                self.install_parked(p);
                self.used(p);
                if write {
                    if let Some(x) = self.pages.get_mut(&p) {
                        x.dirty = true;
                    }
                }
            }
            Slot::Held => {
                // Its place in `held` goes stale; the page leaves the hold.
                self.reserve(1);
                if let Some(x) = self.pages.get_mut(&p) {
                    x.slot = Slot::Resident;
                    x.dirty |= write;
                }
                self.resident += 1;
                self.r.hold_reused += 1;
                self.used(p);
                let id = key(p);
                let stamp = self.stamps.aux(id);
                self.queues.admit(id, Some(stamp), Fetched::Alone);
            }
            Slot::Absent => self.fault(p, cell, write),
        }
    }

    fn continue_stream(&mut self, q: u64, write: bool) {
        let Some((i, win)) = self.planner.stream_at(i64::try_from(q).unwrap_or(i64::MAX)) else {
            return;
        };
        for k in 1..=(farmem_runtime::config::MAX_BATCH as u64).min(q) {
            let pg = self.page(q - k);
            if pg.slot != Slot::Resident {
                break;
            }
            if pg.prefetched {
                self.used(q - k);
            }
        }
        let start = q + win as u64;
        let maxw = self
            .planner
            .max_window()
            .min(farmem_runtime::config::MAX_BATCH);
        let want = self.planner.limited(i, (win * 2).min(maxw));
        let want = self.planner.pipeline_window(start, want);
        let list = if want > 1 {
            self.claim(i64::try_from(start).unwrap_or(i64::MAX), want)
        } else {
            Vec::new()
        };
        if !list.is_empty() {
            self.fetch(&list, false, Some(start), write, Why::Pipelined, true);
        }
        let next = i64::try_from(start).unwrap_or(i64::MAX);
        self.planner.moved(i, next, list.len().max(win));
    }

    fn fault(&mut self, p: u64, cell: u8, write: bool) {
        self.r.faults += 1;
        let plan = {
            let pages = &self.pages;
            let gone = self.queues.clock().wrapping_sub(self.stamps.aux(key(p)));
            let refetch = self.wasted.contains(&p)
                && farmem_runtime::readahead::wasted_lately(gone, self.budget);
            self.planner.plan(p, cell, Hint::None, refetch, |q| {
                pages.get(&q).is_some_and(|x| x.slot == Slot::Resident)
            })
        };
        self.r.streams_caught += u64::from(plan.caught);
        if let Some((walk, k)) = plan.used {
            for j in 0..k as i64 {
                if let Ok(q) = u64::try_from(walk.page(j)) {
                    self.used(q);
                }
            }
        }
        let mut list = vec![p];
        let (rest, passed) = self.claim_span(plan.walk, 1, plan.pages - 1, true);
        list.extend(rest);
        let span = passed + 1;
        if let (Some(i), true) = (plan.stream, span < plan.pages) {
            self.planner.window_ended(i, plan.walk, span);
        }
        self.fetch(&list, true, None, write, plan.why, plan.stream.is_some());
        if plan.pipeline && span == plan.pages {
            let start = p + span as u64;
            let want = self.planner.pipeline_window(start, span);
            let ahead = if want > 1 {
                self.claim(i64::try_from(start).unwrap_or(i64::MAX), want)
            } else {
                Vec::new()
            };
            if let (false, Some(i)) = (ahead.is_empty(), plan.stream) {
                let k = ahead.len();
                self.fetch(&ahead, false, Some(start), write, Why::Pipelined, true);
                self.planner
                    .moved(i, i64::try_from(start).unwrap_or(i64::MAX), k);
            }
        }
    }
}

/// The runtime's settings that a replay follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Largest prefetch window, pages (`FARMEM_PREFETCH`).
    pub prefetch: usize,
    /// `FARMEM_EVICT_BATCH` (None: `auto`, sized by the budget).
    pub evict_batch: Option<u32>,
    /// `FARMEM_HOLD`, per cent of the budget.
    pub hold_percent: usize,
    /// `FARMEM_RESERVE`, pages (capped at 1/16 of the budget, as the runtime does).
    pub reserve: usize,
}

impl Settings {
    /// The runtime's defaults with window `prefetch`.
    pub fn defaults(prefetch: usize) -> Settings {
        let c = farmem_runtime::Config::default();
        Settings {
            prefetch,
            evict_batch: c.evict_batch(),
            hold_percent: c.hold_percent() as usize,
            reserve: c.reserve_pages() as usize,
        }
    }

    /// What a trace says its run used.
    pub fn of(h: &trace::Header) -> Settings {
        let u = |v: u32| farmem_sys::usize_from(u64::from(v));
        Settings {
            prefetch: u(h.prefetch_pages),
            evict_batch: Some(h.evict_batch),
            hold_percent: u(h.hold_percent),
            reserve: u(h.reserve_pages),
        }
    }
}

/// Replay `refs` under farmem's policy at `budget` pages with settings `set`.
pub fn replay(refs: &Refs, budget: usize, set: Settings) -> Replay {
    simulate(refs, budget, set, false).0
}

/// [`replay`], and how many times it fetched each page, by page number.
pub fn replay_by_page(refs: &Refs, budget: usize, set: Settings) -> (Replay, HashMap<u64, u64>) {
    let (r, m) = simulate(refs, budget, set, true);
    (r, m.unwrap_or_default())
}

fn simulate(
    refs: &Refs,
    budget: usize,
    set: Settings,
    by_page: bool,
) -> (Replay, Option<HashMap<u64, u64>>) {
    let total = budget.max(4 * farmem_runtime::config::MAX_BATCH);
    let hold_cap =
        (total * set.hold_percent / 100).min(total - 4 * farmem_runtime::config::MAX_BATCH);
    let budget = total - hold_cap;
    let mut s = Sim {
        pages: HashMap::new(),
        held: std::collections::VecDeque::new(),
        hold_cap,
        second: HashSet::new(),
        mains: HashSet::new(),
        wasted: HashSet::new(),
        stamps: Stamps(RefCell::new(HashMap::new())),
        queues: Queues::new(
            budget,
            4 * farmem_runtime::config::MAX_BATCH,
            refs.page_of
                .iter()
                .max()
                .map_or(0, |&m| farmem_sys::usize_from(m) + 1),
        ),
        planner: Planner::new(set.prefetch),
        budget,
        resident: 0,
        evict_batch: farmem_runtime::config::eviction_round(set.evict_batch, budget),
        spare: set.reserve.min(budget / 16),
        r: Replay::default(),
        fetched_by_page: by_page.then(HashMap::new),
    };
    let mut freed = refs.freed.iter().peekable();
    let mut ranges = Vec::new();
    for (i, &id) in refs.pages.iter().enumerate() {
        ranges.clear();
        while let Some(&(_, first, n)) = freed.next_if(|&&(at, _, _)| at <= i) {
            ranges.push((first, n));
        }
        if !ranges.is_empty() {
            s.release(&ranges);
        }
        s.reference(refs.page_of[id as usize], refs.cells[i], refs.writes[i]);
    }
    s.r.displaced = s.queues.displaced;
    (s.r, s.fetched_by_page)
}

/// What a trace recorded, counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub faults: u64,
    /// Of the faults, those served from the hold (no page moved).
    pub from_hold: u64,
    pub write_hits: u64,
    pub prefetch_waits: u64,
    /// Prefetched pages by reason ([`trace::Why`] as index).
    pub prefetched: [u64; Why::COUNT],
    pub prefetch_used: u64,
    pub evicted: u64,
    pub written_back: u64,
    /// Prefetched pages evicted unused.
    pub wasted: u64,
    /// Wasted pages by the reason they were prefetched for.
    pub wasted_by_why: [u64; Why::COUNT],
    /// Pages the program gave back (freed, unmapped, `MADV_DONTNEED`).
    pub released: u64,
}

impl Summary {
    pub fn of(records: &[u64]) -> Summary {
        let mut s = Summary::default();
        let mut why: HashMap<u64, u8> = HashMap::new();
        for &r in records {
            let Some((kind, page, detail)) = trace::decode(r) else {
                continue;
            };
            match kind {
                Kind::FaultRead | Kind::FaultWrite => {
                    s.faults += 1;
                    if detail & trace::FAULT_FROM_HOLD != 0 {
                        s.from_hold += 1;
                    }
                }
                Kind::WriteHit => s.write_hits += 1,
                Kind::PrefetchWait => s.prefetch_waits += 1,
                Kind::Prefetch => {
                    let w = usize::from(detail).min(Why::COUNT - 1);
                    s.prefetched[w] += 1;
                    why.insert(page, detail);
                }
                Kind::PrefetchUsed => s.prefetch_used += 1,
                Kind::Evict => {
                    s.evicted += 1;
                    if detail & trace::EVICT_WRITTEN_BACK != 0 {
                        s.written_back += 1;
                    }
                    if detail & trace::EVICT_UNUSED_PREFETCH != 0 {
                        s.wasted += 1;
                        if let Some(&w) = why.get(&page) {
                            s.wasted_by_why[usize::from(w).min(Why::COUNT - 1)] += 1;
                        }
                    }
                }
                Kind::Released => s.released += u64::from(detail) + 1,
            }
        }
        s
    }

    pub fn prefetched_total(&self) -> u64 {
        self.prefetched.iter().sum()
    }
}

#[cfg(test)]
mod tests;
