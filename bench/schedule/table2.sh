#!/usr/bin/env bash
# The simulator's version of the paper's Table 2 (docs/simulator.md): synthetic OLMoE-shaped
# traces, rtx4090-olmoe profile, 50% and 25% residency. Usage: table2.sh [BUILD_DIR] [WORK_DIR]
set -euo pipefail
BUILD=${1:-build}
WORK=${2:-/tmp/steermoe-table2}
S="$BUILD/steermoe"
mkdir -p "$WORK"
# Knobs chosen once so that exact routing with LRU makes about as many copies per token as in
# the paper (~30 at 50% residency); every other figure is a prediction.
KNOBS=(--shape olmoe --popularity 0.7 --predictability 0.9 --model-seed 1)
"$S" trace-synth "${KNOBS[@]}" --tokens 8192 --sequences 16 --seed 1 -o "$WORK/heldout" >/dev/null
"$S" trace-synth "${KNOBS[@]}" --tokens 4096 --sequences 8 --seed 2 -o "$WORK/eval" >/dev/null
"$S" calibrate --trace "$WORK/heldout" -o "$WORK/olmoe.smcal" >/dev/null
for cache in 32 16; do
  echo "== cache $cache of 64"
  "$S" sim --trace "$WORK/eval" --calib "$WORK/olmoe.smcal" --profile rtx4090-olmoe \
    --cache "$cache" --json "$WORK/sim-c$cache.json" --latencies "$WORK/latency-c$cache.csv" \
    --policy exact:evict=lru exact:evict=a,n=1 exact:evict=a,n=2 cacheprior:lambda=0.2 \
    psr:lambda=0.3,n=1 psr:lambda=0.25,n=1
done
