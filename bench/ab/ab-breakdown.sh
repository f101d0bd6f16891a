#!/usr/bin/env bash
# Where a page's time goes, an OLD tree against this one (issue 42): one
# program under `farmem run --local LOCAL --stats` with FARMEM_BREAKDOWN=1,
# alternating old and new, ROUNDS rounds, on the default page path (memory
# files from the embedded server). Prints, per run, the wall time, the
# program's own time where it prints one (NPB's "Time in seconds"), the pages
# moved, and farmem's ns per page for each part of the breakdown; then the
# median of each over the rounds, side by side. A part that moved by less
# than the spread between rounds of one side has not moved.
# usage: bench/ab/ab-breakdown.sh OLD_TREE ROUNDS LOCAL -- PROGRAM [ARG...]
#   OLD_TREE: `git worktree add /tmp/old COMMIT`, built with cargo build --release;
#   or `.`, this tree on both sides, the old side run with the assignments in
#   OLD_ENV (environment; OLD_ENV="FARMEM_EVICT_BLOCK=0": a setting against
#   its default).
#   LOCAL: the budget, as `farmem run --local` takes it (217M).
#   PROGRAM: anything farmem runs (NPB-CPP's NPB-OMP/bin/mg.B, fetched, never
#   copied here). OMP_NUM_THREADS (environment): its threads (2).
set -euo pipefail
usage() { echo "usage: $0 OLD_TREE ROUNDS LOCAL -- PROGRAM [ARG...]" >&2; exit 2; }
[ $# -ge 5 ] && [ "$4" = -- ] || usage
# Paths are the caller's: resolve them before moving to the repository.
OLD_ENV=${OLD_ENV:-}
if [ "$1" = . ]; then
    [ -n "$OLD_ENV" ] || { echo "$0: OLD_TREE '.' needs OLD_ENV, the old side's settings" >&2; exit 2; }
    OLD=$(cd "$(dirname "$0")/../.." && pwd)
else
    [ -x "$1/target/release/farmem" ] || { echo "$0: no $1/target/release/farmem (build the old tree with cargo build --release)" >&2; exit 2; }
    OLD=$(cd "$1" && pwd)
fi
for a in $OLD_ENV; do
    [[ $a =~ ^FARMEM_[A-Z_]+=[^[:space:]]*$ ]] || { echo "$0: OLD_ENV holds FARMEM_NAME=VALUE assignments, not '$a'" >&2; exit 2; }
done
ROUNDS=$2; LOCAL=$3; shift 4
[[ $ROUNDS =~ ^[1-9][0-9]?$ ]] || { echo "$0: ROUNDS must be 1-99, not '$ROUNDS'" >&2; exit 2; }
[[ $LOCAL =~ ^[1-9][0-9]*[KMG]$ ]] || { echo "$0: LOCAL must be a size such as 217M, not '$LOCAL'" >&2; exit 2; }
PROGRAM=$(command -v "$1") || { echo "$0: no program '$1'" >&2; exit 2; }
case $PROGRAM in /*) ;; *) PROGRAM=$PWD/$PROGRAM ;; esac
shift
set -- "$PROGRAM" "$@"
cd "$(dirname "$0")/../.."
BENCH_COMMAND="${OLD_ENV:+OLD_ENV=\"$OLD_ENV\" }bench/ab/ab-breakdown.sh $OLD $ROUNDS $LOCAL -- $*"
. bench/lib/results-dir.sh
results_dir ab-breakdown
keep_output
cargo build --release --quiet
NEW=$PWD/target/release/farmem
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} FARMEM_BREAKDOWN=1
echo "old: $OLD ($(git -C "$OLD" rev-parse --short HEAD))${OLD_ENV:+ with $OLD_ENV}  new: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo " with uncommitted changes")"
echo "program: $* at --local $LOCAL, $OMP_NUM_THREADS threads"

# One run: "key value" lines (wall, own, pages, then each part's ns/page).
one() {
    local farmem=$1 settings=$2 out
    shift 2
    # $settings: FARMEM_NAME=VALUE words (checked above), for env.
    # shellcheck disable=SC2086
    out=$({ /usr/bin/time -f "wall %e" env $settings "$farmem" run --local "$LOCAL" --stats -- "$@"; } 2>&1) || {
        echo "$0: the run failed:" >&2
        echo "$out" | tail -20 >&2
        exit 1
    }
    awk '
        /^wall / { print "wall_s", $2 }
        /Time in seconds/ { print "own_s", $NF }
        /^Build Time:/ { print "build_s", $NF }
        /fetched from backend/ {
            v = $NF; u = substr(v, length(v)); n = v + 0
            print "fetched_MiB", n * (u == "T" ? 1048576 : u == "G" ? 1024 : u == "M" ? 1 : u == "K" ? 1 / 1024 : 1 / 1048576)
        }
        /evicted pages/ { print "evicted", $3; for (i = 1; i <= NF; i++) if ($i == "block)") print "evicted_with_block", $(i - 3) }
        # The parts follow this line, indented by four; the next stat ends them.
        parts && /^  [a-z]/ { parts = 0 }
        /where the time went/ { parts = 1; for (i = 1; i <= NF; i++) if ($i == "in,") print "pages_in", $(i - 2) }
        parts && /^    [a-z]/ {
            # "    part name   total-ms   ns/page [note]": the name is what
            # comes before the first number, ns/page the second number.
            part = ""; got = 0
            for (i = 1; i <= NF; i++) {
                if ($i ~ /^[0-9.]+$/) { got++; if (got == 2) { ns = $i; break } }
                else if (got == 0) part = part (part == "" ? "" : "_") $i
            }
            gsub(/[:()+]/, "", part); gsub(/_+/, "_", part)
            if (got == 2) print part, ns
        }' <<<"$out"
}

for r in $(seq "$ROUNDS"); do
    for side in old new; do
        f=$NEW settings=
        [ $side = old ] && f=$OLD/target/release/farmem settings=$OLD_ENV
        one "$f" "$settings" "$@" > "$R/$side-$r.txt"
        printf 'round %s %s: %s\n' "$r" "$side" "$(tr '\n' ' ' < "$R/$side-$r.txt")"
    done
done
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) printf "%.10g\n", v[(NR + 1) / 2]; else printf "%.10g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo
printf '%-34s %12s %12s   (median of %s rounds; ns per page unless named)\n' part old new "$ROUNDS"
while read -r k _; do
    o=$(cat "$R"/old-*.txt | awk -v k="$k" '$1 == k { print $2 }' | median)
    n=$(cat "$R"/new-*.txt | awk -v k="$k" '$1 == k { print $2 }' | median)
    printf '%-34s %12s %12s\n' "$k" "$o" "$n"
done < <(cat "$R/old-1.txt" "$R/new-1.txt" | awk '!seen[$1]++')
