#!/usr/bin/env bash
# Redundancy side by side, in one run: no redundancy (replicas:1),
# replicas:2, ec:4+2 and ec:8+2 (FARMEM_REDUNDANCY), over ten memory
# servers, each in a network namespace of its own behind a link limited to
# RATE (default 10gbit, both ends; scripts/netns-hosts.sh), the client in
# another. Pages cross the links over farmem's sealed sockets (no memory
# files between hosts, no RDMA here). Per mode, alternating, RUNS rounds:
#   hold      512 MiB written at a 16M budget and held: the pages the servers
#             store (their metrics) per page written (server memory per
#             byte stored)
#   memwrite  1G at 4x (--local 256M): MB/s of its write pass, two rewrite
#             passes and the reread; bytes written back, and the bytes the
#             servers received and sent (their metrics: the network's cost
#             of the redundancy, parity reads included)
#   faultlat  20000 random faults: read fault p50/p99 with no eviction, and
#             with eviction at 4x (a write-back on the fault path)
#   bfs, mg   GAPBS BFS (-g 20 -n 4) and NPB MG at half their all-local peak
#             RSS, when GAPBS_DIR and MG_BINARY are given (fetched, never
#             copied here)
# usage: bench/cluster/redundancy-cost.sh [RUNS=1] [RATE=10gbit] [GAPBS_DIR] [MG_BINARY]
# Needs root and iproute2.
set -euo pipefail
cd "$(dirname "$0")/../.."
BENCH_COMMAND="bench/cluster/redundancy-cost.sh $*"
. bench/lib/results-dir.sh
results_dir redundancy-cost
keep_output
RUNS=${1:-1}
RATE=${2:-10gbit}
GAPBS=${3:-}
MG=${4:-}
NAME=fmec
N=10
H=$PWD/scripts/netns-hosts.sh
cargo build --release --quiet
make -C workloads >/dev/null
F=$PWD/target/release/farmem
W=$PWD/target/release/workloads
T=$(mktemp -d)
SECRET=$T/secret
"$F" secret init --path "$SECRET" >/dev/null
cleanup() {
    kill $(jobs -p) 2>/dev/null || true
    bash "$H" down "$NAME" >/dev/null 2>&1 || true
    rm -rf "$T"
}
trap cleanup EXIT
bash "$H" up "$NAME" "$N" "$RATE" "$RATE" >/dev/null
gcc -O2 -Wall -Wextra -Werror -Iinclude tests/programs/hold_far.c -Ltarget/release -lfarmem \
    -Wl,-rpath,"$PWD/target/release" -o "$T/hold"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
addrs=()
for i in $(seq "$N"); do
    a=$(bash "$H" addr "$NAME" "s$i")
    ip netns exec "$NAME-s$i" "$F" serve --listen "$a:7070" --capacity 3G --secret-file "$SECRET" \
        --metrics 127.0.0.1:9090 --log-level warn > "$T/s$i.out" 2>&1 &
    addrs+=("$a:7070")
done
for i in $(seq "$N"); do until grep -qs "metrics on" "$T/s$i.out"; do sleep 0.05; done; done
SERVERS=$(IFS=,; echo "${addrs[*]}")
client() { ip netns exec "$NAME-c" env FARMEM_SECRET_FILE="$SECRET" FARMEM_SERVERS="$SERVERS" \
    FARMEM_TRANSPORT=socket FARMEM_TIMEOUT_MS=5000 "$@"; }
# The sum of metric $1 over the servers.
metric() {
    local sum=0 i n
    for i in $(seq "$N"); do
        n=$(ip netns exec "$NAME-s$i" curl -s http://127.0.0.1:9090/metrics | awk -v m="$1" '$1 == m {print $2}')
        sum=$((sum + ${n:-0}))
    done
    echo "$sum"
}
stored() { metric farmem_stored_pages; }
# The bytes the servers received and sent while "$@" ran, in MiB.
traffic() {
    local r0 s0 r1 s1
    r0=$(metric farmem_received_bytes_total) s0=$(metric farmem_sent_bytes_total)
    "$@"
    r1=$(metric farmem_received_bytes_total) s1=$(metric farmem_sent_bytes_total)
    echo "servers received $(( (r1 - r0) >> 20 ))M, sent $(( (s1 - s0) >> 20 ))M" > "$T/traffic"
}
# Wall seconds of a command (its output discarded).
wall() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N); awk -v s="$s" -v e="$e" 'BEGIN {printf "%.2f", e - s}'; }
peak_mb() { { /usr/bin/time -v "$@" >/dev/null; } 2>&1 | awk -F: '/Maximum resident set size/ {gsub(/ /,"",$2); print int($2 / 1024)}'; }
echo "$N servers behind $RATE links, the client behind $RATE; sealed sockets; $(nproc) CPUs"
bfs_local= mg_local=
if [ -n "$GAPBS" ]; then
    bfs_local=$(( $(peak_mb "$GAPBS/bfs" -g 20 -n 1) / 2 ))
    echo "bfs all-local: $(wall "$GAPBS/bfs" -g 20 -n 4) s (graph build and 4 trials); at 50%: --local ${bfs_local}M"
