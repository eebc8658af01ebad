#!/usr/bin/env bash
# Installs what steermoe needs, builds it, and runs the main job on the shipped default model:
# the small trained OLMoE-architecture MoE (models/steer-olmoe-small) continuing a prompt with
# prefetch-steered routing on a cache of 32 of 64 experts per layer (50% residency), its experts
# read from the model file into the cache slots with O_DIRECT (`--link disk`; LINK=resident
# keeps them in place, LINK=emulated:16,10 emulates a PCIe link). The text is the same whatever
# the link: only latency changes. The text is sampled with `run`'s defaults, llama-cli's
# (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, repeat penalty 1.1 over the last 64
# tokens): SEED picks the draw, TEMP=0 decodes greedily (which loops on this small model).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target steermoe
MODEL=models/steer-olmoe-small
./build/steermoe run -m "$MODEL" -p "${PROMPT:-def read_config(path):}" -n "${N:-64}" \
  --policy psr:lambda=0.3,n=1 --residency 0.5 --link "${LINK:-disk}" --calib "$MODEL/calib.smcal" \
  --seed "${SEED:-0}" ${TEMP:+--temp "$TEMP"}
