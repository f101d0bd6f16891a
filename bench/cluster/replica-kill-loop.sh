#!/usr/bin/env bash
# Kill a memory server at a random moment, over and over, under an
# unmodified OpenMP program with FARMEM_REPLICAS=2: three `farmem serve`
# processes, integrity_omp over SIZE_MB at LOCAL (8x by default), one server
# killed with SIGKILL after a random 0.1-3 s. Every run must report
# mismatches=0; the script stops at the first that does not.
# usage: bench/cluster/replica-kill-loop.sh [ROUNDS=10] [SIZE_MB=128] [LOCAL=16M]
set -euo pipefail
cd "$(dirname "$0")/../.."
BENCH_COMMAND="bench/cluster/replica-kill-loop.sh $*"
. bench/lib/results-dir.sh
results_dir replica-kill-loop
keep_output
ROUNDS=${1:-10}
SIZE=${2:-128}
LOCAL=${3:-16M}
cargo build --release --quiet
F=$PWD/target/release/farmem
T=$(mktemp -d)
source bench/lib/servers.sh
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$T"' EXIT
gcc -O2 -fopenmp -Iinclude tests/programs/integrity_omp.c -Ltarget/release -lfarmem -lm \
    -Wl,-rpath,"$PWD/target/release" -o "$T/integrity_omp"
ok=0
for r in $(seq "$ROUNDS"); do
    start_servers 3 "$T"
    pids=("${SERVER_PIDS[@]}") addrs=("${SERVER_ADDRS[@]}")
    victim=$((RANDOM % 3))
    delay=$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 0.1 + 2.9 * r / 32768 }')
    ( sleep "$delay"; kill -9 "${pids[$victim]}" ) &
    start=$(date +%s.%N)
    out=$(FARMEM_REPLICAS=2 FARMEM_STATS=1 FARMEM_LOCAL=$LOCAL OMP_NUM_THREADS=2 \
        FARMEM_SERVERS=$(IFS=,; echo "${addrs[*]}") "$T/integrity_omp" "$SIZE" 2>&1) || true
    secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
    line=$(echo "$out" | grep -o 'mismatches=[0-9]*' || echo "no result")
    down=$(echo "$out" | grep -c 'is down' || true)
    echo "round $r: killed ${addrs[$victim]} after ${delay}s; $line; warnings=$down; ${secs}s"
    kill "${pids[@]}" 2>/dev/null || true
    # Only this round's jobs: a bare `wait` would also wait for the tee
    # that keeps the output, which ends only when this script does.
    j=$(jobs -p); [ -z "$j" ] || wait $j 2>/dev/null || true
    [ "$line" = "mismatches=0" ] || { echo "FAILED"; echo "$out" | tail -20; exit 1; }
    ok=$((ok + 1))
done
echo "$ok of $ROUNDS rounds: every byte right"
