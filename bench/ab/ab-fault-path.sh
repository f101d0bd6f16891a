#!/usr/bin/env bash
# Quick A/B of the fault path: an OLD tree's farmem against this one, same
# workload sources (copied into OLD and built there), runs alternating.
#   memwrite 1G at 4x under `farmem run --local 256M` (MB/s per pass)
#   faultlat 20000 through the C API and its embedded server
# usage: bench/ab/ab-fault-path.sh OLD_TREE [RUNS=3]
#   OLD_TREE: a checkout of the baseline commit (e.g. `git worktree add
#   /tmp/old COMMIT`), built with `cargo build --release`.
set -euo pipefail
cd "$(dirname "$0")/../.."
OLD=$(cd "$1" && pwd)
RUNS=${2:-3}
NEW=$PWD
cargo build --release --quiet
make -C workloads >/dev/null
cp workloads/*.c workloads/*.h workloads/Makefile "$OLD/workloads/"
make -C "$OLD/workloads" >/dev/null
echo "old: $OLD ($(git -C "$OLD" rev-parse --short HEAD))  new: $NEW ($(git rev-parse --short HEAD))"
for r in $(seq "$RUNS"); do
    for side in old new; do
        T=$OLD; [ $side = new ] && T=$NEW
        echo "memwrite $side $r: $("$T/target/release/farmem" run --local 256M -- "$T/target/release/workloads/memwrite" --size 1024 --passes 3 2>&1 | grep -E 'pass=' | awk '{printf "%s ", $4}')"
    done
done
for r in $(seq "$RUNS"); do
    for side in old new; do
        T=$OLD; [ $side = new ] && T=$NEW
        echo "faultlat $side $r:"
        FARMEM_LOCAL=320M "$T/target/release/workloads/faultlat" 20000 2>&1 | grep -E '^far|^native' | sed -E 's/ +/ /g; s/n=20000 //; s/p90=[ 0-9.]+us //'
    done
done
