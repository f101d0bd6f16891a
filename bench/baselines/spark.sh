#!/usr/bin/env bash
# A Spark job in local mode (bench/baselines/jobs/spark_groupby.py: a cached data set
# grouped by key) on far memory, against all-local and Linux swap, with
# Fastswap's Spark PageRank (2.47x all-local at 75% local) as the anchor.
#
# Spark comes from PySpark's wheel (pip install pyspark: it ships Spark's
# jars and bin/spark-submit); nothing of it is in this repository.
# The driver JVM gets -Xmx HEAP; budgets are 75% and 50% of HEAP.
# farmem: `farmem run --local BUDGET -- spark-submit ...` (every process of
# the job gets the shim; the driver JVM holds the data). Linux swap: a
# cgroup v1 limit of BUDGET + 192M (the JVM's non-heap memory, which farmem
# leaves local: 168M measured) with a swap file. GC time: the driver's
# -Xlog:gc pauses. Median of RUNS.
#
# usage: bench/baselines/spark.sh PYSPARK_DIR [RUNS=3] [ROWS=4000000] [HEAP_MB=1024]
#   PYSPARK_DIR: the installed pyspark package, e.g.
#   $(python -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))')
set -euo pipefail
cd "$(dirname "$0")/../.."
SPARK=${1:?usage: bench/baselines/spark.sh PYSPARK_DIR [RUNS] [ROWS] [HEAP_MB]}
RUNS=${2:-3}
ROWS=${3:-4000000}
HEAP=${4:-1024}
[ -x "$SPARK/bin/spark-submit" ] || { echo "no $SPARK/bin/spark-submit: give the pyspark package's directory" >&2; exit 2; }
PY=$(dirname "$(dirname "$(dirname "$(dirname "$SPARK")")")")/bin/python
[ -x "$PY" ] || PY=python3
export PYSPARK_PYTHON=$PY
F=$PWD/target/release/farmem
T=$(mktemp -d /tmp/farmem-spark.XXXXXX)
R=$T/results.txt
source bench/lib/managed-common.sh
trap managed_cleanup EXIT

one() {
    local kind=$1 name=$2
    shift 2
    local err=$T/err-$name.txt
    "$@" "$SPARK/bin/spark-submit" --driver-memory "${HEAP}m" \
        --conf "spark.driver.extraJavaOptions=-XX:+UseParallelGC -Xlog:gc:file=$T/gc-$name.log" \
        bench/baselines/jobs/spark_groupby.py "$ROWS" >"$T/out-$name.txt" 2>"$err" || {
        echo "$kind $name FAILED"
        grep -v INFO "$err" | tail -3 >&2
        return
    }
    local secs gc hwm fetched written
    # The Python driver's stderr reaches spark-submit's stdout.
    secs=$(awk '/^seconds/{print $2}' "$T/out-$name.txt" "$err" | head -1)
    hwm=$(awk '/^jvm VmHWM/{print $3}' "$T/out-$name.txt" "$err" | head -1)
    gc=$(gc_seconds "$T/gc-$name.log")
    # The driver JVM's table: the one with the most fetched.
    fetched=$(awk '/fetched from backend/{print $4}' "$err" | sort -h | tail -1)
    written=$(awk '/written back/{print $3}' "$err" | sort -h | tail -1)
    echo "$kind $name $secs $gc $hwm ${fetched:--} ${written:--}"
    # Checked against the first native run that finished.
    local want
    want=$(cat "$T/want.txt" 2>/dev/null || true)
    if [ -z "$want" ]; then
        grep '^rows' "$T/out-$name.txt" >"$T/want.txt"
    elif [ "$(grep '^rows' "$T/out-$name.txt")" != "$want" ]; then
        echo "$kind $name OUTPUT-DIFFERS"
    fi
}

echo "# bench/baselines/spark.sh: $ROWS rows, driver -Xmx${HEAP}m, ParallelGC, local[2]; $(nproc) CPUs; $(date -u +%F)"
for i in $(seq "$RUNS"); do one native "native-$i" env >>"$R"; done
swap_start 4G
for pct in 75 50; do
    budget=$((HEAP * pct / 100))
    for i in $(seq "$RUNS"); do
        one "farmem-$pct" "farmem-$pct-$i" "$F" run --local "${budget}M" --stats -- >>"$R"
        if [ $SWAP_OK = 1 ]; then
            swap_limit $((budget + 192))
            one "swap-$pct" "swap-$pct-$i" in_swap >>"$R"
        fi
    done
    echo "$pct% of the heap local: budget ${budget}M"
done
median_table '
    printf "%-10s %8s %8s %10s %8s %9s %9s %9s\n", "kind", "job s", "GC s", "mutator s", "RSS MiB", "fetched", "written", "x native"
    base = med("native", 3)
    for (i = 1; i <= nk; i++) {
        k = order[i]; s = med(k, 3); g = med(k, 4)
        printf "%-10s %8.2f %8.2f %10.2f %8d %9s %9s %8.2fx\n", k, s, g, s - g, med(k, 5) / 1024, med(k, 6), med(k, 7), s / base
    }
'
