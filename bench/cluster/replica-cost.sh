#!/usr/bin/env bash
# The cost of replicas and checksums, side by side in one run: three
# `farmem serve` processes on loopback TCP; for replicas 1 and 2, checksums
# on and off (alternating, RUNS rounds):
#   memwrite 1G at 4x under `farmem run --local 256M`: MB/s of the write
#     pass, the two rewrite passes and the reread, and bytes written back
#     (the network carries that times the replicas)
#   faultlat 20000 random far faults through the C API: p50/p99 of a read
#     fault with no eviction, and with eviction at 4x
# usage: bench/cluster/replica-cost.sh [RUNS=2]
set -euo pipefail
cd "$(dirname "$0")/../.."
BENCH_COMMAND="bench/cluster/replica-cost.sh $*"
. bench/lib/results-dir.sh
results_dir replica-cost
keep_output
RUNS=${1:-2}
cargo build --release --quiet
make -C workloads >/dev/null
F=$PWD/target/release/farmem
W=$PWD/target/release/workloads
T=$(mktemp -d)
source bench/lib/servers.sh
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$T"' EXIT
CAPACITY=4G start_servers 3 "$T"
S=$SERVERS
for r in $(seq "$RUNS"); do
    for rep in 1 2; do
        for ck in 1 0; do
            out=$(FARMEM_REPLICAS=$rep FARMEM_CHECKSUM=$ck "$F" run --local 256M --servers "$S" --stats -- \
                "$W/memwrite" --size 1024 --passes 3 2>&1)
            passes=$(echo "$out" | grep -E '^pass=' | awk '{printf "%s ", $4}')
            wb=$(echo "$out" | awk '/written back/ {print $3}')
            echo "memwrite replicas=$rep checksum=$ck run $r: $passes| written back $wb"
            fl=$(FARMEM_REPLICAS=$rep FARMEM_CHECKSUM=$ck FARMEM_SERVERS=$S FARMEM_LOCAL=320M \
                "$W/faultlat" 20000 2>&1 | grep -E '^far fetch, read|^far fetch \+ evict, read' |
                sed -E 's/ +/ /g; s/n=20000 //; s/p90=[ 0-9.]+us //' | tr '\n' ';')
            echo "faultlat replicas=$rep checksum=$ck run $r: $fl"
        done
    done
done
