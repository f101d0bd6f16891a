#!/bin/bash
# usage: ab-promote.sh LOCAL ROUNDS -- cmd...
L=$1; R=$2; shift 3
for r in $(seq $R); do for v in 0 1; do
  if [ $v = 1 ]; then export TMPX_PROMOTE=1; else unset TMPX_PROMOTE; fi
  echo "== round $r promote=$v"
  OMP_NUM_THREADS=2 FARMEM_BREAKDOWN=1 timeout 900 /work/main/target/release/farmem run --local $L --stats -- "$@" 2>&1 | grep -E "DBG|Time in|Verification  |eviction calls|written back|evicted pages|fetched from|faults \(|write-protect|all of farmem"
done; done
