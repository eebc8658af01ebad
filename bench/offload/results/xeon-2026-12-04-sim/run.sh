#!/bin/bash
# The simulator against measurement on the Xeon's disk (docs/figures.md, "The simulator on the
# Xeon's disk"): a short profile, then bench with --predict, at one residency.
#   run.sh [RESIDENCY]   (0.25 gave run.log, 0.5 gave run50.log)
cd /work/main
RES=${1:-0.25}
S=build/steermoe; M=/tmp/steermoe-ssd/olmoe-1b-7b-q4_k_m.gguf; T=/tmp/steermoe-ssd/real-trace
CAL=models/steer-olmoe-small/calib.smcal; O=/tmp/ssd2
echo "profile $(date) $(uptime)"
$S profile -m $M --scores-from $T --calib $CAL --link disk --residency $RES -t 2 --rounds 1 --windows 1 \
  --window-len 48 -o $O/profile-$RES.json
echo "bench $(date) $(uptime)"
$S bench -m $M --scores-from $T --calib $CAL --link disk --residency $RES -t 2 --policy exact:evict=lru \
  cacheprior:lambda=0.2 cacheprior:lambda=0.3 psr:lambda=0.3,n=2,gate=bonus psr:lambda=0.3,n=1 \
  --rounds 3 --windows 2 --window-len 48 --predict $O/profile-$RES.json --json $O/bench-$RES.json
echo "done $(date) $(uptime)"
