#!/usr/bin/env bash
# Time from a memory server's death to the next page served from its copy:
# bench/cluster/failover-gap.c reads randomly over 256M at a 32M budget for 6 s with
# FARMEM_REPLICAS=2 over three servers; one server is killed (SIGKILL, or
# SIGSTOP to make it hang) 3 s in. The longest gap between two reads is the
# stall. A run with no kill gives the gap a healthy run has anyway.
# usage: bench/cluster/failover-gap.sh [RUNS=3]
# Pages go over sockets unless FARMEM_TRANSPORT says otherwise: on one host
# the default, memory files, keeps a killed server's chunks readable through
# the client's descriptors, so nothing would fail over to be measured.
set -euo pipefail
cd "$(dirname "$0")/../.."
BENCH_COMMAND="bench/cluster/failover-gap.sh $*"
. bench/lib/results-dir.sh
results_dir failover-gap
keep_output
RUNS=${1:-3}
export FARMEM_TRANSPORT=${FARMEM_TRANSPORT:-socket}
cargo build --release --quiet
F=$PWD/target/release/farmem
T=$(mktemp -d)
source bench/lib/servers.sh
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$T"' EXIT
gcc -O2 -Wall -Wextra -Werror -Iinclude bench/cluster/failover-gap.c -Ltarget/release -lfarmem \
    -Wl,-rpath,"$PWD/target/release" -o "$T/gap"
for r in $(seq "$RUNS"); do
    for sig in none KILL STOP; do
        start_servers 3 "$T"
        pids=("${SERVER_PIDS[@]}") addrs=("${SERVER_ADDRS[@]}")
        # The loop starts after the region is written (about 1 s at most here).
        [ "$sig" = none ] || ( sleep 4; kill -"$sig" "${pids[1]}" ) &
        out=$(FARMEM_REPLICAS=2 FARMEM_LOCAL=32M FARMEM_TIMEOUT_MS=1000 \
            FARMEM_SERVERS=$(IFS=,; echo "${addrs[*]}") "$T/gap" 256 6 2>&1 | grep -E 'reads=|is down' | tr '\n' ' ')
        echo "run $r, signal $sig: $out"
        kill -CONT "${pids[@]}" 2>/dev/null || true
        kill "${pids[@]}" 2>/dev/null || true
        # Only this round's jobs: a bare `wait` would also wait for the tee
        # that keeps the output, which ends only when this script does.
        j=$(jobs -p); [ -z "$j" ] || wait $j 2>/dev/null || true
    done
done
