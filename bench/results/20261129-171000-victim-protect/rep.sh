#!/bin/bash
# replay every case; print name budget MIN LRU replay ratio
cd /tmp/st
F=${F:-/work/main/target/release/farmem}
while read name run refs budget; do
  o=$($F trace $run --refs $refs ${budget:+--budget $budget} 2>&1)
  min=$(echo "$o" | awk '/Belady/ {print $4}')
  lru=$(echo "$o" | awk '/LRU seeing every hit/ {print $5}')
  rep=$(echo "$o" | awk '/policy, replayed/ {print $4}')
  printf "%-8s %8s MIN %8s LRU %5.2f replay %8s %5.2fx\n" $name "${budget:--}" $min $(echo "$lru/$min" | bc -l) $rep $(echo "$rep/$min" | bc -l)
done <<CASES
bfsq bfs.tr bfsrefs.tr
bfsh bfsh.run bfsh.refs
prq prq.run prq.refs
prh prq.run prq.refs 10740K
qs qs.run qs.refs
qsq qs.run qs.refs 8702K
st st.run st.refs
mgw mgw.run mgw.refs
mgwq mgw.run mgw.refs 14936K
cgw cgw.run cgw.refs
cgwq cgw.run cgw.refs 2805K
st4x run.tr refs.tr
spw spw.run spw.refs
spwh spw.run spw.refs 6132K
CASES
