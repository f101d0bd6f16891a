#!/bin/bash
# Old (crc-fast everywhere) against new (crc32c crate where the CPU has no
# AVX-512 VPCLMULQDQ), alternating, NPB MG class B at half its footprint,
# with the per-page breakdown. usage: crc-pairs.sh OLD_BIN_DIR NEW_BIN_DIR NPB_BIN PAIRS
set -u
old=$1 new=$2 bin=$3 pairs=${4:-3}
for r in $(seq 1 "$pairs"); do
  for side in old new; do
    [ $((r % 2)) = 0 ] && side=$([ $side = old ] && echo new || echo old)
    dir=$([ $side = old ] && echo "$old" || echo "$new")
    echo "## round $r $side"
    OMP_NUM_THREADS=2 FARMEM_BREAKDOWN=1 "$dir/farmem" run --local 217M --stats -- "$bin/mg.B" 2>&1 |
      grep -E "Time in|SUCCESSFUL|fetched from|written back|verify|write back  |install|all of"
  done
done
