#!/usr/bin/env bash
# Twenty-seventh session's A/B: /tmp/old (9638a4d) against /work/main (probation grown by late uses).
cd /work/main
B=/tmp/NPB-CPP/NPB-OMP/bin
echo "== start $(date)"
bench/ab/ab-hpc.sh /tmp/old 1 25 $B/sp.A
bench/ab/ab-hpc.sh /tmp/old 2 50 $B/mg.B
bench/ab/ab-hpc.sh /tmp/old 1 50 $B/cg.B
bench/ab/ab-hpc.sh /tmp/old 1 25 /tmp/gapbs/bfs
bench/ab/ab-hpc.sh /tmp/old 1 25 $B/sp.B
echo "== end $(date)"
