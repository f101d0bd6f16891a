#!/usr/bin/env bash
# Does install cost more with two threads installing in one address space?
# NPB SP class A at a quarter (--local 12M), FARMEM_BREAKDOWN=1, with
# OMP_NUM_THREADS=1 then 2.
# usage: sp-A-threads-breakdown.sh NPB_BIN_DIR (from the repository root)
set -uo pipefail
B=$1; FM=$PWD/target/release/farmem
for t in 1 2; do
    echo "## OMP_NUM_THREADS=$t FARMEM_BREAKDOWN=1 --local 12M sp.A"
    OMP_NUM_THREADS=$t FARMEM_BREAKDOWN=1 /usr/bin/time -f 'wall %e s' "$FM" run --local 12M --stats -- "$B/sp.A" 2>&1 \
        | sed -n '/farmem stats/,/all of farmem/p;/Time in seconds/p;/^wall/p'
done
