for i in 1 2; do
  for t in /tmp/old /work/main; do
    echo "== $t round $i"
    (cd $t && REDUNDANCY=ec:4+2 NSERVERS=7 SECS=30 bash bench/cluster/repair-rate.sh 1 1024 2>&1 | grep -v Killed | grep "run 1")
  done
done
