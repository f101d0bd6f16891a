#!/usr/bin/env python3
"""The seed table of docs/benchmarks.md from bench/results/*seed-*/seed-*.json
(written by bench/baselines/seed-table.sh): one row per workload and expansion."""
import glob
import json
import sys

SYSTEMS = ["farmem", "swap", "zram", "ssd-mmap"]


def cell(x, local):
    if x is None:
        return "–"
    if x.get("unavailable"):
        why = x["unavailable"]
        if "OOM" in why:
            return "OOM-killed"
        if why.startswith("timed out"):
            return "timed out"
        return "failed"
    rel = x["seconds"] / local
    lo, hi = x["seconds_min"] / local, x["seconds_max"] / local
    return f"{rel:.2f}× ({lo:.2f}–{hi:.2f})"


def gb(b):
    return f"{b / 1e9:.2f} GB" if b >= 1e8 else f"{b / 1e6:.0f} MB"


rows = []
for f in sorted(glob.glob(sys.argv[1] if len(sys.argv) > 1 else "bench/results/*seed-*/seed-*.json")):
    try:
        r = json.load(open(f))
    except ValueError:
        print(f"skipped {f}: not (yet) a result", file=sys.stderr)
        continue
    p = r["params"]
    res = r["results"]
    local = next(x for x in res if x["system"] == "local")
    name = p["workload"] + (f" {p['variant']}" if p["workload"] == "stencil7" else "")
    name += f" {p['size_bytes'] >> 20}M, {p['threads']} thr"
    for e in p["expansion"]:
        at = {x["system"]: x for x in res if x["expansion"] == e and x["system"] != "local"}
        fm = at.get("farmem", {})
        moved = ""
        if fm.get("timed_fetched_bytes") is not None:
            fb, wb = fm["timed_fetched_bytes"], fm["timed_written_back_bytes"]
            bf, bw = fm.get("bound_fetched_bytes"), fm.get("bound_written_back_bytes")
            moved = f"{gb(fb)} / {gb(bf)}" if bf else gb(fb)
            moved += f"; {gb(wb)} / {gb(bw)}" if bw else f"; {gb(wb)} / 0"
        t = fm.get("bound_seconds")
        ceil = f"{t:.3f} s of {fm['seconds']:.3f} s" if t is not None and fm.get("seconds") else "–"
        rows.append(
            f"| {name} | {e:g}× | {local['seconds']:.3f} s | "
            + " | ".join(cell(at.get(s), local["seconds"]) for s in SYSTEMS)
            + f" | {moved} | {ceil} |"
        )
print("| workload | E | all-local | farmem | swap | zram | ssd-mmap | farmem fetched / least; written back / least | least traffic at the far ceiling, of the cell's time |")
print("|---|---|---:|---|---|---|---|---|---|")
print("\n".join(rows))
