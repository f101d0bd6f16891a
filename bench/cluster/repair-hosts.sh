#!/usr/bin/env bash
# Repair and leave over emulated hosts: three memory servers, each in a
# network namespace of its own (scripts/netns-hosts.sh) behind a link
# limited to RATE (default 10gbit, both ends), the client in a fourth. The
# program (bench/cluster/failover-gap.c) writes SIZE_MB at a 32M budget with
# two copies, then reads at random for 8 s; 4 s in, server 2 is killed
# (SIGKILL) or, with `drain`, stopped after starting with --drain. Pages
# cross the links over farmem's sockets (sealed, with the shared secret):
# no memory files between hosts, and no RDMA here.
# usage: bench/cluster/repair-hosts.sh [RUNS=1] [SIZE_MB=1024] [kill|drain] [RATE=10gbit]
# Needs root and iproute2.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODE=${3:-kill}
case $MODE in
    kill) SIG=KILL; DRAIN= ;;
    drain) SIG=TERM; DRAIN="--drain --drain-timeout 60" ;;
    *) echo "usage: $0 [RUNS] [SIZE_MB] [kill|drain] [RATE]" >&2; exit 2 ;;
esac
BENCH_COMMAND="bench/cluster/repair-hosts.sh $*"
. bench/lib/results-dir.sh
results_dir "repair-hosts-$MODE"
keep_output
RUNS=${1:-1}
SIZE=${2:-1024}
RATE=${4:-10gbit}
NAME=fmr
H=$PWD/scripts/netns-hosts.sh
cargo build --release --quiet
F=$PWD/target/release/farmem
T=$(mktemp -d)
SECRET=$T/secret
"$F" secret init --path "$SECRET" >/dev/null
cleanup() {
    kill $(jobs -p) 2>/dev/null || true
    bash "$H" down "$NAME" >/dev/null 2>&1 || true
    rm -rf "$T"
}
trap cleanup EXIT
bash "$H" up "$NAME" 3 "$RATE" "$RATE" >/dev/null
gcc -O2 -Wall -Wextra -Werror -Iinclude bench/cluster/failover-gap.c -Ltarget/release -lfarmem \
    -Wl,-rpath,"$PWD/target/release" -o "$T/gap"
echo "3 servers behind $RATE links, the client behind $RATE; $SIZE MiB, 2 copies, 32M local, signal $SIG to s2 4 s in"
for r in $(seq "$RUNS"); do
    for sig in none "$SIG"; do
        pids=() addrs=()
        for i in 1 2 3; do
            a=$(bash "$H" addr "$NAME" "s$i")
            # shellcheck disable=SC2086 # DRAIN is a list of options
            ip netns exec "$NAME-s$i" "$F" serve --listen "$a:7070" --capacity $((SIZE * 2))M \
                --secret-file "$SECRET" $DRAIN > "$T/s$i.out" 2>&1 &
            pids+=($!) addrs+=("$a:7070")
        done
        for i in 1 2 3; do until grep -qs listening "$T/s$i.out"; do sleep 0.05; done; done
        [ "$sig" = none ] || ( sleep 4; kill -"$sig" "${pids[1]}" ) &
        out=$(ip netns exec "$NAME-c" env FARMEM_SECRET_FILE="$SECRET" FARMEM_REPLICAS=2 \
            FARMEM_LOCAL=32M FARMEM_TIMEOUT_MS=1000 FARMEM_SERVERS="$(IFS=,; echo "${addrs[*]}")" \
            "$T/gap" "$SIZE" 8 2>&1 | grep -E 'reads=|is down|repair|transport' | tr '\n' ' ')
        echo "run $r, signal $sig: $out"
        [ "$sig" != TERM ] || { wait "${pids[1]}" 2>/dev/null || true; grep -ah "drain" "$T/s2.out" || true; }
        kill "${pids[@]}" 2>/dev/null || true
        j=$(jobs -p); [ -z "$j" ] || wait $j 2>/dev/null || true
    done
done
