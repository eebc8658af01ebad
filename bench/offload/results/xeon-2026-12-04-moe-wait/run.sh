#!/bin/bash
# --moe-wait ready against all on the Xeon's disk (docs/figures.md, "A layer's MoE as its copies
# complete"): a short profile, then bench runs alternating the two modes (A B A B), each
# with every round probed and predicted (--probe-rounds 256 --predict), at one residency.
#   run.sh [RESIDENCY] [OUT] [THREADS] [PAIRS]
cd /work/main
RES=${1:-0.25}; O=${2:-/tmp/moewait}; TH=${3:-2}; PAIRS=${4:-2}
mkdir -p $O
S=build/steermoe; M=/tmp/steermoe-ssd/olmoe-1b-7b-q4_k_m.gguf; T=/tmp/steermoe-ssd/real-trace
CAL=models/steer-olmoe-small/calib.smcal
echo "profile $(date) $(uptime)"
$S profile -m $M --scores-from $T --calib $CAL --link disk --residency $RES -t $TH --rounds 1 --windows 1 \
  --window-len 48 -o $O/profile-$RES-t$TH.json
for pair in $(seq 1 $PAIRS); do
  for wait in all ready; do
    echo "bench $wait pair $pair $(date) $(uptime)"
    $S bench -m $M --scores-from $T --calib $CAL --link disk --residency $RES -t $TH --moe-wait $wait \
      --policy exact:evict=lru cacheprior:lambda=0.2 cacheprior:lambda=0.3 psr:lambda=0.3,n=2,gate=bonus \
      psr:lambda=0.3,n=1 --rounds 2 --windows 2 --window-len 48 --probe-rounds 256 \
      --predict $O/profile-$RES-t$TH.json --json $O/bench-$RES-t$TH-$wait-$pair.json
  done
done
echo "done $(date) $(uptime)"
