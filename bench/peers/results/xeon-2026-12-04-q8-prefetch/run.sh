#!/bin/bash
# The Q8_0 decode prefetch distances (kZAheadQ8_0 into L2, kZNearQ8_0 into L1, in
# src/kernels/quant_avx512_tiles.inc) with the weights in 2 MiB pages: one bench_pp_tg per pair of
# distances, then alternating rounds. Lines: "L2-L1 fraction_of_floor x3 tok/s x3".
#   run.sh "4096 1024" "4096 2048" ...      (from the repository root, build/ configured)
f=src/kernels/quant_avx512_tiles.inc
cp $f /tmp/tiles.orig
for v in "$@"; do
  set -- $v
  sed -i "s/^constexpr size_t kZAheadQ8_0 = .*/constexpr size_t kZAheadQ8_0 = $1;/; s/^constexpr size_t kZNearQ8_0 = .*/constexpr size_t kZNearQ8_0 = $2;/" $f
  ninja -C build bench/peers/bench_pp_tg >/dev/null && cp build/bench/peers/bench_pp_tg /tmp/bpt-$1-$2
done
cp /tmp/tiles.orig $f
ninja -C build bench/peers/bench_pp_tg >/dev/null
for round in 1 2 3; do
  for bin in /tmp/bpt-*; do
    echo "${bin#/tmp/bpt-} $($bin -m /tmp/peers/olmoe-8l-q8_0.gguf -t 1 -n 32 -r 3 --floor 2>/dev/null |
      python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join("%.3f"%x for x in d["fraction_of_floor"]), " ".join("%.1f"%x for x in d["tok_s"]))')"
  done
done
