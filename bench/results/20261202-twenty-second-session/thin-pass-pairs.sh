#!/usr/bin/env bash
# Kept dirty holes released only once their block stays thin for a pass of
# main (TMPX_THIN_PASS=1) against main's rule (0: kept pages stay until
# main's own turn). One build, sides alternating by round: NPB SP class B
# at a quarter (--local 46M; the run that showed the first release rule's
# extra write-back), GAPBS BFS -g 20 at a quarter (--local 69M).
# usage: thin-pass-pairs.sh GAPBS_DIR NPB_BIN_DIR [ROUNDS_SP] [ROUNDS_BFS]
# (from the repository root)
set -uo pipefail
G=$1; B=$2; RS=${3:-2}; RB=${4:-3}; FM=$PWD/target/release/farmem
export OMP_NUM_THREADS=2
runs=()
for ((i = 0; i < RB; i++)); do runs+=("69M $G/bfs -g 20 -n 1"); done
for ((i = 0; i < RS; i++)); do runs+=("46M $B/sp.B"); done
k=0
for x in "${runs[@]}"; do
    set -- $x; loc=$1; shift
    if ((k % 2 == 0)); then order="0 1"; else order="1 0"; fi
    k=$((k + 1))
    for side in $order; do
        echo "## TMPX_THIN_PASS=$side --local $loc $*"
        TMPX_THIN_PASS=$side /usr/bin/time -f 'wall %e s' "$FM" run --local "$loc" --stats -- "$@" 2>&1 \
            | grep -E 'Time in seconds|Average Time|wall|fetched from|written back|dirty pages kept|faults \(missing|Verification  '
    done
done
