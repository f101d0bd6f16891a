#!/usr/bin/env bash
# Where a page's time goes, on each page path (issue 42): the runtime's
# page_cost benchmark (crates/runtime/tests/page_cost.rs) with
# FARMEM_BREAKDOWN on, 128 MiB at 4x a 32 MiB budget, swept in order and at
# random, read and read-modify-write, one thread and two; each part's own
# time per page moved, beside the pass's wall time and the same loop on
# local memory. Paths alternate, RUNS rounds.
# usage: bench/cost/page-cost.sh [RUNS=1] [TRANSPORTS="auto socket"]
#   auto: memory files from the embedded server (the one-host default);
#   socket: the embedded server's Unix socket.
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${1:-1}; TRANSPORTS=${2:-auto socket}
BENCH_COMMAND="bench/cost/page-cost.sh $*"
. bench/lib/results-dir.sh
results_dir page-cost
cargo test --release --quiet -p farmem-runtime --test page_cost --no-run
for r in $(seq "$RUNS"); do
    for t in $TRANSPORTS; do
        echo "## $t, run $r"
        FARMEM_TRANSPORT=$t cargo test --release --quiet -p farmem-runtime --test page_cost \
            -- --ignored --nocapture page_cost_table 2>&1 | grep -vE '^(running|test |$)'
    done
done | tee "$R/runs.txt"
