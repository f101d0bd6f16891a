#!/usr/bin/env bash
# farmem's timed-region traffic against the least any paging policy moves,
# for the built-in workloads that have such a bound (one run per cell,
# local and farmem only; add systems with SYSTEMS=local,farmem,swap,zram).
# usage: bench/cost/bound-table.sh   (after cargo build --release, make -C workloads)
set -euo pipefail
cd "$(dirname "$0")/../.."
F=target/release/farmem
S=${SYSTEMS:-local,farmem}
$F bench memwrite --size 1G --expansion 4 --systems "$S"
$F bench stencil7 --size 512M --expansion 4 --variant temporal --systems "$S"
$F bench himeno --size 512M --expansion 1.67 --systems "$S"
$F bench pagerank --size 512M --expansion 2,4 --systems "$S"
