#!/bin/bash
# The simulator against measurement on the Xeon's disk, each round predicted with the link probed
# right before it and the compute of the run's floor row (docs/figures.md, "Each round predicted
# with the disk probed before it"): a short profile, then bench --probe-rounds 256 --predict, at
# one residency (0.25 gave run25.log, 0.5 run50.log, into /tmp/ssd5 and /tmp/ssd6).
#   run.sh [RESIDENCY] [OUT]
cd /work/main
RES=${1:-0.25}; O=${2:-/tmp/ssd3}
mkdir -p $O
S=build/steermoe; M=/tmp/steermoe-ssd/olmoe-1b-7b-q4_k_m.gguf; T=/tmp/steermoe-ssd/real-trace
CAL=models/steer-olmoe-small/calib.smcal
echo "profile $(date) $(uptime)"
$S profile -m $M --scores-from $T --calib $CAL --link disk --residency $RES -t 2 --rounds 1 --windows 1 \
  --window-len 48 -o $O/profile-$RES.json
echo "bench $(date) $(uptime)"
$S bench -m $M --scores-from $T --calib $CAL --link disk --residency $RES -t 2 --policy exact:evict=lru \
  cacheprior:lambda=0.2 cacheprior:lambda=0.3 psr:lambda=0.3,n=2,gate=bonus psr:lambda=0.3,n=1 \
  --rounds 3 --windows 2 --window-len 48 --probe-rounds 256 --predict $O/profile-$RES.json \
  --json $O/bench-$RES.json
echo "done $(date) $(uptime)"
