"""Misses of LRU (seeing every hit) and FIFO (no hit information) over a farmem reference string.

Usage: python3 fifo-lru.py REFS PAGES
REFS is a trace recorded with `FARMEM_PREFETCH=0 farmem run --local 1M --trace REFS -- ...`;
PAGES the budget in pages. Prints each policy's total and its misses per tenth of the run.
"""
import sys
from collections import OrderedDict

import numpy as np

raw = open(sys.argv[1], "rb").read()
recs = np.frombuffer(raw[48:], dtype="<u8")
kind = (recs >> 56).astype(np.int64)
page = (recs & ((1 << 40) - 1)).astype(np.int64)
pages = page[(kind >= 1) & (kind <= 4)].tolist()
n = len(pages)
budget = int(sys.argv[2])
TENTHS = 10


def misses(fifo):
    resident = OrderedDict()
    out = [0] * TENTHS
    for i, p in enumerate(pages):
        if p in resident:
            if not fifo:
                resident.move_to_end(p)
            continue
        out[i * TENTHS // n] += 1
        if len(resident) >= budget:
            resident.popitem(last=False)
        resident[p] = True
    return out


for name, fifo in (("LRU ", False), ("FIFO", True)):
    m = misses(fifo)
    print(name, sum(m), m)
