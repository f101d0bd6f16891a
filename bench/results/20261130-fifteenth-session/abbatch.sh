#!/bin/bash
# abbatch.sh RUNS -- abflush.sh (../20261130-thirteenth-session) with FARMEM_EVICT_BATCH as the side
# (SIDES="128 32"), one build (this tree) on both sides: the thirteenth session's script, edited.
here=$(dirname "$0")
sed -e 's/for side in old new; do/for side in $SIDES; do/' \
    -e 's|   if \[ $side = old \]; then B=/tmp/old/target/release; else B=/work/main/target/release; fi|   B=/work/main/target/release; export FARMEM_EVICT_BATCH=$side|' \
    "$here/../20261130-thirteenth-session/abflush.sh" | bash -s -- "$@"
