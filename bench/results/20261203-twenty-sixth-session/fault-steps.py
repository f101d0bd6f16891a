#!/usr/bin/env python3
"""For each demand fault of a policy trace whose records hold the fault's cell
(farmem run --trace, 26e5f10 on), whether one of the LAG faults before it lies
one STEP bytes away (either way, within TOL bytes: a cell is 16 bytes): the
faults a stream of that step could have predicted.
usage: fault-steps.py TRACE LAG STEP... (e.g. 64 424360 84872)"""
import sys
import numpy as np

path, lag = sys.argv[1], int(sys.argv[2])
steps = [int(a) for a in sys.argv[3:]]
TOL = 48
with open(path, "rb") as f:
    if f.read(8) != b"FMTRACE3":
        sys.exit(f"{path}: not a FMTRACE3 trace")
    f.seek(48)
    rec = np.fromfile(f, dtype="<u8")
kind = rec >> np.uint64(56)
faults = rec[(kind == 1) | (kind == 2)]
page = (faults & np.uint64((1 << 40) - 1)).astype(np.int64)
cell = ((faults >> np.uint64(40)) & np.uint64(0xFF)).astype(np.int64)
x = page * 4096 + cell * 16 + 8
n = len(x)
print(f"{path}: {n} demand faults")
for step in steps:
    hit = np.zeros(n, dtype=bool)
    for k in range(1, lag + 1):
        d = np.abs(x[k:] - x[:-k])
        hit[k:] |= np.abs(d - step) <= TOL
    print(f"  one step of {step} bytes ({step / 4096:.2f} pages) from one of the {lag} faults before: "
          f"{hit.sum()} ({100 * hit.sum() / n:.1f}%)")
