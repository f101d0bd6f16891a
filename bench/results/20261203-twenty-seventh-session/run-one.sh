#!/bin/bash
# One run under farmem with --stats, the lines the README's tables quote.
# usage: run-one.sh run LOCAL PROGRAM [ARGS...]   (TMPX lines: a diff's temporary count)
cd /work/main
B=/tmp/NPB-CPP/NPB-OMP/bin
run() { # local prog args
  local l=$1; shift
  echo "== $(basename $1) --local $l"
  { /usr/bin/time -f 'wall %e s' env OMP_NUM_THREADS=2 target/release/farmem run --local $l --stats -- "$@"; } 2>&1 | grep -E 'Time in seconds|Verification  |Average Time|fetched from|faults \(miss|prefetched \(|written back|^wall|TMPX' | head -12
}
"$@"
