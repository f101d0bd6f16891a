#!/usr/bin/env bash
# The seed table (issue 11): every seed workload at the seeds' expansions on
# local, farmem, swap, zram and ssd-mmap, three runs a cell (median, min,
# max), with farmem's timed-region traffic against the least any policy
# must move and the far ceiling. Root; about 30-50 minutes on a 2-vCPU
# machine. Each run writes seed-NAME.{json,txt} in one folder,
# bench/results/DATE-seed-table/, with RUN.md (command, commit, machine).
# `bench/baselines/seed-table.sh stencil-1t`: the stencil again, at 512M on one
# thread: on 2 vCPUs two compute threads leave no CPU to the memory server
# (or to kswapd); one thread is a client whose server runs on another node.
# `bench/baselines/seed-table.sh graph`: only the graph rows (pagerank and bfs).
set -uo pipefail
BENCH_COMMAND="$0 $*"
cd "$(dirname "$0")/../.."
. bench/lib/results-dir.sh
F=target/release/farmem
results_dir "seed-table${1:+-$1}"
run() {
    local name=$1
    shift
    echo "== $name: farmem bench $* --runs 3 ($(date +%T))"
    $F bench "$@" --runs 3 --timeout 100 --json >"$R/seed-$name.json" 2>"$R/seed-$name.err"
    $F report "$R/seed-$name.json" --text >"$R/seed-$name.txt" 2>/dev/null || true
}
if [ "${1:-}" = graph ]; then
    run pagerank pagerank --size 128M --expansion 2,4
    run bfs      bfs      --size 128M --expansion 2,4
    echo "done ($(date +%T))"
    exit 0
fi
if [ "${1:-}" = stencil-1t ]; then
    run stencil7-temporal-1t  stencil7 --size 512M --expansion 4 --variant temporal --threads 1
    run stencil7-wavefront-1t stencil7 --size 512M --expansion 4 --variant wavefront --threads 1
    echo "done ($(date +%T))"
    exit 0
fi
run qsort              qsort     --size 128M --expansion 1.67,6
run stencil7-temporal  stencil7  --size 128M --expansion 4 --variant temporal
run stencil7-wavefront stencil7  --size 128M --expansion 4 --variant wavefront
run himeno             himeno    --size 128M --expansion 1.67
run memwrite           memwrite  --size 256M --expansion 4
run chase              chase     --size 64M  --expansion 4
run pagerank           pagerank  --size 128M --expansion 2,4
run bfs                bfs       --size 128M --expansion 2,4
echo "done ($(date +%T))"
