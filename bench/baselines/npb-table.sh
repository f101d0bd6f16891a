#!/usr/bin/env bash
# The NPB table of issue 42: each NPB kernel all-local (its time and peak RSS
# set the budget), then under `farmem run --local` at each PERCENT of that
# peak, on the default page path (memory files from the embedded server).
# Prints, per run: NPB's own time, the ratio to all-local, its own
# verification, the bytes fetched and written back, the pages brought in
# (fetched bytes / 4 KiB, zero-filled pages not counted) and the missing
# faults (what kernel swap counts as major faults). A run past CAP seconds
# is stopped and reported as "did not finish", as the anchors do.
# usage: bench/baselines/npb-table.sh NPB_BIN_DIR PERCENT... [-- KERNEL...]
#   NPB_BIN_DIR: NPB-CPP's NPB-OMP/bin, built with `make cg CLASS=B` and so on
#   (fetched, never copied here). KERNEL: a binary's name there (default: cg.B
#   mg.B sp.B bt.B lu.B). CAP (environment): seconds a run may take (900).
#   OMP_NUM_THREADS (environment): NPB's threads (2).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] || { echo "usage: $0 NPB_BIN_DIR PERCENT... [-- KERNEL...]" >&2; exit 2; }
BIN=$(cd "$1" && pwd); shift
PCTS=(); KERNELS=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    [[ $1 =~ ^[1-9][0-9]?$ ]] || { echo "$0: PERCENT must be 1-99, not '$1'" >&2; exit 2; }
    PCTS+=("$1"); shift
done
[ $# -gt 0 ] && shift
KERNELS=("$@")
[ ${#KERNELS[@]} -gt 0 ] || KERNELS=(cg.B mg.B sp.B bt.B lu.B)
for k in "${KERNELS[@]}"; do
    [ -x "$BIN/$k" ] || { echo "$0: no NPB binary $BIN/$k (build it: make ${k%%.*} CLASS=${k##*.})" >&2; exit 2; }
done
CAP=${CAP:-900}
[[ $CAP =~ ^[1-9][0-9]*$ ]] || { echo "$0: CAP must be a number of seconds, not '$CAP'" >&2; exit 2; }
BENCH_COMMAND="CAP=$CAP bench/baselines/npb-table.sh $BIN ${PCTS[*]} -- ${KERNELS[*]}"
. bench/lib/results-dir.sh
results_dir npb-table
cargo build --release --quiet
FARMEM=$PWD/target/release/farmem
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

secs() { sed -nE 's/^ *Time in seconds *= *([0-9.]+).*/\1/p' | head -1; }
check() { grep -qE 'Verification *= *SUCCESSFUL' && echo verified || echo NOT-VERIFIED; }
field() { sed -nE "s|^ *$1 +([^ ].*)\$|\\1|p" | head -1 | sed -E 's/ +/ /g'; }
# "17.4G" -> pages of 4 KiB
pages() { awk -v s="$1" 'BEGIN { m = 1; u = substr(s, length(s));
    if (u == "K") m = 1024; else if (u == "M") m = 1048576; else if (u == "G") m = 1073741824;
    if (u ~ /[KMG]/) s = substr(s, 1, length(s) - 1);
    printf "%.2f M", s * m / 4096 / 1e6 }'; }

{
echo "| kernel | all-local | local | time | × all-local | fetched | written back | pages in | missing faults | check |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
for k in "${KERNELS[@]}"; do
    out=$( { /usr/bin/time -v "$BIN/$k"; } 2>&1 )
    echo "$out" > "$R/$k-local.txt"
    base=$(echo "$out" | secs)
    peak_kb=$(echo "$out" | awk -F: '/Maximum resident set size/ {gsub(/ /,"",$2); print $2}')
    for pct in "${PCTS[@]}"; do
        mb=$(( peak_kb * pct / 100 / 1024 ))
        rc=0
        o=$( { timeout --signal=INT --kill-after=30 "$CAP" /usr/bin/time -v \
            "$FARMEM" run --local "${mb}M" --stats -- "$BIN/$k"; } 2>&1 ) || rc=$?
        echo "$o" > "$R/$k-$pct.txt"
        t=$(echo "$o" | secs)
        fetched=$(echo "$o" | field 'fetched from backend')
        faults=$(echo "$o" | field 'faults \(missing / first write\)' | cut -d/ -f1 | tr -d ' ')
        if [ -n "$t" ]; then
            ratio=$(awk -v a="$t" -v b="$base" 'BEGIN { printf "%.1f×", a / b }')
            verdict=$(echo "$o" | check)
        else
            t="did not finish in ${CAP} s (rc $rc)"; ratio="> $(awk -v a="$CAP" -v b="$base" 'BEGIN { printf "%.0f×", a / b }')"
            verdict=-
        fi
        echo "| $k | $base s, $((peak_kb / 1024)) MiB | ${pct}% (${mb}M) | $t | $ratio | ${fetched:--} |" \
            "$(echo "$o" | field 'written back') | $( [ -n "$fetched" ] && pages "$fetched" || echo -) | ${faults:--} | $verdict |"
    done
done
} | tee "$R/table.md"
