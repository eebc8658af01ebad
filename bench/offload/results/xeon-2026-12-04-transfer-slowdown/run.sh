#!/bin/bash
# The simulator against measurement on the Xeon's disk with the link slowed by compute modelled
# (link.transfer_slowdown, measured by `profile`), each round predicted with the link probed right
# before it and the floor row's compute (docs/figures.md, "The link slowed by compute"): a short
# profile, then bench --probe-rounds 256 --predict at one residency. The bench also reports each
# row's prediction without the term (simulated_probed_without_transfer_slowdown_ms_per_token).
#   run.sh [RESIDENCY] [OUT] [THREADS]
cd /work/main
RES=${1:-0.25}; O=${2:-/tmp/ssd7}; TH=${3:-2}
mkdir -p $O
S=build/steermoe; M=/tmp/steermoe-ssd/olmoe-1b-7b-q4_k_m.gguf; T=/tmp/steermoe-ssd/real-trace
CAL=models/steer-olmoe-small/calib.smcal
echo "profile $(date) $(uptime)"
$S profile -m $M --scores-from $T --calib $CAL --link disk --residency $RES -t $TH --rounds 1 --windows 1 \
  --window-len 48 -o $O/profile-$RES-t$TH.json
echo "bench $(date) $(uptime)"
$S bench -m $M --scores-from $T --calib $CAL --link disk --residency $RES -t $TH --policy exact:evict=lru \
  cacheprior:lambda=0.2 cacheprior:lambda=0.3 psr:lambda=0.3,n=2,gate=bonus psr:lambda=0.3,n=1 \
  --rounds 3 --windows 2 --window-len 48 --probe-rounds 256 --predict $O/profile-$RES-t$TH.json \
  --json $O/bench-$RES-t$TH.json
echo "done $(date) $(uptime)"
