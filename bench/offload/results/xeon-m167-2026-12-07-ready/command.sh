#!/bin/bash
# The SSD tier at 25% with --moe-wait ready and the lambda 0.35 settings beside the 0.3 ones
# (Intel Xeon family 6 model 167, 2026-12-07): does a deterministic configuration reach 0.6x the
# all-resident speed on this disk? Same model, trace and protocol as ssd_tier.sh.
set -euo pipefail
cd /work/main
S=build/steermoe; DIR=/tmp/ssd; OUT=bench/offload/results/xeon-m167-2026-12-07-ready
model=$DIR/olmoe-1b-7b-q4_k_m.gguf; TRACE=$DIR/real-trace
. bench/bench_common/quiet.sh
res=0.25
profile=$OUT/profile-q4_k_m-$res.json
quiet
$S profile -m $model --scores-from $TRACE --calib models/steer-olmoe-small/calib.smcal \
  --link disk --residency $res -t 2 --windows 1 --window-len 48 -o $profile
quiet
$S bench -m $model --scores-from $TRACE --calib models/steer-olmoe-small/calib.smcal \
  --link disk --residency $res -t 2 --policy exact:evict=lru cacheprior:lambda=0.3 cacheprior:lambda=0.35 psr:lambda=0.3,n=2,gate=bonus psr:lambda=0.35,n=2,gate=bonus \
  --rounds 5 --windows 2 --window-len 48 --predict $profile --moe-wait ready \
  --json $OUT/bench-q4_k_m-$res.json | tee $OUT/bench-q4_k_m-$res.md