fi
if [ -n "$MG" ]; then
    mg_local=$(( $(peak_mb "$MG") / 2 ))
    echo "mg all-local: $("$MG" | awk '/Time in seconds/ {print $NF}') s; at 50%: --local ${mg_local}M"
fi
for r in $(seq "$RUNS"); do
    for mode in replicas:1 replicas:2 ec:4+2 ec:8+2; do
        export FARMEM_REDUNDANCY=$mode
        # hold: the servers' stored pages while 512 MiB (131072 pages) is held.
        rm -f "$T/go"; mkfifo "$T/go"
        client env FARMEM_LOCAL=16M FARMEM_REDUNDANCY="$mode" "$T/hold" 512 < "$T/go" > "$T/hold.out" 2>&1 &
        hold=$!
        exec 3>"$T/go"
        until grep -qs "written pages" "$T/hold.out" || ! kill -0 "$hold" 2>/dev/null; do sleep 0.1; done
        s=$(stored)
        echo go >&3; exec 3>&-
        wait "$hold" || true
        echo "$mode run $r hold: $s pages stored for 131072 written ($(awk -v s="$s" 'BEGIN {printf "%.3f", s / 131072}')x); $(grep -o 'mismatches=[0-9]*' "$T/hold.out")"
        traffic client env FARMEM_REDUNDANCY="$mode" "$F" run --local 256M --stats -- "$W/memwrite" --size 1024 --passes 3 > "$T/out" 2>&1
        out=$(cat "$T/out")
        echo "$mode run $r memwrite: $(echo "$out" | grep -E '^pass=' | awk '{printf "%s ", $4}')| written back $(echo "$out" | awk '/written back/ {print $3}'); $(cat "$T/traffic")"
        fl=$(client env FARMEM_REDUNDANCY="$mode" FARMEM_LOCAL=320M "$W/faultlat" 20000 2>&1 |
            grep -E '^far fetch, read|^far fetch \+ evict, read' | sed -E 's/ +/ /g; s/n=20000 //; s/p90=[ 0-9.]+us //' | tr '\n' ';')
        echo "$mode run $r faultlat: $fl"
        if [ -n "$bfs_local" ]; then
            s0=$(date +%s.%N)
            traffic client env FARMEM_REDUNDANCY="$mode" "$F" run --local "${bfs_local}M" --stats -- "$GAPBS/bfs" -g 20 -n 4 > "$T/out" 2>&1
            s1=$(date +%s.%N)
            o=$(cat "$T/out")
            echo "$mode run $r bfs: $(awk -v s="$s0" -v e="$s1" 'BEGIN {printf "%.2f", e - s}') s wall | $(echo "$o" | grep -E '^ *(fetched|written back)' | sed -E 's/ +/ /g' | tr '\n' ';') $(cat "$T/traffic")"
        fi
        if [ -n "$mg_local" ]; then
            traffic client env FARMEM_REDUNDANCY="$mode" "$F" run --local "${mg_local}M" --stats -- "$MG" > "$T/out" 2>&1
            o=$(cat "$T/out")
            echo "$mode run $r mg: $(echo "$o" | awk '/Time in seconds/ {print $NF}') s, $(echo "$o" | grep -qE 'Verification += +SUCCESSFUL' && echo verified || echo NOT-VERIFIED) | $(echo "$o" | grep -E '^ *(fetched|written back)' | sed -E 's/ +/ /g' | tr '\n' ';') $(cat "$T/traffic")"
        fi
    done
done
