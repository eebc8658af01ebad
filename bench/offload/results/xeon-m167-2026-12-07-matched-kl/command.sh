#!/bin/bash
# PSR against Cache-Prior at matched KL on the SSD tier (Intel Xeon family 6 model 167,
# 2026-12-07 night): the goal asks a PSR-family configuration at least as fast as
# Cache-Prior at no higher KL at 25% and 50%. At equal lambda PSR n 2 gate=bonus diverges less
# (the earlier runs compared equal lambdas and found a tie); PSR lambda 0.36 matches
# Cache-Prior 0.35's KL (kl on the shipped model, 96 windows of 256 tokens:
# 0.1365 vs 0.1350 at 25%, 0.1053 vs 0.1057 at 50%; kl-*.json here).
# Same model, trace and protocol as ssd_tier.sh (OLMoE-1B-7B shape Q4_K_M from disk, routing of
# the shipped model's trace, 2 threads), --moe-wait ready, 10 rounds x 2 windows x 48 tokens.
set -euo pipefail
cd /work/main
S=build/steermoe; DIR=/tmp/ssd; OUT=bench/offload/results/xeon-m167-2026-12-07-matched-kl
model=$DIR/olmoe-1b-7b-q4_k_m.gguf; TRACE=$DIR/real-trace
. bench/bench_common/quiet.sh
# KL side (deterministic; run before, under load):
#   for C in 16 32; do $S kl -m models/steer-olmoe-small -f data/text-small/eval.txt --cache $C \
#     -t 1 --max-windows 96 --policy cacheprior:lambda=0.35 psr:lambda=0.35,n=2,gate=bonus \
#     psr:lambda=0.37,n=2,gate=bonus psr:lambda=0.4,n=2,gate=bonus cacheprior:lambda=0.4 \
#     --json $OUT/kl-c$C.json; done   (and psr:lambda=0.36,n=2,gate=bonus into kl-psr036-c$C.json)
for res in 0.25 0.5; do
  quiet
  $S bench -m $model --scores-from $TRACE --calib models/steer-olmoe-small/calib.smcal \
    --link disk --residency $res -t 2 --moe-wait ready --no-floor \
    --policy cacheprior:lambda=0.35 psr:lambda=0.35,n=2,gate=bonus psr:lambda=0.36,n=2,gate=bonus \
    --rounds 10 --windows 2 --window-len 48 \
    --json $OUT/bench-q4_k_m-$res.json | tee $OUT/bench-q4_k_m-$res.md
  $S compare --latency $OUT/bench-q4_k_m-$res.json \
    --baseline "cacheprior:lambda=0.35@$([ $res = 0.25 ] && echo 16 || echo 32) disk" \
    | tee $OUT/compare-$res.md
done
