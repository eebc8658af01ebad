#!/bin/bash
# BF16 decode as one stream (kernels_avx512.cpp, Bf16Prefetch::kAhead) and the K-quant decode
# prefetch distances (quant_avx512_tiles.inc), against the commit before (0c72ba9), side by side:
# bench_pp_tg of both builds alternating, the order rotated each round (bench/peers/ab_pp_tg.sh).
# Machine: 2-core Intel Xeon (family 6 model 167 as the Firecracker guest reports it, AVX-512
# BF16 / VNNI, path avx512bf16), 2026-12-05; the 8-layer OLMoE-1B-7B files of compare.py.
#   git worktree add /tmp/base 0c72ba9 && cmake -S /tmp/base -B /tmp/base/build -G Ninja \
#     -DCMAKE_BUILD_TYPE=Release && ninja -C /tmp/base/build bench_pp_tg
#   then this script from the repository root; python3 ratios.py FILE.jsonl per file.
# Files: decode-1t (first version: Q8_0 at 3584 / 1024 too), q8_0-3584-1024-decode-1t (that Q8_0
# distance alone: slower, reverted), decode-2t-and-prefill (first version), q4_k_m-final-{1,2}t
# (the committed version: several-input tiles keep the longer K-quant distances).
set -euo pipefail
export BINS="/tmp/base/build/bench/peers/bench_pp_tg build/bench/peers/bench_pp_tg"
THREADS=1 EXTRA=--floor TESTS="bf16tg:olmoe-1b-7b-8l-bf16.gguf:-n:48 q8tg:olmoe-1b-7b-8l-q8_0-llama.gguf:-n:48 q4tg:olmoe-1b-7b-8l-q4_k_m-steermoe.gguf:-n:48" \
  bench/peers/ab_pp_tg.sh 3 > decode-1t.jsonl
THREADS=2 TESTS="bf16tg:olmoe-1b-7b-8l-bf16.gguf:-n:48 q8tg:olmoe-1b-7b-8l-q8_0-llama.gguf:-n:48 q4tg:olmoe-1b-7b-8l-q4_k_m-steermoe.gguf:-n:48 q8pp:olmoe-1b-7b-8l-q8_0-llama.gguf:-p:128 q4pp:olmoe-1b-7b-8l-q4_k_m-steermoe.gguf:-p:128" \
  bench/peers/ab_pp_tg.sh 3 > decode-2t-and-prefill.jsonl
for t in 1 2; do
  THREADS=$t TESTS="q4pp:olmoe-1b-7b-8l-q4_k_m-steermoe.gguf:-p:128 q4tg:olmoe-1b-7b-8l-q4_k_m-steermoe.gguf:-n:48" \
    bench/peers/ab_pp_tg.sh 3 > q4_k_m-final-${t}t.jsonl
done
# The AVX-512 path without VDPBF16PS (simd_generic.inc: decode in 2-row tiles, two-stage
# prefetch), against 0c72ba9 (/tmp/base; its generic kernels are those of the commit before):
export STEERMOE_KERNELS=avx512
THREADS=1 EXTRA=--floor TESTS="bf16tg:olmoe-1b-7b-8l-bf16.gguf:-n:48" bench/peers/ab_pp_tg.sh 3 > avx512-path-bf16-1t.jsonl
THREADS=2 TESTS="bf16tg:olmoe-1b-7b-8l-bf16.gguf:-n:48 bf16pp:olmoe-1b-7b-8l-bf16.gguf:-p:128" bench/peers/ab_pp_tg.sh 3 > avx512-path-bf16-2t.jsonl
