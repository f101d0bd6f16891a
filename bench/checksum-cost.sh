#!/usr/bin/env bash
# The cost of end-to-end page checksums (FARMEM_CHECKSUM): the same runs
# with checksums on and off, alternating, in one invocation.
#   memwrite 1G at 4x under `farmem run --local 256M`: MB/s per pass
#     (pass 1 writes, later passes reread and rewrite: every fetch is checked,
#     every write-back summed), and the run's fault latency p50/p99
#   faultlat 20000 random far faults through the C API (p50/p99)
# usage: bench/checksum-cost.sh [RUNS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
cargo build --release --quiet
make -C workloads >/dev/null
F=target/release/farmem
W=target/release/workloads
for r in $(seq "$RUNS"); do
    for ck in 1 0; do
        out=$(FARMEM_CHECKSUM=$ck "$F" run --local 256M --stats -- "$W/memwrite" --size 1024 --passes 3 2>&1)
        passes=$(echo "$out" | grep -E 'pass=' | awk '{printf "%s ", $4}')
        lat=$(echo "$out" | grep 'fault latency' | sed -E 's/.*max +//')
        echo "memwrite checksum=$ck run $r: $passes| fault p50/p90/p99/max $lat"
    done
done
for r in $(seq "$RUNS"); do
    for ck in 1 0; do
        echo "faultlat checksum=$ck run $r: $(FARMEM_CHECKSUM=$ck FARMEM_LOCAL=320M "$W/faultlat" 20000 2>&1 | grep -E '^far' | sed -E 's/ +/ /g; s/n=20000 //; s/p90=[ 0-9.]+us //' | tr '\n' ';')"
    done
done
