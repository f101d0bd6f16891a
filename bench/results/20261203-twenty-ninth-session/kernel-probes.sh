#!/usr/bin/env bash
# The twenty-ninth session's kernel probes (issue 42), one run each:
# asynchronous write-protection against farmem's faults, and 2 MiB units
# moved through a bin of huge pages against 4 KiB runs copied in.
# usage: bash bench/results/20261203-twenty-ninth-session/kernel-probes.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=bench/results/20261203-twenty-ninth-session
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
gcc -O2 -Wall -Wextra -Werror -pthread -o "$bin/wp-async" bench/kernel/wp-async-cost.c
gcc -O2 -Wall -Wextra -Werror -pthread -o "$bin/thp-move" bench/kernel/thp-move-cost.c
for t in 0 1; do "$bin/wp-async" "$t" 8; done | tee "$out/wp-async-cost.txt"
for t in 0 1; do
    for a in huge nohuge; do
        for u in 0 1 2; do "$bin/thp-move" "$t" "$a" "$u"; done
    done
done | tee "$out/thp-move-cost.txt"
# One protect and one lift alone, the first line of wp-span-cost.
gcc -O2 -Wall -Wextra -Werror -pthread -o "$bin/wp-span" bench/kernel/wp-span-cost.c
for t in 0 1; do "$bin/wp-span" "$t" 2 | head -1; done | tee "$out/wp-span-lift.txt"
# A two-thread read sweep at four times its budget, paged in 2 MiB units or
# 4 KiB runs of 64 and of 16 by a SIGBUS handler; the 64 twice.
gcc -O2 -Wall -Wextra -Werror -pthread -o "$bin/unit-sweep" bench/kernel/unit-sweep.c
for r in 64 16 64; do "$bin/unit-sweep" 1024 4 "$r"; done | tee "$out/unit-sweep.txt"
