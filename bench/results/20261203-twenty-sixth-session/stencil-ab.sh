while ! grep -q '== end' /tmp/r25/ab-all.log; do sleep 5; done
for r in 1 2; do for side in old new; do
  T=/work/main/target/release; [ $side = old ] && T=/tmp/old/target/release
  echo "== stencil7 $side round $r $(date)"
  $T/farmem bench stencil7 --expansion 4 --systems local,farmem --runs 3
done; done
echo "== stencil end"
