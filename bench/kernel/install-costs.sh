#!/usr/bin/env bash
# The kernel's costs of bringing a run of pages in and out, with no farmem
# (issue 42): bench/kernel/uffd-install-cost.c (UFFDIO_COPY against
# UFFDIO_MOVE, alone and with a second thread running) and
# bench/kernel/memfd-install-cost.c (two copies from a memory file against
# one copy from a mapping of it), at runs of 16 and 64 pages.
# usage: bench/kernel/install-costs.sh   (root, or vm.unprivileged_userfaultfd=1)
set -euo pipefail
cd "$(dirname "$0")/../.."
BENCH_COMMAND="bench/kernel/install-costs.sh $*"
. bench/lib/results-dir.sh
results_dir install-costs
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
gcc -O2 -Wall -Wextra -Werror -pthread -o "$bin/uffd" bench/kernel/uffd-install-cost.c
gcc -O2 -msse4.2 -Wall -Wextra -Werror -o "$bin/memfd" bench/kernel/memfd-install-cost.c
for b in 16 64; do
    "$bin/uffd" "$b"
    "$bin/uffd" "$b" spin
    "$bin/memfd" "$b"
done | tee "$R/runs.txt"
