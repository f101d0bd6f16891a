#!/usr/bin/env bash
# Servers leaving and joining a running job: the pages moved against the
# least that had to move, and the program's time against a run where the
# servers stay put. integrity_omp (tests/programs) writes, updates and
# checks SIZE_MB at an 8M budget over four servers with two copies (so 2 x
# SIZE of page copies, a quarter on each server):
#   steady   no change (the time to compare with);
#   leave    one server stopped with --drain 1.5 s in: it should move its
#            own copies (its log says how many pages it held) and no other;
#   join     a fifth server added with `farmem join` 1.5 s in: it should
#            take a fifth of the page copies;
#   rolling  each of the four stopped with --drain and started again at
#            its address, one at a time.
# usage: bench/cluster/membership.sh [RUNS=1] [SIZE_MB=128]
# Pages move over the default page path (memory files on one host) unless
# FARMEM_TRANSPORT says otherwise.
set -euo pipefail
cd "$(dirname "$0")/../.."
BENCH_COMMAND="bench/cluster/membership.sh $*"
. bench/lib/results-dir.sh
results_dir membership
keep_output
RUNS=${1:-1}
SIZE=${2:-128}
export CAPACITY=${CAPACITY:-1G}
export SERVE_ARGS="--drain --drain-timeout 60"
cargo build --release --quiet
F=$PWD/target/release/farmem
T=$(mktemp -d)
source bench/lib/servers.sh
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$T"' EXIT
gcc -O2 -Wall -Wextra -Werror -fopenmp -Iinclude tests/programs/integrity_omp.c -Ltarget/release \
    -lfarmem -lm -Wl,-rpath,"$PWD/target/release" -o "$T/iomp"
echo "integrity_omp $SIZE MiB at 8M, 2 threads, 2 copies over 4 servers; $((SIZE * 2 * 256)) page copies, a quarter $((SIZE * 2 * 64)), a fifth $((SIZE * 2 * 256 / 5))"
for r in $(seq "$RUNS"); do
    for mode in steady leave join rolling; do
        start_servers 5 "$T"
        pids=("${SERVER_PIDS[@]}") addrs=("${SERVER_ADDRS[@]}")
        list=$(IFS=,; echo "${addrs[*]:0:4}")
        t0=$(date +%s.%N)
        FARMEM_LOCAL=8M FARMEM_SERVERS=$list FARMEM_REPLICAS=2 FARMEM_STATS=1 OMP_NUM_THREADS=2 \
            "$T/iomp" "$SIZE" > "$T/out" 2> "$T/err" &
        prog=$!
        sleep 1.5
        case $mode in
            leave)
                kill -TERM "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true
                grep -ah "draining:" "$T/s0.out" | sed 's/.*INFO /  server log: /' ;;
            join) "$F" join "$prog" "${addrs[4]}" | sed 's/^/  /' ;;
            rolling)
                for i in 0 1 2 3; do
                    kill -TERM "${pids[$i]}"; wait "${pids[$i]}" 2>/dev/null || true
                    # shellcheck disable=SC2086 # SERVE_ARGS is a list of options
                    "$F" serve --listen "${addrs[$i]}" --capacity "$CAPACITY" $SERVE_ARGS > "$T/b$i.out" 2>&1 &
                    pids[i]=$!
                    sleep 2
                done ;;
        esac
        wait "$prog"
        t1=$(date +%s.%N)
        echo "run $r, $mode: $(echo "$t1 - $t0" | bc) s; $(grep -h mismatches "$T/out")"
        grep -ahE "repair:|rebalance:|has left|joined" "$T/err" | sed 's/^/  /' || true
        kill "${pids[@]}" 2>/dev/null || true
        j=$(jobs -p); [ -z "$j" ] || wait $j 2>/dev/null || true
    done
done
