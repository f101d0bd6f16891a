#!/usr/bin/env bash
# A replacement or prefetch change judged by replay, before any timing: each
# program's page reference string replayed under farmem's policy as an OLD
# build and this one implement it, side by side, at several budgets, against
# Belady's MIN. Pages fetched are what a policy moves; runs are what it pays
# per fault (a request, an install and an unmap each), so both are printed.
#
# Traces are recorded once into TRACE_DIR and reused (delete a file to record
# it again): NAME.refs (prefetch off at the smallest budget: the reference
# string) and NAME.run (a run at half the peak RSS, whose header gives the
# prefetch window and eviction batch the replay follows). Budgets are per
# cent of the program's all-local peak RSS, as `farmem run --local` takes it.
#
#   [PERCENTS="50 25 70"] [NPB=NPB-CPP] [NPB_KERNELS="mg.W cg.W cg.A"] \
#       bench/cost/replay-table.sh OLD_FARMEM GAPBS_DIR TRACE_DIR
#
# OLD_FARMEM: the farmem binary of the build to compare with (a worktree's
# target/release/farmem). GAPBS and NPB-CPP are fetched by you (see
# bench/cost/policy.sh); NPB's kernels are built here.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -eq 3 ] || { echo "usage: $0 OLD_FARMEM GAPBS_DIR TRACE_DIR" >&2; exit 2; }
OLD=$(realpath "$1"); GAPBS=$2; DIR=$3
[ -x "$OLD" ] || { echo "$OLD: not an executable farmem (build the old tree first)" >&2; exit 2; }
[ -x "$GAPBS/bfs" ] && [ -x "$GAPBS/pr" ] || { echo "$GAPBS: no bfs and pr built (make bfs pr there)" >&2; exit 2; }
PERCENTS=${PERCENTS:-50 25 70}
for p in $PERCENTS; do
    [[ $p =~ ^[0-9]+$ ]] && [ "$p" -ge 1 ] && [ "$p" -le 100 ] || { echo "PERCENTS: '$p' is not a per cent from 1 to 100" >&2; exit 2; }
done
BENCH_COMMAND="PERCENTS=\"$PERCENTS\" NPB=${NPB:-} NPB_KERNELS=\"${NPB_KERNELS:-}\" bench/cost/replay-table.sh $*"
. bench/lib/results-dir.sh
results_dir replay-table
keep_output
cargo build --release --quiet -p farmem-cli
NEW=$PWD/target/release/farmem
W=$PWD/target/release/workloads
export OMP_NUM_THREADS=2
mkdir -p "$DIR"
progs=(
    "bfs|$GAPBS/bfs -g 16 -n 2"
    "pr|$GAPBS/pr -g 16 -n 2"
    "qsort|$W/qsort 16777216"
    # A fixed block: stencil7 otherwise sizes its blocks from the budget,
    # and the reference run's would make it another program.
    "stencil7|$W/stencil7 16777216 temporal 4 4 --block 18"
)
if [ -n "${NPB:-}" ]; then
    . bench/lib/npb.sh
    for kc in ${NPB_KERNELS:-mg.W cg.W cg.A}; do
        bin=$(npb_binary "$NPB" "$kc")
        progs+=("$kc|$bin")
    done
fi
# One replay: MIN, pages fetched, runs and main pages displaced (each of
# which leaves alone: a write-protect call of its own when dirty; "-" from
# a build whose trace does not print them), as "min pages runs displaced".
replay() {
    "$1" trace "$DIR/$2.run" --refs "$DIR/$2.refs" --budget "$3" | awk '
        /Belady/ {m = $4} /policy, replayed/ {p = $4} /runs fetched, replayed/ {r = $4}
        /main pages displaced/ {d = $4}
        END {print m, p, r, (d == "" ? "-" : d)}'
}
echo "program | budget | MIN | old: pages (x MIN), runs, displaced | new: pages (x MIN), runs, displaced | new/old pages, runs"
for e in "${progs[@]}"; do
    IFS='|' read -r name cmd <<<"$e"
    if [ ! -s "$DIR/$name.rss" ]; then
        /usr/bin/time -f "RSS %M" $cmd >/dev/null 2>"$DIR/$name.time"
        awk '/^RSS/ {print $2}' "$DIR/$name.time" >"$DIR/$name.rss"
    fi
    rss=$(cat "$DIR/$name.rss")
    [ -s "$DIR/$name.refs" ] || FARMEM_PREFETCH=0 "$NEW" run --local 1M --trace "$DIR/$name.refs" -- $cmd >/dev/null 2>&1
    [ -s "$DIR/$name.run" ] || "$NEW" run --local $((rss / 2))K --trace "$DIR/$name.run" -- $cmd >/dev/null 2>&1
    for pct in $PERCENTS; do
        b=$((rss * pct / 100))K
        read -r min op or od < <(replay "$OLD" "$name" "$b")
        read -r _ np nr nd < <(replay "$NEW" "$name" "$b")
        awk -v n="$name" -v pct="$pct" -v b="$b" -v m="$min" -v op="$op" -v or="$or" -v od="$od" \
            -v np="$np" -v nr="$nr" -v nd="$nd" 'BEGIN {
            printf "%s | %s%% (%s) | %d | %d (%.2fx), %d, %s | %d (%.2fx), %d, %s | %.3f, %.3f\n",
                n, pct, b, m, op, op / m, or, od, np, np / m, nr, nd, np / op, nr / or }'
    done
done
