#!/usr/bin/env bash
# What `farmem run` costs a program that allocates nothing large:
# mallocbench natively and under the shim, alternated ROUNDS times in one run;
# prints the median of each and their ratio (target: <= 1.05).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-7}
T=target/release
[ -e $T/libfarmem_preload.so ] || cargo build --release --quiet
gcc -O2 -Wall -Wextra -Werror workloads/mallocbench.c -o $T/mallocbench
echo "machine: $(nproc) CPUs, kernel $(uname -r); mallocbench 20M steps, $ROUNDS rounds alternating"
nat=(); shim=()
for i in $(seq "$ROUNDS"); do
    nat+=("$($T/mallocbench 20 | sed 's/.*seconds=\([0-9.]*\).*/\1/')")
    shim+=("$($T/farmem run --local 64M -- $T/mallocbench 20 | sed 's/.*seconds=\([0-9.]*\).*/\1/')")
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
n=$(med "${nat[@]}"); s=$(med "${shim[@]}")
echo "native   median ${n} s   (${nat[*]})"
echo "farmem   median ${s} s   (${shim[*]})"
awk -v n="$n" -v s="$s" 'BEGIN { printf "ratio farmem/native: %.3f (target <= 1.05)\n", s / n }'
