#!/usr/bin/env bash
# Pages brought in against Belady's MIN, per program, from policy traces:
# each program runs twice on a small input, once at LOCAL% of its footprint
# with farmem's policy (`--trace run`), once with prefetch off at the
# smallest budget (`--trace refs`, its page reference string), and
# `farmem trace run --refs refs` replays the references under MIN at the
# run's budget. GAPBS (and NPB-CPP, optional) are fetched by you (see
# bench/policy.sh); NPB's MG and CG class W are built here.
#
#   [NPB=NPB-CPP] bench/min-table.sh GAPBS_DIR [LOCAL_PERCENT]
set -euo pipefail
cd "$(dirname "$0")/.."
GAPBS=${1:?GAPBS checkout}; PCT=${2:-50}
F=$PWD/target/release/farmem
W=$PWD/target/release/workloads
export OMP_NUM_THREADS=2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
progs=(
    "bfs -g 16|$GAPBS/bfs -g 16 -n 2"
    "pr -g 16|$GAPBS/pr -g 16 -n 2"
    "qsort 16M|$W/qsort 16777216"
    "stencil7 16M|$W/stencil7 16777216 temporal 4 4"
)
if [ -n "${NPB:-}" ]; then
    for k in mg cg; do
        [ -x "$NPB/NPB-OMP/bin/$k.W" ] || make -C "$NPB/NPB-OMP" "$k" CLASS=W >/dev/null
    done
    progs+=("mg W|$NPB/NPB-OMP/bin/mg.W" "cg W|$NPB/NPB-OMP/bin/cg.W")
fi
echo "program | local | references (pages) | MIN | farmem brought in (x MIN) | replayed policy (x MIN) | prefetch wasted"
for p in "${progs[@]}"; do
    IFS='|' read -r name cmd <<<"$p"
    rss=$( { /usr/bin/time -f "RSS %M" $cmd >/dev/null; } 2>&1 | awk '/^RSS/ {print $2}')
    loc=$((rss * PCT / 100))K
    $F run --local "$loc" --trace "$T/run" -- $cmd >/dev/null 2>&1
    FARMEM_PREFETCH=0 $F run --local 1M --trace "$T/refs" -- $cmd >/dev/null 2>&1
    o=$($F trace "$T/run" --refs "$T/refs")
    refs=$(echo "$o" | sed -nE 's/.*: ([0-9]+) references to ([0-9]+) pages.*/\1 (\2)/p')
    min=$(echo "$o" | awk '/Belady/ {print $4}')
    run=$(echo "$o" | awk '/this run brought in/ {print $5, $(NF-1)}')
    rep=$(echo "$o" | awk -v m="$min" '/replayed/ {printf "%s %.2fx", $4, $4 / m}')
    waste=$(echo "$o" | sed -nE 's/.*\(([0-9]+%) of prefetched pages wasted\).*/\1/p')
    echo "$name | $loc | $refs | $min | $run | $rep | $waste"
done
