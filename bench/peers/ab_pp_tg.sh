#!/usr/bin/env bash
# Two or more builds of steermoe's bench_pp_tg side by side, alternating, the order rotated each
# round: prints one JSON line per (round, test, build) with bench_pp_tg's own JSON inside.
#   BINS="old/bench_pp_tg new/bench_pp_tg" bench/peers/ab_pp_tg.sh [ROUNDS] > ab.jsonl
# DIR holds compare.py's 8-layer files; THREADS (2); BESIDE_READS=FILE keeps `dd iflag=direct`
# reading FILE all along (compute beside disk reads, as on the SSD tier). TESTS replaces the
# tests ("name:file:flag:n" separated by spaces) and EXTRA adds arguments to every run (`--floor`
# for decode: each run judged against the read floor probed just before it).
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/bench_common/quiet.sh
R=${1:-5}
DIR=${DIR:-/tmp/peers}
THREADS=${THREADS:-2}
read -r -a B <<< "${BINS:?set BINS to two or more bench_pp_tg paths}"
nb=${#B[@]}
quiet
if [ -n "${BESIDE_READS:-}" ]; then
  (while true; do dd if="$BESIDE_READS" of=/dev/null iflag=direct bs=4M status=none; done) &
  reader=$!
  trap 'kill $reader 2>/dev/null; pkill -f "dd if=$BESIDE_READS" || true' EXIT
fi
tests=("q4pp:olmoe-1b-7b-8l-q4_k_m-llama.gguf:-p:128" "bf16tg:olmoe-1b-7b-8l-bf16.gguf:-n:48"
       "q4tg:olmoe-1b-7b-8l-q4_k_m-llama.gguf:-n:48" "q8pp:olmoe-1b-7b-8l-q8_0-llama.gguf:-p:128")
if [ -n "${TESTS:-}" ]; then read -r -a tests <<< "$TESTS"; fi
read -r -a extra <<< "${EXTRA:-}"
for r in $(seq "$R"); do
  for spec in "${tests[@]}"; do
    IFS=: read -r name file flag n <<< "$spec"
    for j in $(seq 0 $((nb - 1))); do
      b=${B[$(((j + r) % nb))]}
      out=$("$b" -m "$DIR/$file" -t "$THREADS" "$flag" "$n" -r 3 "${extra[@]}")
      echo "{\"round\": $r, \"test\": \"$name\", \"bin\": \"$b\", \"out\": $out}"
    done
  done
done
