#!/bin/bash
# SP A at a quarter, probation divisor alternating
cd /work/main
for d in "$@"; do
  echo "== div $d"
  TMPX_PROB_DIV=$d OMP_NUM_THREADS=2 target/release/farmem run --local 12M --stats -- /tmp/NPB-CPP/NPB-OMP/bin/sp.A 2>&1 | grep -E 'Time in seconds|Verification|pages in|fetched|faults|wasted|prefetch' | head -12
done
