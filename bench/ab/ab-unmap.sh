#!/usr/bin/env bash
# Eviction's unmap before and after batching (issue 42): an OLD tree (one
# madvise per run of victims, one TLB shootdown each) against this one (one
# process_madvise per batch), alternating, RUNS rounds, on the default page
# path (memory files from the embedded server). Scattered victims are where
# it differs, and most with a second thread whose CPU takes the shootdowns.
#   faultlat 20000              random faults; its "2 thr" row evicts dirty pages
#   memwrite 1G at 4x           sequential: victims in runs already
#   GAPBS bfs -g 20 -n 1 at 25% (if GAPBS is given): the graph builder's
#                               scattered writes, 2 OpenMP threads
# usage: bench/ab/ab-unmap.sh OLD_TREE [RUNS=2] [GAPBS_DIR]
#   OLD_TREE: `git worktree add /tmp/old COMMIT`, built with cargo build --release.
#   GAPBS_DIR: a GAPBS checkout built with `make bfs`; fetched, never copied here.
set -euo pipefail
cd "$(dirname "$0")/../.."
OLD=$(cd "$1" && pwd); RUNS=${2:-2}; GAPBS=${3:-}
BENCH_COMMAND="bench/ab/ab-unmap.sh $*"
. bench/lib/results-dir.sh
results_dir ab-unmap
cargo build --release --quiet
make -C workloads >/dev/null
NEW=$PWD/target/release
W=$PWD/target/release/workloads
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
echo "old: $OLD ($(git -C "$OLD" rev-parse --short HEAD))  new: $(git rev-parse --short HEAD)" | tee -a "$R/RUN.md"
if [ -n "$GAPBS" ]; then
    out=$( { /usr/bin/time -v "$GAPBS/bfs" -g 20 -n 1; } 2>&1 )
    peak_kb=$(echo "$out" | awk -F: '/Maximum resident set size/ {gsub(/ /,"",$2); print $2}')
    bfs_local=$(( peak_kb / 4 / 1024 ))
    echo "bfs all-local: $(echo "$out" | awk '/Average Time/ {print $3}') s a trial, $(echo "$out" | awk -F'[: ]+' '/Elapsed \(wall/ {print $NF}') wall, peak RSS $((peak_kb / 1024)) MiB; at 25%: --local ${bfs_local}M" | tee -a "$R/runs.txt"
fi
for r in $(seq "$RUNS"); do
    for side in "old|$OLD/target/release" "new|$NEW"; do
        IFS='|' read -r name T <<<"$side"
        echo "faultlat $name $r: $(FARMEM_LOCAL=320M LD_LIBRARY_PATH=$T "$W/faultlat" 20000 2>&1 \
            | grep -E '^far' | sed -E 's/ +/ /g; s/n=20000 //; s/p90=[ 0-9.]+us //' | tr '\n' ';')"
        echo "memwrite $name $r: $("$T/farmem" run --local 256M -- "$W/memwrite" --size 1024 --passes 3 2>&1 \
            | awk '/pass=/ {printf "%s ", $4}')"
        if [ -n "$GAPBS" ]; then
            s=$(date +%s.%N)
            o=$("$T/farmem" run --local "${bfs_local}M" --stats -- "$GAPBS/bfs" -g 20 -n 1 2>&1)
            e=$(date +%s.%N)
            echo "bfs $name $r: wall $(echo "$e - $s" | bc | cut -c1-6) s, trial $(echo "$o" | awk '/Average Time/ {print $3}') s | $(echo "$o" | grep -E '^ *(fetched|written back|fault latency)' | sed -E 's/ +/ /g' | tr '\n' ';')"
        fi
    done
done | tee -a "$R/runs.txt"
