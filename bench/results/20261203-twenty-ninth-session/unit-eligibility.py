#!/usr/bin/env python3
"""How many of a run's fetched pages a whole-unit fetch could have served.

Reads a policy trace (FARMEM_TRACE=FILE, format FMTRACE3, crates/runtime/src/trace.rs),
rebuilds which pages were resident after each record, and counts, for every page
fetched (a missing fault not served from the hold, or a prefetch), whether its
aligned 2 MiB unit (512 pages of the arena, taken as if the arena were 2 MiB-aligned)
was wholly absent when the unit's current episode began. An episode begins with a
fetch into an empty unit and ends at the first eviction from the unit: after that,
fetches into the unit refill holes, which a unit move cannot serve.

It also says whether units that were fetched whole leave whole: how many of their
pages were evicted before the next fetch into the unit (or the trace's end). A unit
that leaves whole could leave by one move as well.

usage: python3 unit-eligibility.py TRACE
"""
import sys

import numpy as np

raw = open(sys.argv[1], 'rb').read()
if raw[:8] != b'FMTRACE3':
    sys.exit(f"{sys.argv[1]}: not a FMTRACE3 policy trace (starts {raw[:8]!r})")
recs = np.frombuffer(raw[48:], dtype='<u8')
kind = (recs >> 56).astype(np.uint8).tolist()
page = (recs & ((1 << 40) - 1)).astype(np.int64)
npages = int(page.max()) + 1
page = page.tolist()
detail = ((recs >> 48) & 0xFF).astype(np.uint8).tolist()
FAULT_READ, FAULT_WRITE, PREFETCH, EVICT, RELEASED = 1, 2, 5, 7, 8
FROM_HOLD = 1

resident = np.zeros(npages, dtype=bool)
count = np.zeros(npages // 512 + 1, dtype=np.int64)
in_episode = np.zeros(npages // 512 + 1, dtype=bool)
episode_pages = np.zeros(npages // 512 + 1, dtype=np.int64)
episodes = []
fetched = eligible = 0
# Units fetched whole, from their first eviction until the next fetch into them:
# pages evicted so far (-1: not being followed).
leaving = np.full(npages // 512 + 1, -1, dtype=np.int64)
left = []


def end_episode(u):
    if in_episode[u]:
        in_episode[u] = False
        if episode_pages[u]:
            episodes.append(int(episode_pages[u]))
            if episode_pages[u] >= 512:
                leaving[u] = 0
        episode_pages[u] = 0


def stop_following(u):
    if leaving[u] >= 0:
        left.append(int(leaving[u]))
        leaving[u] = -1


for k, p, d in zip(kind, page, detail):
    u = p >> 9
    if k in (FAULT_READ, FAULT_WRITE, PREFETCH):
        if resident[p]:
            continue
        if k != PREFETCH and d & FROM_HOLD:
            resident[p] = True
            count[u] += 1
            continue
        stop_following(u)
        if count[u] == 0 and not in_episode[u]:
            in_episode[u] = True
        fetched += 1
        if in_episode[u]:
            eligible += 1
            episode_pages[u] += 1
        resident[p] = True
        count[u] += 1
    elif k == EVICT:
        end_episode(u)
        if resident[p]:
            resident[p] = False
            count[u] -= 1
            if leaving[u] >= 0:
                leaving[u] += 1
    elif k == RELEASED:
        for q in range(p, p + d + 1):
            if resident[q]:
                resident[q] = False
                count[q >> 9] -= 1
            end_episode(q >> 9)
for u in np.nonzero(in_episode)[0]:
    end_episode(u)
for u in np.nonzero(leaving >= 0)[0]:
    stop_following(u)

ep = np.array(episodes)
print(f"pages fetched {fetched}; in units wholly absent when their episode began: "
      f"{eligible} ({100 * eligible / max(fetched, 1):.1f}%)")
if len(ep):
    whole = ep >= 512
    print(f"episodes {len(ep)}: pages each median {int(np.median(ep))}, mean {ep.mean():.0f}; "
          f"{int(whole.sum())} ({100 * whole.sum() / len(ep):.1f}%) fetched all 512 pages before "
          f"their first eviction, {100 * ep[whole].sum() / max(eligible, 1):.1f}% of those pages")
lv = np.array(left)
if len(lv):
    print(f"units fetched whole, then evicted: {len(lv)}; pages evicted before the next fetch into "
          f"the unit: median {int(np.median(lv))}, all 512 in {int((lv >= 512).sum())} "
          f"({100 * (lv >= 512).sum() / len(lv):.1f}%), at least 448 in {int((lv >= 448).sum())}")
