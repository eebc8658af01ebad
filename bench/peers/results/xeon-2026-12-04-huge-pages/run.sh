#!/bin/bash
# Decode with the weights in 2 MiB pages against the build before (233c26b: 4 KiB pages), one
# GGUF per type (OLMoE-1B-7B shape, 8 layers, make-model), alternating builds, 3 pairs per
# (type, threads); bench_pp_tg --floor probes the read floor before every timed run (in 2 MiB
# pages in the new build, 4 KiB in the old).  run.sh BASE_BUILD NEW_BUILD > run.log
BASE=${1:-/tmp/base/build}; NEW=${2:-build}
for t in 1 2; do
  for type in bf16 q8_0 q4_k_m; do
    for pair in 1 2 3; do
      for side in base new; do
        b=$BASE; [ $side = new ] && b=$NEW
        echo "$type t$t pair$pair $side $($b/bench/peers/bench_pp_tg -m /tmp/peers/olmoe-8l-$type.gguf -t $t -n 32 -r 3 --floor 2>/dev/null | tr -d '\n')"
      done
    done
  done
done
