#!/usr/bin/env bash
# Read fault latency with every server alive, and with one lost, for
# replicas:2 and ec:4+2 over six `farmem serve` processes on loopback TCP
# (sockets), side by side (RUNS rounds). bench/cluster/degraded-read.c
# writes SIZE_MB at a 16M budget with prefetch off, then reads one word of
# every page in random order; with `kill`, server 2 is killed (SIGKILL)
# before the reads. About a sixth of the reads are then degraded: read from
# the other copy, or decoded from 4 of the row's 5 other pages. A decoded
# read waits for K servers, as every read would if a page were split into
# K fragments: this is what coding whole pages saves (docs/design.md,
# Erasure coding).
# usage: bench/cluster/degraded-read.sh [RUNS=2] [SIZE_MB=256]
set -euo pipefail
cd "$(dirname "$0")/../.."
BENCH_COMMAND="bench/cluster/degraded-read.sh $*"
. bench/lib/results-dir.sh
results_dir degraded-read
keep_output
RUNS=${1:-2}
SIZE=${2:-256}
cargo build --release --quiet
F=$PWD/target/release/farmem
T=$(mktemp -d)
source bench/lib/servers.sh
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$T"' EXIT
gcc -O2 -Wall -Wextra -Werror -Iinclude bench/cluster/degraded-read.c -Ltarget/release -lfarmem \
    -Wl,-rpath,"$PWD/target/release" -o "$T/read"
echo "6 servers on loopback TCP, sockets, $SIZE MiB, 16M local, prefetch off; $(nproc) CPUs"
for r in $(seq "$RUNS"); do
    for mode in replicas:2 ec:4+2; do
        for loss in none kill; do
            CAPACITY=1G start_servers 6 "$T"
            rm -f "$T/go"; mkfifo "$T/go"
            FARMEM_TRANSPORT=socket FARMEM_REDUNDANCY=$mode FARMEM_LOCAL=16M FARMEM_PREFETCH=0 \
                FARMEM_TIMEOUT_MS=2000 FARMEM_SERVERS=$SERVERS "$T/read" "$SIZE" < "$T/go" > "$T/out" 2>&1 &
            prog=$!
            exec 3>"$T/go"
            until grep -qs written "$T/out" || ! kill -0 "$prog" 2>/dev/null; do sleep 0.1; done
            [ "$loss" = none ] || { kill -KILL "${SERVER_PIDS[2]}"; sleep 0.5; }
            echo go >&3; exec 3>&-
            wait "$prog" || true
            echo "$mode, loss $loss, run $r: $(grep -E '^reads=' "$T/out")"
            kill "${SERVER_PIDS[@]}" 2>/dev/null || true
            j=$(jobs -p); [ -z "$j" ] || wait $j 2>/dev/null || true
        done
    done
done
