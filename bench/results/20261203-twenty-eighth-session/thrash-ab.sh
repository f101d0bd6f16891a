#!/bin/bash
# One build, thrash-following off (TMPX_THRASH=0) and on (1), alternating.
# usage: thrash-ab.sh ROUNDS LOCAL PROGRAM [ARGS...]
cd /work/main
rounds=$1 l=$2; shift 2
for r in $(seq 1 $rounds); do
  for t in 0 1; do
    echo "== round $r THRASH=$t $(basename $1) --local $l"
    { /usr/bin/time -f 'wall %e s' env TMPX_THRASH=$t OMP_NUM_THREADS=2 target/release/farmem run --local $l --stats -- "$@"; } 2>&1 | grep -E 'Time in seconds|Verification  |fetched from|faults \(miss|prefetched \(|written back|write-protect|^wall' | head -12
  done
done
