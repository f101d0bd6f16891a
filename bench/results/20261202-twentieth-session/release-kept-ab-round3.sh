#!/usr/bin/env bash
# Third round of the release-kept trial: NPB MG class B at half twice a side, then SP class A
# at a quarter once a side, TMPX_RELEASE=0 and 1 alternating. usage: release-kept-ab-round3.sh NPB_BIN_DIR
set -uo pipefail
B=$1; FM=$PWD/target/release/farmem
export OMP_NUM_THREADS=2
for x in "217M mg.B" "217M mg.B" "12M sp.A"; do
    set -- $x
    for side in 0 1; do
        echo "## TMPX_RELEASE=$side --local $1 $2"
        TMPX_RELEASE=$side "$FM" run --local "$1" --stats -- "$B/$2" 2>&1 \
            | grep -E 'Time in seconds|fetched from|written back|dirty pages kept|faults \(missing'
    done
done
