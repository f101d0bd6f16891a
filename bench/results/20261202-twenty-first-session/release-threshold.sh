#!/usr/bin/env bash
# The release trial's second form with its threshold as the knob: TMPX_RELEASE=N
# releases a kept page (distance 0) once its block keeps at most N main pages;
# 0 is off. Off, 48 and 24 in turn (order rotating by round): NPB MG class B at
# half four rounds, GAPBS BFS -g 20 at a quarter two rounds.
# usage: release-threshold.sh GAPBS_DIR NPB_BIN_DIR (from the repository root)
set -uo pipefail
G=$1; B=$2; FM=$PWD/target/release/farmem
export OMP_NUM_THREADS=2
k=0
for x in "217M $B/mg.B" "69M $G/bfs -g 20 -n 1" "217M $B/mg.B" "217M $B/mg.B" "69M $G/bfs -g 20 -n 1" "217M $B/mg.B"; do
    set -- $x; loc=$1; shift
    case $((k % 3)) in 0) order="0 48 24";; 1) order="48 24 0";; 2) order="24 0 48";; esac
    k=$((k + 1))
    for side in $order; do
        echo "## TMPX_RELEASE=$side --local $loc $*"
        TMPX_RELEASE=$side /usr/bin/time -f 'wall %e s' "$FM" run --local "$loc" --stats -- "$@" 2>&1 \
            | grep -E 'Time in seconds|wall|fetched from|written back|dirty pages kept|faults \(missing|Verification  '
    done
done
