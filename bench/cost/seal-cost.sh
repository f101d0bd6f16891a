#!/usr/bin/env bash
# The cost of sealing every frame after the handshake (farmem_wire::seal):
# two memory servers on loopback TCP, one with a shared secret (its
# connections authenticated and sealed) and one without (open), the same
# runs against each, alternating, in one invocation, over farmem's sockets.
#   memwrite 1G at 4x under `farmem run --local 256M`: MB/s per pass
#   faultlat 20000 random far faults through the C API (p50/p99)
# Loopback flatters both sides alike: no wire time, so the tag's share of a
# fault is at its largest here.
# usage: bench/cost/seal-cost.sh [RUNS=3]
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${1:-3}
BENCH_COMMAND="bench/cost/seal-cost.sh $*"
. bench/lib/results-dir.sh
results_dir seal-cost
cargo build --release --quiet
make -C workloads >/dev/null
F=$PWD/target/release/farmem
W=$PWD/target/release/workloads
home=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$home"' EXIT
HOME=$home "$F" secret init --path "$home/secret" >/dev/null
serve() { # $1: log file, then extra arguments
    local log=$1; shift
    env -u FARMEM_SECRET_FILE HOME="$home" "$F" serve --listen 127.0.0.1:0 --capacity 3G "$@" >"$log" 2>/dev/null &
    pids+=($!)
}
addr() { # the address in the banner of log $1
    for _ in $(seq 100); do [ -s "$1" ] && break; sleep 0.1; done
    awk 'NR==1 {print $5}' "$1"
}
serve "$home/sealed.log" --secret-file "$home/secret"
serve "$home/open.log"
sealed=$(addr "$home/sealed.log")
open=$(addr "$home/open.log")
echo "servers: sealed $sealed, open $open"
for r in $(seq "$RUNS"); do
    for kind in open sealed; do
        if [ $kind = sealed ]; then env=(FARMEM_SERVERS="$sealed" FARMEM_SECRET_FILE="$home/secret"); else env=(FARMEM_SERVERS="$open"); fi
        out=$(env -u FARMEM_SECRET_FILE HOME="$home" "${env[@]}" FARMEM_TRANSPORT=socket "$F" run --local 256M --stats -- "$W/memwrite" --size 1024 --passes 3 2>&1)
        passes=$(echo "$out" | grep -E 'pass=' | awk '{printf "%s ", $4}')
        lat=$(echo "$out" | grep 'fault latency' | sed -E 's/.*max +//')
        echo "memwrite $kind run $r: $passes| fault p50/p90/p99/max $lat"
    done
done | tee "$R/runs.txt"
for r in $(seq "$RUNS"); do
    for kind in open sealed; do
        if [ $kind = sealed ]; then env=(FARMEM_SERVERS="$sealed" FARMEM_SECRET_FILE="$home/secret"); else env=(FARMEM_SERVERS="$open"); fi
        echo "faultlat $kind run $r: $(env -u FARMEM_SECRET_FILE HOME="$home" "${env[@]}" FARMEM_TRANSPORT=socket FARMEM_LOCAL=320M "$W/faultlat" 20000 2>&1 | grep -E '^far' | sed -E 's/ +/ /g; s/n=20000 //; s/p90=[ 0-9.]+us //' | tr '\n' ';')"
    done
done | tee -a "$R/runs.txt"
