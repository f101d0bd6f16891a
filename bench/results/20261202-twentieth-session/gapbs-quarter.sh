#!/usr/bin/env bash
# GAPBS BFS (-n 10) and PageRank (-n 3) on a -g 21 Kronecker graph: all-local
# (its peak RSS from /usr/bin/time), then under farmem at a quarter of the
# issue's footprint (558 MiB: --local 142861K / 142872K), wall times.
# usage: gapbs-quarter.sh GAPBS_DIR   (from the repository root)
set -uo pipefail
G=$1; FM=$PWD/target/release/farmem
export OMP_NUM_THREADS=2
for p in "bfs -n 10 142861K" "pr -n 3 142872K"; do
    set -- $p
    echo "## $1 -g 21 $2 $3 all-local"
    /usr/bin/time -f 'wall %e s, peak RSS %M KiB' "$G/$1" -g 21 "$2" "$3" 2>&1 | grep -E 'Average|wall|Verif'
    echo "## $1 -g 21 $2 $3 farmem run --local $4"
    /usr/bin/time -f 'wall %e s' "$FM" run --local "$4" --stats -- "$G/$1" -g 21 "$2" "$3" 2>&1 \
        | grep -E 'Average|wall|fetched from|written back|missing faults|Verif'
done
