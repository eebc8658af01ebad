#!/usr/bin/env bash
# The SSD tier (docs/figures.md, "Experts on disk"): an OLMoE-1B-7B-shaped model with random
# weights, routed by the shipped model's recorded router scores (`bench --scores-from`), experts
# read from the model file on disk (--link disk: O_DIRECT, io_uring), at 25% and 50% of each
# layer's experts in RAM, every baseline side by side in one run per (type, residency), with the
# simulator's prediction from a profile measured here beside each row (`--predict`).
#
#   bench/offload/ssd_tier.sh [BUILD_DIR] [OUT_DIR]
#
# Environment: DIR (where the model files go; 4.3 GB for Q4_K_M, 13.8 GB more with TYPES=bf16),
# TYPES (q4_k_m), RESIDENCIES (0.25 0.5), THREADS (2), ROUNDS (5), WINDOWS (2), LEN (48),
# MEM_LIMIT (a budget for every bench, e.g. 2.6G; needs a writable memory cgroup), POLICIES.
# Measure on a quiet machine (1-minute load under 1.5): the script waits for it before each run.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
OUT=${2:-ssd-figures}
S="$BUILD/steermoe"
DIR=${DIR:-/tmp/steermoe-ssd}
TYPES=${TYPES:-q4_k_m}
RESIDENCIES=${RESIDENCIES:-0.25 0.5}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-5}
WINDOWS=${WINDOWS:-2}
LEN=${LEN:-48}
read -r -a POLICIES <<< "${POLICIES:-exact:evict=lru cacheprior:lambda=0.2 cacheprior:lambda=0.3 psr:lambda=0.3,n=1 psr:lambda=0.2,n=1,gate=bonus psr:lambda=0.3,n=2,gate=bonus}"
mkdir -p "$DIR" "$OUT"

. bench/bench_common/quiet.sh

TRACE="$DIR/real-trace"
if [ ! -f "$TRACE/meta.json" ]; then
  "$S" trace -m models/steer-olmoe-small -f data/text-small/eval.txt -o "$TRACE" --window 256 \
    --max-tokens 512
fi
for type in $TYPES; do
  model="$DIR/olmoe-1b-7b-$type.gguf"
  if [ ! -f "$model" ]; then
    if [ "$type" = bf16 ]; then
      "$S" make-model --arch olmoe --shape OLMoE-1B-7B --random --dtype bf16 -o "$model"
    else
      "$S" make-model --arch olmoe --shape OLMoE-1B-7B --random --type "$type" -o "$model"
    fi
  fi
  for res in $RESIDENCIES; do
    profile="$OUT/profile-$type-$res.json"
    quiet
    # The machine as the simulator sees it: this link and this compute, under exact LRU.
    "$S" profile -m "$model" --scores-from "$TRACE" --calib models/steer-olmoe-small/calib.smcal \
      --link disk --residency "$res" -t "$THREADS" --windows 1 --window-len "$LEN" -o "$profile"
    budget=()
    [ -n "${MEM_LIMIT:-}" ] && budget=(--mem-limit "$MEM_LIMIT")
    quiet
    "$S" bench -m "$model" --scores-from "$TRACE" --calib models/steer-olmoe-small/calib.smcal \
      --link disk --residency "$res" -t "$THREADS" --policy "${POLICIES[@]}" \
      --rounds "$ROUNDS" --windows "$WINDOWS" --window-len "$LEN" --predict "$profile" \
      "${budget[@]}" --json "$OUT/bench-$type-$res.json" | tee "$OUT/bench-$type-$res.md"
  done
done
