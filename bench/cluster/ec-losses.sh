#!/usr/bin/env bash
# A program's wall time at ec:4+2 with no server lost, one, and two
# (SIGKILL mid-run), over six `farmem serve` processes on this host: the
# integrity program of the system tests (tests/programs/integrity_omp.c,
# two OpenMP threads writing, updating at random and checking SIZE_MB at an
# 8M budget). With OLD_TREE (a checkout built with `cargo build
# --release`), the same runs with its farmem, alternating, so that both
# sides meet the same host. Each line: the tree, the losses, the wall time,
# the program's own check, its fault latency line.
# usage: bench/cluster/ec-losses.sh [RUNS=1] [SIZE_MB=64] [OLD_TREE]
set -euo pipefail
cd "$(dirname "$0")/../.."
BENCH_COMMAND="bench/cluster/ec-losses.sh $*"
. bench/lib/results-dir.sh
results_dir ec-losses
keep_output
RUNS=${1:-1}
SIZE=${2:-64}
OLD=${3:-}
cargo build --release --quiet
T=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$T"' EXIT
trees=(new)
build() { # build NAME TREE
    gcc -O2 -Wall -Wextra -Werror -fopenmp -I"$2/include" tests/programs/integrity_omp.c \
        -L"$2/target/release" -lfarmem -lm -Wl,-rpath,"$2/target/release" -o "$T/integrity-$1"
}
build new "$PWD"
if [ -n "$OLD" ]; then
    [ -x "$OLD/target/release/farmem" ] || { echo "$OLD/target/release/farmem is missing: build OLD_TREE with cargo build --release" >&2; exit 2; }
    build old "$(cd "$OLD" && pwd)"
    trees=(old new)
    echo "old: $(git -C "$OLD" rev-parse --short HEAD), new: $(git rev-parse --short HEAD)"
fi
source bench/lib/servers.sh
echo "6 servers on loopback TCP, ec:4+2, $SIZE MiB, 8M local, 2 threads; $(nproc) CPUs"
for r in $(seq "$RUNS"); do
    for losses in 0 1 2; do
        for tree in "${trees[@]}"; do
            if [ "$tree" = old ]; then F=$OLD/target/release/farmem; else F=$PWD/target/release/farmem; fi
            start_servers 6 "$T"
            start=$(date +%s%N)
            FARMEM_LOCAL=8M FARMEM_SERVERS=$SERVERS FARMEM_REDUNDANCY=ec:4+2 FARMEM_STATS=1 \
                FARMEM_TIMEOUT_MS=1000 OMP_NUM_THREADS=2 "$T/integrity-$tree" "$SIZE" > "$T/out" 2> "$T/err" &
            prog=$!
            # The same moments as the system test: 0.8 s apart.
            for ((l = 0; l < losses; l++)); do
                sleep 0.8
                kill -KILL "${SERVER_PIDS[$((l * 3))]}"
            done
            rc=0; wait "$prog" || rc=$?
            ms=$((($(date +%s%N) - start) / 1000000))
            echo "$tree, $losses lost, run $r: wall ${ms} ms, rc $rc, $(grep -o 'mismatches=[0-9]*' "$T/out" || echo 'no check line'); $(grep -m1 'fault latency' "$T/err" | sed 's/  */ /g')"
            kill "${SERVER_PIDS[@]}" 2>/dev/null || true
            j=$(jobs -p); [ -z "$j" ] || wait $j 2>/dev/null || true
        done
    done
done
