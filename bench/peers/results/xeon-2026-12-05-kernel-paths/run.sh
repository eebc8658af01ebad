#!/bin/bash
# Kernel selection checked by measurement: whole-model decode (bench_pp_tg -n 48 --floor, 1 and
# 2 threads) on each kernel path this CPU can run (STEERMOE_KERNELS forces one), the paths
# alternating within each round. One JSON line per (round, type, threads, path).
#   bench/peers/results/xeon-2026-12-05-kernel-paths/run.sh [ROUNDS] > paths.jsonl
set -euo pipefail
cd "$(dirname "$0")/../../../.."
. bench/bench_common/quiet.sh
R=${1:-2}
DIR=${DIR:-/tmp/peers}
files=("bf16:olmoe-1b-7b-8l-bf16.gguf" "q8_0:olmoe-1b-7b-8l-q8_0-llama.gguf" "q4_k_m:olmoe-1b-7b-8l-q4_k_m-llama.gguf")
paths=(avx512bf16 avx512 avx2)
quiet
for r in $(seq "$R"); do
  for f in "${files[@]}"; do
    IFS=: read -r type file <<< "$f"
    for t in 1 2; do
      for j in 0 1 2; do
        k=${paths[$(((j + r) % 3))]}
        out=$(STEERMOE_KERNELS=$k build/bench/peers/bench_pp_tg -m "$DIR/$file" -t "$t" -n 48 -r 2 --floor)
        echo "{\"round\": $r, \"type\": \"$type\", \"threads\": $t, \"path\": \"$k\", \"out\": $out}"
      done
    done
  done
done
