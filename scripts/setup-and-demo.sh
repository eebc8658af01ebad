#!/usr/bin/env bash
# Installs what steermoe needs, builds it, and runs the main job on the shipped default.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTEERMOE_TESTS=OFF -DSTEERMOE_BENCH=OFF >/dev/null
cmake --build build -j "$(nproc)" --target steermoe
# Until the engine exists the main job replays the shipped synthetic OLMoE-shaped trace with PSR
# at 50% residency and prints the summary.
./build/steermoe replay --trace data/traces/synth-olmoe --calib data/traces/synth-olmoe/calib.smcal \
  --policy psr:lambda=0.3,n=1 --cache 32
