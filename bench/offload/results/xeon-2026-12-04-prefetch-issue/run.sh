#!/bin/bash
cd /work/main
S=build/steermoe; M=/tmp/steermoe-ssd/olmoe-1b-7b-q4_k_m.gguf; T=/tmp/steermoe-ssd/real-trace
CAL=models/steer-olmoe-small/calib.smcal
for i in 1 2 3; do
  if [ $((i % 2)) = 1 ]; then order="boundary early"; else order="early boundary"; fi
  for issue in $order; do
    echo "== $i $issue $(uptime)"
    $S bench -m $M --scores-from $T --calib $CAL --link disk --residency 0.25 -t 2 \
      --policy cacheprior:lambda=0.3 psr:lambda=0.3,n=2,gate=bonus --rounds 3 --windows 2 --window-len 48 \
      --prefetch-issue $issue --json /tmp/ssd/bench-$issue-$i.json 2>/dev/null | head -8
  done
done
