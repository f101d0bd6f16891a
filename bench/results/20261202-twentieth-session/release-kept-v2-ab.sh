#!/usr/bin/env bash
# The release trial, second form: kept pages marked by distance 0 (no refault is
# admitted at it), so only they are released. TMPX_RELEASE=0 (as built) and 1
# alternating, one build: NPB MG class B at half three times a side, GAPBS BFS
# -g 20 at a quarter and NPB SP class A at a quarter once a side.
# usage: release-kept-v2-ab.sh GAPBS_DIR NPB_BIN_DIR (from the repository root)
set -uo pipefail
G=$1; B=$2; FM=$PWD/target/release/farmem
export OMP_NUM_THREADS=2
for x in "217M $B/mg.B" "217M $B/mg.B" "217M $B/mg.B" "69M $G/bfs -g 20 -n 1" "12M $B/sp.A"; do
    set -- $x; loc=$1; shift
    for side in 0 1; do
        echo "## TMPX_RELEASE=$side --local $loc $*"
        TMPX_RELEASE=$side /usr/bin/time -f 'wall %e s' "$FM" run --local "$loc" --stats -- "$@" 2>&1 \
            | grep -E 'Time in seconds|wall|fetched from|written back|dirty pages kept|faults \(missing'
    done
done
