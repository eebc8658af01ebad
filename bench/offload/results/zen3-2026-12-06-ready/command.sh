#!/bin/bash
# ssd_tier.sh's runs with --moe-wait ready (bench and the simulator's prediction)
set -euo pipefail
cd /work/main
S=build/steermoe; DIR=/tmp/steermoe-ssd; OUT=/tmp/ssd-ready; mkdir -p $OUT
model=$DIR/olmoe-1b-7b-q4_k_m.gguf; TRACE=$DIR/real-trace
. bench/bench_common/quiet.sh
for res in 0.25 0.5; do
  profile=$OUT/profile-q4_k_m-$res.json
  quiet
  $S profile -m $model --scores-from $TRACE --calib models/steer-olmoe-small/calib.smcal \
    --link disk --residency $res -t 2 --windows 1 --window-len 48 -o $profile
  quiet
  $S bench -m $model --scores-from $TRACE --calib models/steer-olmoe-small/calib.smcal \
    --link disk --residency $res -t 2 --policy exact:evict=lru cacheprior:lambda=0.2 cacheprior:lambda=0.3 psr:lambda=0.3,n=1 psr:lambda=0.2,n=1,gate=bonus psr:lambda=0.3,n=2,gate=bonus \
    --rounds 5 --windows 2 --window-len 48 --predict $profile --moe-wait ready \
    --json $OUT/bench-q4_k_m-$res.json | tee $OUT/bench-q4_k_m-$res.md
done
