#!/bin/bash
# abflush.sh RUNS -- alternate OLD (/tmp/old) and NEW (/work/main) builds on a few programs, counting
# TLB shootdown IPIs sent, ioctls and process_madvise calls with perf (tracepoints), and wall time.
RUNS=${1:-1}
N=/tmp/NPB-CPP/NPB-OMP/bin
export OMP_NUM_THREADS=2
CASES=${CASES:-"217M:$N/mg.B 108M:$N/mg.B 35M:/tmp/gapbs/bfs@-g@19@-n@1 7M:$N/cg.A 5684K:$N/cg.W"}
for r in $(seq $RUNS); do
 for c in $CASES; do
  budget=${c%%:*}; prog=${c#*:}; prog=${prog//@/ }
  for side in $SIDES; do
   B=/work/main/target/release; export FARMEM_EVICT_BATCH=$side
   out=$( { /usr/bin/time -f "WALL %e" perf stat -x, -e tlb:tlb_flush --filter 'reason==4' -e syscalls:sys_enter_ioctl -e syscalls:sys_enter_process_madvise -- $B/farmem run --local $budget --stats -- $prog; } 2>&1 )
   ipi=$(echo "$out" | awk -F, '/tlb:tlb_flush/ {print $1}')
   ioc=$(echo "$out" | awk -F, '/sys_enter_ioctl/ {print $1}')
   mad=$(echo "$out" | awk -F, '/process_madvise/ {print $1}')
   wall=$(echo "$out" | awk '/^WALL/ {print $2}')
   npb=$(echo "$out" | awk '/Time in seconds/ {print $5}')
   ver=$(echo "$out" | grep -c -E "VERIFICATION SUCCESSFUL|Verification: PASS|Verification:           PASS")
   fetched=$(echo "$out" | awk '/fetched from backend/ {print $4}')
   faults=$(echo "$out" | awk '/faults \(missing/ {print $6}')
   evicted=$(echo "$out" | awk '/evicted pages/ {print $3}')
   printf "%-6s %-28s %-4s wall %7s npb %7s ipis %9s ioctl %9s madv %8s faults %8s evicted %9s fetched %7s ok %s\n" "$budget" "$(basename "${prog%% *}") ${prog#* }" $side "$wall" "${npb:--}" "$ipi" "$ioc" "$mad" "$faults" "$evicted" "$fetched" "$ver"
  done
 done
done
