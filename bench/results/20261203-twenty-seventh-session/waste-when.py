#!/usr/bin/env python3
"""For each prefetched page evicted unused in a policy trace (FMTRACE3): how
many pages were brought in (faults and prefetches) between its eviction and
the next time it was brought in again, by the reason it had been prefetched
(advice, stream, pipelined, probe). A page fetched again within a fraction
of the budget was evicted before its stream reached it; one fetched again
only after several budgets belonged to a later sweep.
usage: python3 waste-when.py TRACE"""
import sys
import numpy as np
HEADER = 48
r = np.fromfile(sys.argv[1], dtype=np.uint64, offset=HEADER)
page = (r & np.uint64((1 << 40) - 1)).astype(np.int64)
kind = (r >> np.uint64(56)).astype(np.int8)
det = ((r >> np.uint64(48)) & np.uint64(0xff)).astype(np.int16)
del r
n = len(kind)
fault = (kind == 1) | (kind == 2)
brought = np.cumsum(fault | (kind == 5))
order = np.argsort(page, kind='stable')
sp = page[order]; sk = kind[order]; sd = det[order]
pos = np.arange(n)
# next bring-in (fault or prefetch) position, in sorted order, at or after each position
nf = np.where((sk == 1) | (sk == 2) | (sk == 5), pos, n)
nf = np.minimum.accumulate(nf[::-1])[::-1]
# last prefetch position at or before
lp = np.where(sk == 5, pos, -1)
lp = np.maximum.accumulate(lp)
ev = np.nonzero((sk == 7) & ((sd & 2) != 0))[0]
nxt = nf[np.minimum(ev + 1, n - 1)]
ok = (nxt < n)
ok[ok] = sp[nxt[ok]] == sp[ev[ok]]
why = np.where(lp[ev] >= 0, sd[np.maximum(lp[ev], 0)], -1)
dist = np.full(len(ev), -1, dtype=np.int64)
dist[ok] = brought[order[nxt[ok]]] - brought[order[ev[ok]]]
names = {0: 'advice', 1: 'stream', 2: 'pipelined', 3: 'probe'}
budget = int(np.fromfile(sys.argv[1], dtype=np.uint64, count=2)[1])
print(f"budget {budget} pages; wasted evictions {len(ev)}")
edges = [0, budget // 8, budget // 2, budget, 2 * budget, 8 * budget, 1 << 62]
for w in sorted(set(why.tolist())):
    m = why == w
    d = dist[m]
    never = int((d < 0).sum())
    row = [f"{names.get(w, w)}: {m.sum()} wasted, never brought in again {never}"]
    for a, b in zip(edges, edges[1:]):
        c = int(((d >= a) & (d < b)).sum())
        row.append(f"[{a},{b if b < 1<<60 else 'inf'}) {c} ({100*c/max(1,m.sum()):.0f}%)")
    print("  " + "; ".join(row))
