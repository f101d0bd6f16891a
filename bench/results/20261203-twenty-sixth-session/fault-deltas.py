#!/usr/bin/env python3
"""How far each demand fault of a policy trace (farmem run --trace) lies from
the nearest of the LAG faults before it, in pages: a histogram of the most
common distances, and the share of faults at the distances of the planes of
NPB SP class A (8.25 pages: 8, 9, 16, 17, 24, 25, 33, 41).
usage: fault-deltas.py TRACE [LAG]"""
import sys
import numpy as np

HEADER = 48
path = sys.argv[1]
lag = int(sys.argv[2]) if len(sys.argv) > 2 else 64
with open(path, "rb") as f:
    magic = f.read(8)
    if magic != b"FMTRACE3":
        sys.exit(f"{path}: not a FMTRACE3 trace (magic {magic!r})")
    f.seek(HEADER)
    rec = np.fromfile(f, dtype="<u8")
kind = rec >> np.uint64(56)
faults = rec[(kind == 1) | (kind == 2)]
pages = (faults & np.uint64((1 << 40) - 1)).astype(np.int64)
n = len(pages)
best = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
for k in range(1, lag + 1):
    d = np.abs(pages[k:] - pages[:-k])
    best[k:] = np.minimum(best[k:], d)
seen = best != np.iinfo(np.int64).max
print(f"{path}: {n} demand faults; nearest of the {lag} faults before each, in pages")
vals, counts = np.unique(best[seen], return_counts=True)
order = np.argsort(-counts)[:20]
for i in order:
    print(f"  distance {vals[i]:>8}: {counts[i]:>9} faults ({100 * counts[i] / n:5.1f}%)")
sp = np.isin(best, [8, 9, 16, 17, 24, 25, 33, 41])
print(f"at 8, 9, 16, 17, 24, 25, 33 or 41 pages: {sp.sum()} ({100 * sp.sum() / n:.1f}%)")
print(f"at 1 page: {(best == 1).sum()} ({100 * (best == 1).sum() / n:.1f}%); "
      f"over 64 pages or none: {((best > 64) | ~seen).sum()} ({100 * ((best > 64) | ~seen).sum() / n:.1f}%)")
