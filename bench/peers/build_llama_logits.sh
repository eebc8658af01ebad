#!/usr/bin/env bash
# Builds bench/peers/llama_logits.cpp against the llama.cpp build that build_llama.sh made in DIR
# (default /work/llama): its static libraries, its headers. Never part of CI.
#
#   bench/peers/build_llama_logits.sh [DIR] [OUT]     (OUT default DIR/build/bin/llama_logits)
set -euo pipefail
dir=${1:-/work/llama}
out=${2:-$dir/build/bin/llama_logits}
src=$dir/src/vendor/llama.cpp
b=$dir/build
for lib in src/libllama.a ggml/src/libggml.a ggml/src/libggml-cpu.a ggml/src/libggml-base.a; do
  [[ -f $b/$lib ]] || { echo "build_llama_logits.sh: $b/$lib missing: run bench/peers/build_llama.sh $dir" >&2; exit 1; }
done
g++ -O2 -std=c++17 "$(dirname "$0")/llama_logits.cpp" -I"$src/include" -I"$src/ggml/include" \
  -o "$out" "$b/src/libllama.a" "$b/ggml/src/libggml.a" "$b/ggml/src/libggml-cpu.a" \
  "$b/ggml/src/libggml-base.a" -fopenmp -lpthread -ldl
echo "built $out"
