#!/usr/bin/env bash
# The one-host page path, three ways in one run, alternating: an OLD tree's
# default (at the parent of the memory-file path: UCX shared memory), this
# tree's default (sealed memory files over the Unix socket) and this tree's
# sockets (FARMEM_TRANSPORT=socket). Every far run uses the embedded server.
#   faultlat 20000          random 4 KiB faults: p50/p99, quiet and 2 threads
#   memwrite 1G at 4x       MB/s: first write, steady write, reread
#   chase 256M at 4x        random one-word reads (ns a load)
#   GAPBS bfs/pr -g 21 and XSBench small at half their footprint, when
#   their checkouts are given (fetched and built by you, never copied here)
# Each far run also reports the program's peak RSS (/usr/bin/time %M).
# usage: bench/ab/ab-one-host.sh OLD_TREE [RUNS=3] [GAPBS_DIR XSBENCH_DIR]
#   PARTS="micro programs" (default both) and PROGRAMS="bfs pagerank xsbench"
#   pick what runs (with RESULTS_DIR=... to add to an earlier run's folder).
#   OLD_TREE: `git worktree add /tmp/old COMMIT`, built with cargo build --release.
set -euo pipefail
cd "$(dirname "$0")/../.."
OLD=$(cd "$1" && pwd); RUNS=${2:-3}; GAPBS=${3:-}; XS=${4:-}
BENCH_COMMAND="bench/ab/ab-one-host.sh $*"
. bench/lib/results-dir.sh
results_dir ab-one-host
cargo build --release --quiet
make -C workloads >/dev/null
NEW=$PWD
W=$NEW/target/release/workloads
export OMP_NUM_THREADS=2
echo "old: $OLD ($(git -C "$OLD" rev-parse --short HEAD))  new: $NEW ($(git rev-parse --short HEAD))" | tee -a "$R/RUN.md"
# side: name, farmem binary, libfarmem dir, transport setting
sides=("ucx-old|$OLD/target/release|auto" "memfd|$NEW/target/release|auto" "socket|$NEW/target/release|socket")
rss() { awk '/^RSS/ {printf "%.0fM", $2/1024}'; }
PARTS=${PARTS:-micro programs}
PROGRAMS=${PROGRAMS:-bfs pagerank xsbench}
[[ " $PARTS " == *" micro "* ]] && for r in $(seq "$RUNS"); do
    for s in "${sides[@]}"; do
        IFS='|' read -r name T tr <<<"$s"
        # faultlat links libfarmem: point it at the side's library.
        echo "faultlat $name $r:"
        FARMEM_TRANSPORT=$tr FARMEM_LOCAL=320M LD_LIBRARY_PATH=$T "$W/faultlat" 20000 2>&1 \
            | grep -E '^(native|far)' | sed -E 's/ +/ /g; s/n=20000 //; s/p90=[ 0-9.]+us //'
        o=$( { FARMEM_TRANSPORT=$tr /usr/bin/time -f "RSS %M" "$T/farmem" run --local 256M -- "$W/memwrite" --size 1024 --passes 3; } 2>&1)
        echo "memwrite $name $r: $(echo "$o" | grep -E 'pass=' | awk '{printf "%s ", $4}') peak RSS $(echo "$o" | rss)"
        o=$( { FARMEM_TRANSPORT=$tr /usr/bin/time -f "RSS %M" "$T/farmem" run --local 64M -- "$W/chase" 268435456 4k 2000000; } 2>&1)
        echo "chase $name $r: $(echo "$o" | grep -oE 'ns=[0-9.]+' | head -1) peak RSS $(echo "$o" | rss)"
    done
done | tee -a "$R/micro.txt"
[ -n "$GAPBS" ] && [[ " $PARTS " == *" programs "* ]] || exit 0
progs=(
    "bfs|$GAPBS/bfs -g 21 -n 10|Average Time: *([0-9.]+)"
    "pagerank|$GAPBS/pr -g 21 -n 3|Average Time: *([0-9.]+)"
    "xsbench|$XS/openmp-threading/XSBench -s small -p 100000 -t 2|Runtime: *([0-9.]+)"
)
metric() { sed -nE "s/.*$1.*/\1/p" | tail -1; }
for p in "${progs[@]}"; do
    IFS='|' read -r name cmd re <<<"$p"
    [[ " $PROGRAMS " == *" $name "* ]] || continue
    # XSBench exits 1 when its checksum is not the default input's (any
    # -p other than its own): its time still counts.
    o=$( { /usr/bin/time -f "RSS %M" $cmd; } 2>&1 || true)
    peak=$(echo "$o" | awk '/^RSS/ {print $2}')
    echo "$name local: $(echo "$o" | metric "$re") s, peak RSS $((peak / 1024))M"
    for r in $(seq "$RUNS"); do
        for s in "${sides[@]}"; do
            IFS='|' read -r side T tr <<<"$s"
            o=$( { FARMEM_TRANSPORT=$tr /usr/bin/time -f "RSS %M" "$T/farmem" run --local $((peak / 2))K --stats -- $cmd; } 2>&1 || true)
            echo "$name $side $r: $(echo "$o" | metric "$re") s, fetched $(echo "$o" | sed -nE 's/ *fetched from backend +([^ ]+)/\1/p'), $(echo "$o" | grep -E 'fault latency' | sed -E 's/ +/ /g'), peak RSS $(echo "$o" | rss)"
        done
    done
done | tee -a "$R/programs.txt"
