#!/bin/bash
# Where the simulator misses, row by row: one bench at 50% with every round probed and
# predicted, then split.py prints each round's measured and simulated stall and compute.
# The profile is the one measured an hour before (../xeon-2026-12-04-moe-wait/res-0.5/).
cd /work/main
S=build/steermoe; M=/tmp/steermoe-ssd/olmoe-1b-7b-q4_k_m.gguf; T=/tmp/steermoe-ssd/real-trace
CAL=models/steer-olmoe-small/calib.smcal
P=bench/offload/results/xeon-2026-12-04-moe-wait/res-0.5/profile-0.5-t2.json
O=${1:-/tmp/split}; mkdir -p $O
$S bench -m $M --scores-from $T --calib $CAL --link disk --residency 0.5 -t 2 --moe-wait ready \
  --policy cacheprior:lambda=0.3 psr:lambda=0.3,n=1 psr:lambda=0.3,n=2,gate=bonus --rounds 3 \
  --windows 2 --window-len 48 --probe-rounds 256 --predict $P --json $O/bench-0.5-ready.json \
  2> $O/bench-0.5-ready.log
python3 bench/offload/results/xeon-2026-12-04-split/split.py $O/bench-0.5-ready.json
