#!/bin/bash
# probation divisor 8 against 4, alternating, on the loop programs
cd /work/main
B=/tmp/NPB-CPP/NPB-OMP/bin
run() { # div local prog args
  local d=$1 l=$2; shift 2
  echo "== $(basename $1) div $d --local $l"
  { /usr/bin/time -f 'wall %e s' env TMPX_PROB_DIV=$d OMP_NUM_THREADS=2 target/release/farmem run --local $l --stats -- "$@"; } 2>&1 | grep -E 'Time in seconds|Verification  |Average Time|fetched from|faults \(miss|prefetched \(|written back|^wall' | head -12
}
for d in 8 4; do run $d 217M $B/mg.B; done
for d in 4 8; do run $d 217M $B/mg.B; done
for d in 8 4; do run $d 93M $B/cg.B; done
for d in 8 4; do run $d 69M /tmp/gapbs/bfs -g 20 -n 1; done
for d in 8 4; do run $d 46M $B/sp.B; done
echo DONE
