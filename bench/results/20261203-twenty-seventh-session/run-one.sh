#!/bin/bash
cd /work/main
B=/tmp/NPB-CPP/NPB-OMP/bin
run() { # local prog args
  local l=$1; shift
  echo "== $(basename $1) --local $l $TAG"
  { /usr/bin/time -f 'wall %e s' env OMP_NUM_THREADS=2 target/release/farmem run --local $l --stats -- "$@"; } 2>&1 | grep -E 'Time in seconds|Verification  |Average Time|fetched from|faults \(miss|prefetched \(|written back|^wall' | head -12
}
"$@"
