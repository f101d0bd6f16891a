#!/bin/bash
# usage: cfg.sh RUNS LOCAL -- PROGRAM ARGS ; configs: A=batch32 block1, B=batch64, C=batch32 block0
RUNS=$1; LOCAL=$2; shift 3
F=/work/main/target/release/farmem
for r in $(seq $RUNS); do
  for c in A B C; do
    case $c in A) e="FARMEM_EVICT_BATCH=32 FARMEM_EVICT_BLOCK=1";; B) e="FARMEM_EVICT_BATCH=64 FARMEM_EVICT_BLOCK=1";; C) e="FARMEM_EVICT_BATCH=32 FARMEM_EVICT_BLOCK=0";; esac
    s=$(date +%s.%N)
    o=$(env $e $F run --local $LOCAL --stats -- "$@" 2>&1)
    t=$(echo "$s $(date +%s.%N)" | awk '{printf "%.2f", $2-$1}')
    echo "$c ($e) run $r: wall $t s; $(echo "$o" | grep -E 'fetched from|evicted pages|Time in|Average Time' | sed -E 's/ +/ /g' | tr '\n' ';')"
  done
done
