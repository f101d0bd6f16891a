#!/bin/bash
# rep2.sh: replay current build on the case list; prints name pages xMIN runs cost(=5*runs+pages)
F=${F:-/work/main/target/release/farmem}
cd /tmp/tr
cases="cg.W:50 cg.W:25 mg.W:50 mg.W:25 bfs:50 bfs:25 pr:50 pr:25 qsort:50 qsort:25 stencil7:50 stencil7:25 cg.A:50 cg.A:25 cg.A:70 cg.A:85 mg.B:50 mg.B:25 mg.B:70 ${EXTRA:-}"
[ -n "$NOB" ] && cases=$(echo $cases | tr ' ' '\n' | grep -v mg.B)
for c in $cases; do n=${c%:*}; pct=${c#*:}
  ( if [ -f $n.run$pct ]; then o=$($F trace $n.run$pct --refs $n.refs); else o=$($F trace $n.run50 --refs $n.refs --budget $(( $(cat $n.rss)*pct/100 ))K); fi
  min=$(echo "$o" | awk '/Belady/ {print $4}')
  rep=$(echo "$o" | awk '/policy, replayed/ {print $4}')
  runs=$(echo "$o" | awk "/runs fetched, replayed/ {print \$4}"); disp=$(echo "$o" | awk "/main pages displaced/ {print \$4}")
  echo "$c $min $rep $runs $disp" ) &
done | sort -V > /tmp/tr/rep3.out; wait
awk '{printf "%-12s MIN %8d rep %8d %5.2fx runs %7d (%4.1f/run) cost %9d\n",$1,$2,$3,$3/$2,$4,$3/$4,5*$4+$3}' /tmp/tr/rep3.out
