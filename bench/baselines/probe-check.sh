#!/usr/bin/env bash
# Check `farmem probe latency` against an independent C pointer chase
# (workloads/chase.c: its own RNG, chain, loop and timing) at the same working
# sets and page mode. Target: every size within 5%.
# usage: bench/baselines/probe-check.sh [4k|thp]
set -euo pipefail
cd "$(dirname "$0")/../.."
PAGES=${1:-4k}
T=target/release
[ -x $T/farmem ] || cargo build --release --quiet
gcc -O2 -Wall -Wextra -Werror workloads/chase.c -o $T/chase
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r); pages: $PAGES"
J=$($T/farmem probe latency --max 512M --pages "$PAGES" --json)
printf "%10s %12s %12s %8s\n" size "probe ns" "chase.c ns" diff
worst=0
for b in 16384 262144 4194304 67108864 268435456 536870912; do
    p=$(echo "$J" | python3 -c "import json,sys; d=json.load(sys.stdin); print([c['ns'] for c in d['curve'] if c['bytes']==$b][0])")
    # chase.c: median of three runs (this is a shared host).
    c=$(for k in 1 2 3; do $T/chase $b "$PAGES" | sed 's/.*ns=//'; done | sort -g | sed -n 2p)
    d=$(python3 -c "print(f'{($p/$c-1)*100:+.1f}%')")
    printf "%10s %12.2f %12.2f %8s\n" "$b" "$p" "$c" "$d"
    worst=$(python3 -c "print(max($worst, abs($p/$c-1)*100))")
done
echo "largest difference: ${worst}% (target: within 5%)"
