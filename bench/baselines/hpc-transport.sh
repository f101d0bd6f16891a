#!/usr/bin/env bash
# Real HPC programs nobody here wrote, at half their footprint, over
# sockets and over UCX, beside all-local in one run: GAPBS BFS and PageRank
# (-g 21, two OpenMP threads) and XSBench (-s small -p 100000). Each is
# fetched and built by you; this script takes the checkouts' paths:
#
#   git clone https://github.com/sbeamer/gapbs && make -C gapbs bfs pr
#   git clone https://github.com/ANL-CESAR/XSBench && make -C XSBench/openmp-threading
#   bench/baselines/hpc-transport.sh GAPBS_DIR XSBENCH_DIR [RUNS]
#
# The footprint is the program's peak RSS all-local; --local is half of it.
# Prints seconds (median of RUNS) and the slowdown, with --stats' fetched
# bytes and fault latency for each far run.
set -euo pipefail
cd "$(dirname "$0")/../.."
GAPBS=${1:?GAPBS checkout}; XS=${2:?XSBench checkout}; RUNS=${3:-3}
F=$PWD/target/release/farmem
export OMP_NUM_THREADS=2
med() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# name | command | regex whose first group is the program's own time (s):
# GAPBS's average trial time and XSBench's lookup runtime, as their authors
# report them (graph generation and table set-up excluded).
progs=(
    "bfs|$GAPBS/bfs -g 21 -n 10|Average Time: *([0-9.]+)"
    "pagerank|$GAPBS/pr -g 21 -n 3|Average Time: *([0-9.]+)"
    "xsbench|$XS/openmp-threading/XSBench -s small -p 100000 -t 2|Runtime: *([0-9.]+)"
)
metric() { sed -nE "s/.*$1.*/\1/p" | tail -1; }
echo "program | footprint | local s | socket s (x) | ucx s (x) | socket: fetched, fault p50/p99 us | ucx: fetched, fault p50/p99 us"
for p in "${progs[@]}"; do
    IFS='|' read -r name cmd re <<<"$p"
    ts=(); rss=0
    for r in $(seq "$RUNS"); do
        o=$( { /usr/bin/time -f "RSS %M" $cmd; } 2>&1)
        ts+=("$(echo "$o" | metric "$re")"); rss=$(echo "$o" | awk '/^RSS/ {print $2}')
    done
    local_s=$(printf '%s\n' "${ts[@]}" | med)
    half=$((rss / 2))K
    row="$name | $((rss / 1024))M | $local_s"
    stats=""
    for t in socket ucx; do
        ts=()
        for r in $(seq "$RUNS"); do
            o=$($F run --local $half --transport $t --stats -- $cmd 2>&1)
            ts+=("$(echo "$o" | metric "$re")")
            last=$o
        done
        s=$(printf '%s\n' "${ts[@]}" | med)
        row="$row | $s ($(echo "$s / $local_s" | bc -l | cut -c1-5)x)"
        fetched=$(echo "$last" | awk '/fetched from backend/ {print $4}')
        lat=$(echo "$last" | awk '/fault latency/ {print $4 "/" $10}')
        stats="$stats | $fetched, $lat"
    done
    echo "$row$stats"
done
