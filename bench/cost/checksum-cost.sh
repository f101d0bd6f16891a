#!/usr/bin/env bash
# The cost of end-to-end page checks (FARMEM_CHECKSUM, FARMEM_INTEGRITY):
# the same runs with no check, a CRC32C and a keyed MAC, alternating, in
# one invocation, on each page path given (default: memfd and socket).
#   memwrite 1G at 4x under `farmem run --local 256M`: MB/s per pass
#     (pass 1 writes, later passes reread and rewrite: every fetch is checked,
#     every write-back summed), and the run's fault latency p50/p99
#   faultlat 20000 random far faults through the C API (p50/p99)
#   the check itself: ns a page for each kind, computed in a loop
#     (`farmem`'s own figure is the difference of the runs above)
# usage: bench/cost/checksum-cost.sh [RUNS=3] [TRANSPORTS="memfd socket"]
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${1:-3}
TRANSPORTS=${2:-memfd socket}
BENCH_COMMAND="bench/cost/checksum-cost.sh $*"
. bench/lib/results-dir.sh
results_dir checksum-cost
cargo build --release --quiet
make -C workloads >/dev/null
F=target/release/farmem
W=target/release/workloads
checks=("off|0|crc32c" "crc32c|1|crc32c" "mac|1|mac")
for t in $TRANSPORTS; do
    for r in $(seq "$RUNS"); do
        for c in "${checks[@]}"; do
            IFS='|' read -r name ck kind <<<"$c"
            out=$(FARMEM_TRANSPORT=$t FARMEM_CHECKSUM=$ck FARMEM_INTEGRITY=$kind "$F" run --local 256M --stats -- "$W/memwrite" --size 1024 --passes 3 2>&1)
            passes=$(echo "$out" | grep -E 'pass=' | awk '{printf "%s ", $4}')
            lat=$(echo "$out" | grep 'fault latency' | sed -E 's/.*max +//')
            echo "memwrite $t $name run $r: $passes| fault p50/p90/p99/max $lat"
        done
    done
    for r in $(seq "$RUNS"); do
        for c in "${checks[@]}"; do
            IFS='|' read -r name ck kind <<<"$c"
            echo "faultlat $t $name run $r: $(FARMEM_TRANSPORT=$t FARMEM_CHECKSUM=$ck FARMEM_INTEGRITY=$kind FARMEM_LOCAL=320M "$W/faultlat" 20000 2>&1 | grep -E '^far' | sed -E 's/ +/ /g; s/n=20000 //; s/p90=[ 0-9.]+us //' | tr '\n' ';')"
        done
    done
done | tee "$R/runs.txt"
