#!/usr/bin/env bash
# A/B benchmark for the data path (issue 9): the same workload binaries, run
# side by side in one session on the OLD runtime (a build of an earlier
# commit) and the NEW one (this tree), median of RUNS runs each.
#
# usage: bench/ab/ab.sh OLD_TREE [RUNS=3]
#   OLD_TREE: a checkout of the baseline commit, built with `cargo build
#   --release`; this script builds its workloads from THIS tree's sources
#   (so both sides run identical programs) and links them to its libfarmem.
# Writes bench/results/DATE-ab/ab-{old,new}-NAME.json (with RUN.md: the
# command, the commit, the machine) and prints a summary table.
# SIDES="new" RESULTS_DIR=bench/results/DATE-ab reruns only the new side of
# the `farmem bench` workloads in that run's folder (the old side's files
# are kept); pagerank and faultlat always run both sides.
set -euo pipefail
BENCH_COMMAND="$0 $*"
cd "$(dirname "$0")/../.."
. bench/lib/results-dir.sh
OLD=$(cd "$1" && pwd)
RUNS=${2:-3}
SIDES=${SIDES:-old new}
NEW=$PWD
results_dir ab
cargo build --release --quiet
make -C workloads >/dev/null
cp workloads/*.c workloads/*.h workloads/Makefile "$OLD/workloads/"
make -C "$OLD/workloads" >/dev/null

echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "old: $OLD ($(git -C "$OLD" rev-parse --short HEAD))  new: $NEW ($(git rev-parse --short HEAD))  runs: $RUNS"

bench() { # name, farmem bench args...
    local name=$1; shift
    for side in $SIDES; do
        local tree=$NEW
        [ $side = old ] && tree=$OLD
        echo "== $side $name: farmem bench $*" >&2
        "$tree/target/release/farmem" bench "$@" --systems local,farmem --runs "$RUNS" --json \
            > "$R/ab-$side-$name.json" 2> "$R/ab-$side-$name.err" || true
    done
}

bench memwrite memwrite --size 1G --expansion 4 --timeout 300
bench qsort qsort --size 1G --expansion 6 --timeout 600
bench stencil7 stencil7 --size 512M --expansion 4 --variant temporal --timeout 600
bench himeno himeno --size 512M --expansion 1.67 --timeout 600
bench chase chase --size 512M --expansion 4 --timeout 600

# pagerank is newer than the old CLI's `farmem bench`: run it through
# `farmem run` on both sides, budget = size / 2, median of RUNS.
for side in local old new; do
    tree=$NEW
    [ $side = old ] && tree=$OLD
    : > "$R/ab-$side-pagerank.txt"
    for _ in $(seq "$RUNS"); do
        echo "== $side pagerank 512M 5" >&2
        if [ $side = local ]; then
            "$tree/target/release/workloads/pagerank" 512M 5 >> "$R/ab-$side-pagerank.txt" 2>&1 || true
        else
            "$tree/target/release/farmem" run --local 256M --stats -- \
                "$tree/target/release/workloads/pagerank" 512M 5 >> "$R/ab-$side-pagerank.txt" 2>&1 || true
        fi
    done
done

# Random 4 KiB far faults (no prefetch), embedded server: one thread, then
# two at once.
for side in old new; do
    tree=$NEW
    [ $side = old ] && tree=$OLD
    echo "== $side faultlat" >&2
    FARMEM_LOCAL=320M "$tree/target/release/workloads/faultlat" 20000 > "$R/ab-$side-faultlat.txt" 2>&1 || true
done

python3 - "$R" <<'EOF'
import json, re, sys
R = sys.argv[1]
def load(side, name):
    try:
        return json.load(open(f"{R}/ab-{side}-{name}.json"))
    except Exception:
        return None
def stat(text, key):
    m = re.search(key + r"\s+([0-9.]+)([KMGT]?)", text or "")
    if not m:
        return None
    return float(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[m.group(2)]
def gib(b):
    return "-" if b is None else f"{b / 2**30:.2f}G"
print()
print("| workload | E | all-local s | old farmem/local | new farmem/local | old fetched / written back | new fetched / written back | old / new wp faults |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for name in ["memwrite", "qsort", "stencil7", "himeno", "chase"]:
    o, n = load("old", name), load("new", name)
    if not o or not n:
        print(f"| {name} | missing results (see {R}/ab-*-{name}.err) |")
        continue
    def cells(d):
        loc = next(r for r in d["results"] if r["system"] == "local")
        far = [r for r in d["results"] if r["system"] == "farmem"]
        return loc, far
    lo, fo = cells(o)
    ln, fn = cells(n)
    for a, b in zip(fo, fn):
        sa, sb = a.get("farmem_stats", ""), b.get("farmem_stats", "")
        wa = re.search(r"first write\)\s+\d+ / (\d+)", sa or "")
        wb = re.search(r"first write\)\s+\d+ / (\d+)", sb or "")
        rel = lambda r: f"{r['relative_runtime']:.2f}x" if r.get("relative_runtime") else r.get("check", "failed")
        print(f"| {name} | {a['expansion']} | {ln['seconds']:.2f} (old {lo['seconds']:.2f}) | {rel(a)} | {rel(b)} | "
              f"{gib(stat(sa, 'fetched from backend'))} / {gib(stat(sa, 'written back'))} | "
              f"{gib(stat(sb, 'fetched from backend'))} / {gib(stat(sb, 'written back'))} | "
              f"{wa.group(1) if wa else '-'} / {wb.group(1) if wb else '-'} |")
import statistics
pr = {}
for side in ["local", "old", "new"]:
    try:
        t = open(f"{R}/ab-{side}-pagerank.txt").read()
    except Exception:
        continue
    secs = [float(x) for x in re.findall(r"workload=pagerank seconds=([0-9.]+)", t)]
    fetched = re.findall(r"fetched from backend\s+(\S+)", t)
    pr[side] = (statistics.median(secs) if secs else None, fetched[-1] if fetched else "-")
if "local" in pr and pr["local"][0]:
    l = pr["local"][0]
    cell = lambda s: f"{pr[s][0] / l:.2f}x (fetched {pr[s][1]})" if s in pr and pr[s][0] else "failed"
    print(f"| pagerank 512M | 2 | {l:.2f} | {cell('old')} | {cell('new')} | | | |")
for side in ["old", "new"]:
    try:
        print(f"faultlat {side}:", " ".join(l.strip() for l in open(f"{R}/ab-{side}-faultlat.txt") if "far" in l))
    except Exception:
        pass
EOF
