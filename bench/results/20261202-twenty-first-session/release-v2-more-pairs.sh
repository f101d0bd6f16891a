#!/usr/bin/env bash
# The release trial's second form (release-kept-v2.patch of the twentieth
# session applied to e600157, knob TMPX_RELEASE), more pairs: NPB SP class A
# at a quarter three pairs, GAPBS BFS -g 20 at a quarter one pair, NPB MG
# class B at half four pairs; the side that runs first alternates by pair.
# usage: release-v2-more-pairs.sh GAPBS_DIR NPB_BIN_DIR (from the repository root)
set -uo pipefail
G=$1; B=$2; FM=$PWD/target/release/farmem
export OMP_NUM_THREADS=2
k=0
for x in "12M $B/sp.A" "217M $B/mg.B" "12M $B/sp.A" "217M $B/mg.B" "69M $G/bfs -g 20 -n 1" \
         "217M $B/mg.B" "12M $B/sp.A" "217M $B/mg.B"; do
    set -- $x; loc=$1; shift
    k=$((k + 1))
    if ((k % 2)); then order="0 1"; else order="1 0"; fi
    for side in $order; do
        echo "## TMPX_RELEASE=$side --local $loc $*"
        TMPX_RELEASE=$side /usr/bin/time -f 'wall %e s' "$FM" run --local "$loc" --stats -- "$@" 2>&1 \
            | grep -E 'Time in seconds|wall|fetched from|written back|dirty pages kept|faults \(missing|Verification'
    done
done
