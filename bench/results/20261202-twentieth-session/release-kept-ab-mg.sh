#!/usr/bin/env bash
# The release-kept trial's second round (BFS g20 and SP A at a quarter) and NPB MG
# class B at half, TMPX_RELEASE=0 then 1. usage: release-kept-ab-mg.sh GAPBS_DIR NPB_BIN_DIR
set -uo pipefail
G=$1; B=$2
bash "$(dirname "$0")/release-kept-ab.sh" 1 "$G" "$B" | sed 's/## round 1/## round 2/'
FM=$PWD/target/release/farmem
export OMP_NUM_THREADS=2
for side in 0 1; do
    echo "## TMPX_RELEASE=$side --local 217M $B/mg.B"
    TMPX_RELEASE=$side "$FM" run --local 217M --stats -- "$B/mg.B" 2>&1 \
        | grep -E 'Time in seconds|Verification  |fetched from|written back|dirty pages kept|faults \(missing'
done
