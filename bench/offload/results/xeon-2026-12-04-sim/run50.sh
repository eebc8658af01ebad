#!/bin/bash
# The simulator against measurement on the Xeon's disk, 25% of experts in RAM (docs/figures.md).
cd /work/main
S=build/steermoe; M=/tmp/steermoe-ssd/olmoe-1b-7b-q4_k_m.gguf; T=/tmp/steermoe-ssd/real-trace
CAL=models/steer-olmoe-small/calib.smcal; O=/tmp/ssd2
echo "profile $(date) $(uptime)"
$S profile -m $M --scores-from $T --calib $CAL --link disk --residency 0.5 -t 2 --rounds 1 --windows 1 \
  --window-len 48 -o $O/profile-0.5.json
echo "bench $(date) $(uptime)"
$S bench -m $M --scores-from $T --calib $CAL --link disk --residency 0.5 -t 2 --policy exact:evict=lru \
  cacheprior:lambda=0.2 cacheprior:lambda=0.3 psr:lambda=0.3,n=2,gate=bonus psr:lambda=0.3,n=1 \
  --rounds 3 --windows 2 --window-len 48 --predict $O/profile-0.5.json --json $O/bench-0.5.json
echo "done $(date) $(uptime)"
