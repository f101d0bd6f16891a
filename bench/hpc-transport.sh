#!/usr/bin/env bash
# Real HPC programs nobody here wrote, at half their footprint, over
# sockets and over UCX, beside all-local in one run: GAPBS BFS and PageRank
# (-g 21, two OpenMP threads) and XSBench (-s small -p 100000). Each is
# fetched and built by you; this script takes the checkouts' paths:
#
#   git clone https://github.com/sbeamer/gapbs && make -C gapbs bfs pr
#   git clone https://github.com/ANL-CESAR/XSBench && make -C XSBench/openmp-threading
#   bench/hpc-transport.sh GAPBS_DIR XSBENCH_DIR [RUNS]
#
# The footprint is the program's peak RSS all-local; --local is half of it.
# Prints seconds (median of RUNS) and the slowdown, with --stats' fetched
# bytes and fault latency for each far run.
set -euo pipefail
cd "$(dirname "$0")/.."
GAPBS=${1:?GAPBS checkout}; XS=${2:?XSBench checkout}; RUNS=${3:-3}
F=$PWD/target/release/farmem
export OMP_NUM_THREADS=2
med() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
progs=(
    "bfs|$GAPBS/bfs -g 21 -n 10"
    "pagerank|$GAPBS/pr -g 21 -n 3"
    "xsbench|$XS/openmp-threading/XSBench -s small -p 100000 -t 2"
)
echo "program | local s | footprint | socket s (x) | ucx s (x) | socket fetched, fault p50/p99 | ucx fetched, fault p50/p99"
for p in "${progs[@]}"; do
    name=${p%%|*}; cmd=${p#*|}
    rss=0; ts=()
    for r in $(seq "$RUNS"); do
        o=$( { /usr/bin/time -f "TIME %e %M" $cmd >/dev/null; } 2>&1 | grep TIME)
        ts+=("$(echo "$o" | awk '{print $2}')"); rss=$(echo "$o" | awk '{print $3}')
    done
    local_s=$(printf '%s\n' "${ts[@]}" | med)
    half=$((rss / 2))K
    row="$name | $local_s | $((rss / 1024))M"
    stats=""
    for t in socket ucx; do
        ts=()
        for r in $(seq "$RUNS"); do
            o=$( { /usr/bin/time -f "TIME %e" $F run --local $half --transport $t --stats -- $cmd >/dev/null; } 2>&1)
            ts+=("$(echo "$o" | awk '/^TIME/ {print $2}')")
            last=$o
        done
        s=$(printf '%s\n' "${ts[@]}" | med)
        row="$row | $s ($(echo "$s / $local_s" | bc -l | cut -c1-5)x)"
        fetched=$(echo "$last" | awk '/fetched from backend/ {print $4}')
        lat=$(echo "$last" | awk '/fault latency/ {print $5 "/" $8}')
        stats="$stats | $fetched, $lat"
    done
    echo "$row$stats"
done
