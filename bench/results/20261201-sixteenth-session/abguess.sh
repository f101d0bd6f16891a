#!/bin/bash
# abguess.sh RUNS -- abflush.sh (../20261130-thirteenth-session) with FARMEM_GUESS_WRITES as the side
# (SIDES="0 1"), one build (this tree) on both sides, and the write-protect faults, the write guesses and
# the bytes written back added to each line; with LOGDIR set, each run's whole output is kept there.
here=$(dirname "$0")
SIDES=${SIDES:-"0 1"}
export SIDES
sed -e 's/for side in old new; do/for side in $SIDES; do/' \
    -e 's|   if \[ $side = old \]; then B=/tmp/old/target/release; else B=/work/main/target/release; fi|   B=/work/main/target/release; export FARMEM_GUESS_WRITES=$side|' \
    -e 's|   evicted=\$(echo "\$out" \| awk ./evicted pages/ {print \$3}.)|&\n   extra=$(echo "$out" \| awk '"'"'/faults \\(missing/ {w=$8} /write guesses/ {g=$4" "$6" "$7" "$9} /written back/ {b=$3} END {print "wpf " w " guesses " g " wb " b}'"'"')|' \
    -e 's|"\$fetched" "\$ver"$|"$fetched" "$ver"; echo "       $extra"; [ -n "$LOGDIR" ] \&\& echo "$out" > "$LOGDIR/r$r-$budget-$(basename "${prog%% *}")-$side.log"|' \
    "$here/../20261130-thirteenth-session/abflush.sh" | bash -s -- "$@"
