#!/bin/bash
# The AVX-512 path without VDPBF16PS (STEERMOE_KERNELS=avx512: Skylake-SP / Cascade Lake / Ice Lake
# Xeons) decoding BF16: the strided 4-row tiles (STEERMOE_SKEW=0) against one stream with two
# chains (STEERMOE_SKEW=1; an experimental switch of that build, since removed: the one-stream
# decode is now the AVX-512 path's only decode). Intel Xeon family 6 model 167, 2 cores, quiet
# (load < 0.8), 2026-12-07 22:16 UTC; 8-layer OLMoE-1B-7B shape written by
# `steermoe make-model --arch olmoe --shape OLMoE-1B-7B --random --layers 8` (7.1 GB BF16).
# Each line of ab-bf16-tg48.jsonl: bench_pp_tg's JSON, 3 timed runs of 48 tokens, each against
# the read floor probed just before it (--floor).
for r in 1 2 3; do
  for s in 0 1; do
    for t in 1 2; do
      out=$(STEERMOE_SKEW=$s STEERMOE_KERNELS=avx512 /tmp/pptg_skew \
        -m /tmp/peers/olmoe-1b-7b-8l-bf16.gguf -t $t -n 48 -r 3 --floor)
      echo "{\"round\": $r, \"skew\": $s, \"threads\": $t, \"out\": $out}"
    done
  done
done
