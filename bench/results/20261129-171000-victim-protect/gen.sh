#!/bin/bash
# name local cmd...
cd /tmp/st
F=/work/main/target/release/farmem
export OMP_NUM_THREADS=2
name=$1 loc=$2; shift 2
[ -f $name.refs ] || FARMEM_PREFETCH=0 $F run --local 1M --trace $name.refs -- "$@" >/dev/null 2>&1
$F run --local $loc --trace $name.run -- "$@" >/dev/null 2>&1
