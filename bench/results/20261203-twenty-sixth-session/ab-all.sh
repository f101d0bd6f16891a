#!/usr/bin/env bash
# Twenty-fifth session's A/B: /tmp/old (f2ff0c3) against /work/main (fractional strides).
cd /work/main
B=/tmp/NPB-CPP/NPB-OMP/bin
while ! grep -q OLD-DONE /tmp/oldbuild.log; do sleep 5; done
echo "== start $(date)"
bench/ab/ab-hpc.sh /tmp/old 2 50 $B/mg.B
bench/ab/ab-hpc.sh /tmp/old 2 25 $B/sp.W
for r in 1 2; do for side in old new; do
  T=/work/main/target/release; [ $side = old ] && T=/tmp/old/target/release
  echo "== stencil7 $side round $r"
  $T/farmem bench stencil7 --expansion 4 --systems local,farmem --runs 3
done; done
bench/ab/ab-hpc.sh /tmp/old 2 25 /tmp/gapbs/bfs
bench/ab/ab-hpc.sh /tmp/old 1 50 $B/cg.B
bench/ab/ab-hpc.sh /tmp/old 1 25 $B/sp.A
bench/ab/ab-hpc.sh /tmp/old 1 25 $B/sp.B
echo "== end $(date)"
