#!/bin/bash
# The 25% rows at -t 1 (a core left for the disk link's I/O thread): gave run-t1.log (docs/figures.md)
cd /work/main
RES=0.25; O=/tmp/ssd7; mkdir -p $O
S=build/steermoe; M=/tmp/steermoe-ssd/olmoe-1b-7b-q4_k_m.gguf; T=/tmp/steermoe-ssd/real-trace
CAL=models/steer-olmoe-small/calib.smcal
echo "profile $(date) $(uptime)"
$S profile -m $M --scores-from $T --calib $CAL --link disk --residency $RES -t 1 --rounds 1 --windows 1 \
  --window-len 48 -o $O/profile-$RES.json
echo "bench $(date) $(uptime)"
$S bench -m $M --scores-from $T --calib $CAL --link disk --residency $RES -t 1 \
  --policy cacheprior:lambda=0.3 psr:lambda=0.3,n=2,gate=bonus psr:lambda=0.3,n=1 \
  --rounds 3 --windows 2 --window-len 48 --probe-rounds 256 --predict $O/profile-$RES.json \
  --json $O/bench-$RES.json
echo "done $(date) $(uptime)"
