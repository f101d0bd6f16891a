#!/usr/bin/env bash
# The largest prefetch window, FARMEM_PREFETCH=64 (the default) against 32,
# one build, the first side alternating by round: NPB SP class B at a
# quarter (--local 46M), MG class B at half (--local 217M) three rounds, CG
# class B at half (--local 93M), GAPBS BFS -g 20 at a quarter (--local 69M);
# SP class B all-local first, for the ratio.
# usage: prefetch-32-pairs.sh GAPBS_DIR NPB_BIN_DIR (from the repository root)
set -uo pipefail
G=$1; B=$2; FM=$PWD/target/release/farmem
export OMP_NUM_THREADS=2
echo "## all-local $B/sp.B"
/usr/bin/time -f 'wall %e s' "$B/sp.B" 2>&1 | grep -E 'Time in seconds|wall|Verification  '
k=0
for x in "46M $B/sp.B" "217M $B/mg.B" "217M $B/mg.B" "217M $B/mg.B" "93M $B/cg.B" "69M $G/bfs -g 20 -n 1"; do
    set -- $x; loc=$1; shift
    if ((k % 2 == 0)); then order="32 64"; else order="64 32"; fi
    k=$((k + 1))
    for side in $order; do
        echo "## FARMEM_PREFETCH=$side --local $loc $*"
        FARMEM_PREFETCH=$side /usr/bin/time -f 'wall %e s' "$FM" run --local "$loc" --stats -- "$@" 2>&1 \
            | grep -E 'Time in seconds|wall|fetched from|written back|prefetched \(|faults \(missing|Verification  '
    done
done
