#!/bin/bash
# alternate old/new MG B at half with the breakdown; ROUNDS=$1 PROG=$2 LOCAL=$3
R=${1:-3}; P=${2:-/tmp/NPB-CPP/NPB-OMP/bin/mg.B}; L=${3:-217M}
export OMP_NUM_THREADS=2 FARMEM_BREAKDOWN=1
for r in $(seq $R); do
  for side in old new; do
    if [ $side = old ]; then F=/tmp/old/target/release/farmem; else F=/work/main/target/release/farmem; fi
    o=$( { /usr/bin/time -f "wall %e" $F run --local $L --stats -- $P; } 2>&1 )
    t=$(echo "$o" | awk '/Time in seconds/ {print $NF}')
    w=$(echo "$o" | awk '/^wall/ {print $2}')
    wp=$(echo "$o" | awk '/write-protect/ {print $3, $4}')
    wb=$(echo "$o" | awk '/evict: write back/ {print $4, $5}')
    all=$(echo "$o" | awk '/all of farmem/ {print $4, $5}')
    v=$(echo "$o" | grep -c "SUCCESSFUL")
    echo "round $r $side: time $t wall $w | wp ms,ns/p $wp | wb ms,ns/p $wb | all ms,ns/p $all | verified $v"
  done
done
