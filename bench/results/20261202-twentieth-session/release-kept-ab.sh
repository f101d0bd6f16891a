#!/usr/bin/env bash
# A/B of a trial (not kept unless the docs say so): a dirty page kept in main
# by the dirty-holes rule (distance 1) may be displaced by a refault once its
# block keeps no more than DIRTY_KEPT main pages (TMPX_RELEASE=1), against the
# rule as built (TMPX_RELEASE=0). One build; sides alternate.
# usage: release-kept-ab.sh ROUNDS GAPBS_DIR NPB_BIN_DIR (from the repository root)
set -uo pipefail
N=$1; G=$2; B=$3; FM=$PWD/target/release/farmem
export OMP_NUM_THREADS=2
for r in $(seq "$N"); do
    for prog in "69M $G/bfs -g 20 -n 1" "12M $B/sp.A"; do
        set -- $prog; loc=$1; shift
        for side in 0 1; do
            echo "## round $r TMPX_RELEASE=$side --local $loc $*"
            TMPX_RELEASE=$side /usr/bin/time -f 'wall %e s' "$FM" run --local "$loc" --stats -- "$@" 2>&1 \
                | grep -E 'Time in seconds|Verification|wall|fetched from|written back|dirty pages kept|faults \(missing'
        done
    done
done
