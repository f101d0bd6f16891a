#!/bin/bash
# rep4.sh: sequential replays of a few cases; prints case min pages runs displaced
F=${F:-/work/main/target/release/farmem}
cd /tmp/tr
for c in ${CASES:-bfs:25 pr:25 mg.B:50 cg.A:50 mg.W:50 cg.A:70}; do n=${c%:*}; pct=${c#*:}
  if [ -f $n.run$pct ]; then o=$($F trace $n.run$pct --refs $n.refs); else o=$($F trace $n.run50 --refs $n.refs --budget $(( $(cat $n.rss)*pct/100 ))K); fi
  echo "$c $(echo "$o" | awk '/Belady/ {m=$4} /policy, replayed/ {p=$4} /runs fetched, replayed/ {r=$4} /main pages displaced/ {d=$4} END {print m, p, r, d}')"
done
