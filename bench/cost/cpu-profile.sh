#!/usr/bin/env bash
# Where the CPU goes under farmem, kernel included (issue 42): samples every
# process of COMMAND with perf's cpu-clock event (a software timer: this VM
# has no hardware counters) and call stacks, then splits the samples by the
# part of the page path their stack is in (bench/cost/cpu-profile.py): the
# program's code, farmem's, the fault and its signal, and each call farmem
# makes (pread, pwrite, UFFDIO_COPY, write-protect, unmap), with what runs
# inside them (the copies, memory cgroup charging, TLB shootdowns, page
# allocation). FARMEM_BREAKDOWN times farmem's calls from the inside; this
# also sees the kernel's work before farmem's handler runs.
#
#   [SECONDS_MAX=S] [HZ=999] bench/cost/cpu-profile.sh NAME -- COMMAND [ARGS...]
#
# NAME names the run folder (bench/results/DATE-cpu-profile-NAME). COMMAND
# is the whole command, e.g. `target/release/farmem run --local 36M --
# gapbs/bfs -g 19 -n 1`. SECONDS_MAX stops it (SIGINT) after S seconds and
# profiles what ran until then. Needs perf (Debian: apt-get install
# linux-perf) and root, or kernel.perf_event_paranoid <= 1 for the kernel's
# stacks. perf.data is deleted after; the summary stays (profile.txt).
set -euo pipefail
cd "$(dirname "$0")/../.."
NAME=${1:?usage: bench/cost/cpu-profile.sh NAME -- COMMAND [ARGS...]}
case "$NAME" in *[!A-Za-z0-9._-]*|-*) echo "cpu-profile.sh: NAME '$NAME' must be letters, digits, '.', '_' or '-' (it names the run folder)" >&2; exit 2 ;; esac
shift
[ "${1:-}" = "--" ] || { echo "cpu-profile.sh: expected -- before the command" >&2; exit 2; }
shift
[ $# -gt 0 ] || { echo "cpu-profile.sh: no command to profile" >&2; exit 2; }
command -v perf >/dev/null || { echo "cpu-profile.sh: perf is not installed (Debian: apt-get install linux-perf)" >&2; exit 2; }
HZ=${HZ:-999}
case "$HZ" in ''|*[!0-9]*) echo "cpu-profile.sh: HZ must be a number of samples a second, not '$HZ'" >&2; exit 2 ;; esac
SECONDS_MAX=${SECONDS_MAX:-0}
case "$SECONDS_MAX" in ''|*[!0-9]*) echo "cpu-profile.sh: SECONDS_MAX must be a whole number of seconds, not '$SECONDS_MAX'" >&2; exit 2 ;; esac
BENCH_COMMAND="SECONDS_MAX=$SECONDS_MAX HZ=$HZ bench/cost/cpu-profile.sh $NAME -- $*"
. bench/lib/results-dir.sh
results_dir "cpu-profile-$NAME"
data=$(mktemp /tmp/cpu-profile.XXXXXX.data)
trap 'rm -f "$data"' EXIT
run=(perf record -g -e cpu-clock -F "$HZ" -o "$data" -- "$@")
if [ "$SECONDS_MAX" -gt 0 ]; then
    run=(timeout -s INT "$SECONDS_MAX" "${run[@]}")
fi
# The command's own output is kept beside the profile; its exit status is
# reported, not fatal (a run stopped by SECONDS_MAX exits non-zero).
status=0
"${run[@]}" > "$R/output.txt" 2>&1 || status=$?
echo "command exit status: $status" >> "$R/output.txt"
perf script -i "$data" -F comm,tid,ip,sym,dso 2>/dev/null | python3 bench/cost/cpu-profile.py > "$R/profile.txt"
cat "$R/profile.txt"
echo "(run folder: $R; the command's output: $R/output.txt)"
