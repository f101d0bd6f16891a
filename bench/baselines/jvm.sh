#!/usr/bin/env bash
# A Java heap on far memory against all-local and against Linux swap.
#
# tests/programs/BigArray.java over a 1 GiB heap (-Xms1g -Xmx1g) with LIVE
# MiB live, OPS random reads and writes, then FULLGCS full collections
# (System.gc(), each timed). Budgets: 50% and 25% of the native run's peak
# resident set (VmHWM). farmem: `farmem run --local BUDGET` (embedded
# server, default transport). Linux swap: a cgroup v1 memory limit of
# BUDGET + 64M (the JVM's own non-heap memory, which farmem leaves local
# and does not count in its budget) with a swap file. GC time is the sum
# of the pauses in -Xlog:gc; mutator time is the main method's time less
# those pauses. Median of RUNS for each figure.
#
# usage: bench/baselines/jvm.sh [RUNS=3] [GC=ParallelGC] [LIVE=400] [OPS=1000000] [FULLGCS=2]
# (root for the swap baseline: cgroup v1, swapon)
set -euo pipefail
cd "$(dirname "$0")/../.."
BENCH_COMMAND="bench/baselines/jvm.sh $*"
. bench/lib/results-dir.sh
results_dir jvm
keep_output
RUNS=${1:-3}
GC=${2:-ParallelGC}
LIVE=${3:-400}
OPS=${4:-1000000}
FULLGCS=${5:-2}
F=target/release/farmem
T=$(mktemp -d /tmp/farmem-jvm.XXXXXX)
R=$T/results.txt
source bench/lib/managed-common.sh
trap managed_cleanup EXIT
javac -d "$T" tests/programs/BigArray.java
JAVA=(java -Xms1g -Xmx1g "-XX:+Use$GC" -cp "$T")

# One run: KIND NAME CMD... -> a line "KIND NAME wall main gc fullgc hwm_kb fetched written"
one() {
    local kind=$1 name=$2
    shift 2
    local log=$T/gc-$name.log err=$T/err-$name.txt s0 s1
    s0=$(date +%s.%N)
    "$@" "-Xlog:gc:file=$log" -cp "$T" BigArray "$LIVE" "$OPS" "$FULLGCS" >"$T/out-$name.txt" 2>"$err" || {
        echo "$kind $name FAILED"
        tail -5 "$err" >&2
        return
    }
    s1=$(date +%s.%N)
    local main gc full hwm fetched written
    main=$(awk '/^bigarray seconds/{print $3}' "$err")
    full=$(awk '/^bigarray fullgc seconds/{s+=$4} END{printf "%.3f", s}' "$err")
    hwm=$(awk '/^bigarray VmHWM/{print $3}' "$err")
    # Pauses during the main method (the full collections are timed apart).
    gc=$(GC_SKIP="System.gc" gc_seconds "$log")
    fetched=$(awk '/fetched from backend/{print $4}' "$err")
    written=$(awk '/written back/{print $3}' "$err")
    echo "$kind $name $(echo "$s1 - $s0" | bc) $main $gc $full $hwm ${fetched:--} ${written:--}"
    cmp -s "$T/out-$name.txt" "$T/out-native-1.txt" || [ "$name" = native-1 ] || echo "$kind $name OUTPUT-DIFFERS"
}

echo "# bench/baselines/jvm.sh: BigArray $LIVE MiB live, $OPS ops, $FULLGCS full GCs, -Xmx1g, $GC; $(nproc) CPUs; $(date -u +%F)"
for i in $(seq "$RUNS"); do
    one native "native-$i" "${JAVA[@]:0:4}" >>"$R"
done
HWM=$(awk '$1=="native"{print $7}' "$R" | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
echo "native peak resident set (median): $((HWM / 1024)) MiB"
swap_start 2G
for pct in 50 25; do
    budget=$((HWM * pct / 100 / 1024))
    for i in $(seq "$RUNS"); do
        one "farmem-$pct" "farmem-$pct-$i" "$F" run --local "${budget}M" --stats -- "${JAVA[@]:0:4}" >>"$R"
        if [ $SWAP_OK = 1 ]; then
            swap_limit $((budget + 64))
            one "swap-$pct" "swap-$pct-$i" in_swap "${JAVA[@]:0:4}" >>"$R"
        fi
    done
    echo "$pct% local: budget ${budget}M"
done
median_table '
    printf "%-10s %8s %8s %8s %9s %9s %8s %9s %9s %8s\n", "kind", "wall s", "main s", "GC s", "mutator s", "fullGC s", "RSS MiB", "fetched", "written", "x native"
    base = med("native", 4)
    for (i = 1; i <= nk; i++) {
        k = order[i]
        m = med(k, 4); g = med(k, 5)
        printf "%-10s %8.2f %8.2f %8.2f %9.2f %9.2f %8d %9s %9s %7.1fx\n", k, med(k, 3), m, g, m - g, med(k, 6), med(k, 7) / 1024, med(k, 8), med(k, 9), m / base
    }
'
