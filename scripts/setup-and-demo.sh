#!/usr/bin/env bash
# Installs what steermoe needs, builds it, and runs the main job on the shipped default model:
# the small trained OLMoE-architecture MoE (models/steer-olmoe-tiny) continuing a prompt with
# prefetch-steered routing on a logical expert cache of 32 of 64 experts per layer (50%
# residency). The weights all sit in RAM: on the CPU engine the cache is logical (it decides
# routing and which copies an offloading backend would make), not a physical offload.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target steermoe
MODEL=models/steer-olmoe-tiny
./build/steermoe run -m "$MODEL" -p "${PROMPT:-def read_config(path):}" -n "${N:-64}" \
  --policy psr:lambda=0.3,n=1 --cache 32 --calib "$MODEL/calib.smcal"
