#!/usr/bin/env bash
# Repair after a loss, or a server leaving: how fast the copies are made
# again, how many pages move, and what the program loses meanwhile. bench/cluster/failover-gap.c writes SIZE_MB
# of far memory at a 32M budget and then reads it at random for 8 s, with
# FARMEM_REPLICAS=2 over three servers; 4 s in, one server is killed
# (SIGKILL), or with `drain` stopped (SIGTERM) after starting every server
# with --drain, so that it leaves. The repair line gives the pages copied
# and the pass's length (the rate); the leaving server's own log gives the
# pages it held (a leave should move those and no others); the reads done
# against a run with no loss, side by side, give the program's slowdown.
# usage: bench/cluster/repair-rate.sh [RUNS=2] [SIZE_MB=1024] [kill|drain]
# SECS (default 8) sets how long the program reads: a coded rebuild may
# need longer than 8 s to end, and its repair line comes only when it does.
# REDUNDANCY (default replicas:2) and NSERVERS (default 3) change the
# redundancy and the servers, e.g. REDUNDANCY=ec:4+2 NSERVERS=7 (one more
# server than a row has places, so that a lost server's places have
# somewhere to go).
# Pages go over sockets unless FARMEM_TRANSPORT says otherwise, as in
# failover-gap.sh. On memory files a killed server is found by the client's
# look at its servers (four times a second) and repaired the same way.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODE=${3:-kill}
case $MODE in
    kill) SIG=KILL ;;
    drain) SIG=TERM; export SERVE_ARGS="--drain --drain-timeout 60" ;;
    *) echo "usage: $0 [RUNS] [SIZE_MB] [kill|drain]" >&2; exit 2 ;;
esac
BENCH_COMMAND="bench/cluster/repair-rate.sh $*"
. bench/lib/results-dir.sh
results_dir "repair-rate-$MODE"
keep_output
RUNS=${1:-2}
SIZE=${2:-1024}
export FARMEM_TRANSPORT=${FARMEM_TRANSPORT:-socket}
REDUNDANCY=${REDUNDANCY:-replicas:2}
NSERVERS=${NSERVERS:-3}
# Two copies of SIZE over two servers after the loss: each holds SIZE.
export CAPACITY=${CAPACITY:-$((SIZE * 2))M}
cargo build --release --quiet
F=$PWD/target/release/farmem
T=$(mktemp -d)
source bench/lib/servers.sh
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$T"' EXIT
gcc -O2 -Wall -Wextra -Werror -Iinclude bench/cluster/failover-gap.c -Ltarget/release -lfarmem \
    -Wl,-rpath,"$PWD/target/release" -o "$T/gap"
echo "transport $FARMEM_TRANSPORT, $SIZE MiB written then read at random for ${SECS:-8} s, 32M local, $NSERVERS servers, $REDUNDANCY"
for r in $(seq "$RUNS"); do
    for sig in none "$SIG"; do
        start_servers "$NSERVERS" "$T"
        pids=("${SERVER_PIDS[@]}")
        [ "$sig" = none ] || ( sleep 4; kill -"$sig" "${pids[1]}" ) &
        out=$(FARMEM_REDUNDANCY=$REDUNDANCY FARMEM_LOCAL=32M FARMEM_TIMEOUT_MS=1000 FARMEM_SERVERS=$SERVERS \
            "$T/gap" "$SIZE" "${SECS:-8}" 2>&1 | grep -E 'reads=|is down|repair' | tr '\n' ' ')
        echo "run $r, signal: $sig: $out"
        [ "$sig" != TERM ] || { wait "${pids[1]}" 2>/dev/null || true; grep -ah drain "$T/s1.out" || true; }
        kill "${pids[@]}" 2>/dev/null || true
        # Only this round's jobs (see keep_output).
        j=$(jobs -p); [ -z "$j" ] || wait $j 2>/dev/null || true
    done
done
