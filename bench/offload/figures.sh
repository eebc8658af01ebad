#!/usr/bin/env bash
# The offloading figures of docs/figures.md ("Offloaded decoding"): bench (latency protocol) and
# kl on the shipped model, disk and emulated links, 50% and 25% residency, every baseline side by
# side in one run per (link, residency). Usage: bench/offload/figures.sh [BUILD_DIR] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
OUT=${2:-offload-figures}
M=${MODEL:-models/steer-olmoe-small}
TEXT=${TEXT:-data/text-small/eval.txt}
ROUNDS=${ROUNDS:-3}
WINDOWS=${WINDOWS:-4}
LEN=${LEN:-64}
mkdir -p "$OUT"
POLICIES=(exact:evict=lru exact:evict=a,n=1 cacheprior:lambda=0.2 psr:lambda=0.2,n=1 psr:lambda=0.3,n=1)
for res in 0.5 0.25; do
  "$BUILD/steermoe" kl -m "$M" -f "$TEXT" --policy "${POLICIES[@]}" --residency "$res" \
    --window-len 256 --max-windows "${KL_WINDOWS:-40}" --json "$OUT/kl-$res.json" > "$OUT/kl-$res.md"
  for link in disk "emulated:${EMULATED_GBPS:-16},${EMULATED_US:-10}"; do
    tag=${link%%:*}
    "$BUILD/steermoe" bench -m "$M" -f "$TEXT" --policy "${POLICIES[@]}" --residency "$res" \
      --link "$link" --rounds "$ROUNDS" --windows "$WINDOWS" --window-len "$LEN" --token-ms \
      --json "$OUT/bench-$tag-$res.json" > "$OUT/bench-$tag-$res.md"
  done
done
for f in "$OUT"/*.md; do echo "== $f"; cat "$f"; done
