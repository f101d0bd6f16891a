#!/usr/bin/env bash
# The issue-6 benchmark set, as run for docs/benchmarks.md (root; about 30-60
# minutes on a 2-vCPU machine, most of it in the kernel baselines).
# Each run writes a table (.txt) and the JSON (.json) in one folder,
# bench/results/DATE-bench-all/, with RUN.md (command, commit, machine).
set -uo pipefail
BENCH_COMMAND="$0 $*"
cd "$(dirname "$0")/../.."
. bench/lib/results-dir.sh
F=target/release/farmem
results_dir bench-all
run() {
    local name=$1; shift
    echo "== $name: farmem bench $*"
    $F bench "$@" --json > "$R/$name.json" 2> "$R/$name.err"
    $F report "$R/$name.json" --text > "$R/$name.txt" 2>/dev/null || true
}
run qsort        qsort    --size 256M --expansion 1.67,6 --timeout 150
run stencil7     stencil7 --size 256M --expansion 4 --variant temporal --timeout 150
run stencil7-naive stencil7 --size 256M --expansion 4 --variant naive --systems local,farmem --timeout 150
run himeno       himeno   --size 256M --expansion 1.67 --timeout 150
run himeno-hints himeno   --size 256M --expansion 1.67 --hints --systems local,farmem --timeout 150
run memwrite     memwrite --size 512M --expansion 4 --timeout 150
run chase        chase    --size 128M --expansion 4 --timeout 150
echo done
