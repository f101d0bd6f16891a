#!/bin/bash
# The caught-stream rule off (TMPX_THRASH=0) and on (1) in one build, alternating:
# SP B and A at a quarter, MG B and CG B at half, GAPBS BFS -g 20 at a quarter.
cd /work/main
S=bench/results/20261203-twenty-eighth-session
B=/tmp/NPB-CPP/NPB-OMP/bin
bash $S/thrash-ab.sh 1 46M $B/sp.B > $S/caught-spB-quarter.txt 2>&1
bash $S/thrash-ab.sh 1 12M $B/sp.A > $S/caught-spA-quarter.txt 2>&1
bash $S/thrash-ab.sh 2 217M $B/mg.B > $S/caught-mgB-half.txt 2>&1
bash $S/thrash-ab.sh 1 93M $B/cg.B > $S/caught-cgB-half.txt 2>&1
bash $S/thrash-ab.sh 1 69M /tmp/gapbs/bfs -g 20 -n 1 > $S/caught-bfs-g20-quarter.txt 2>&1
echo DONE
