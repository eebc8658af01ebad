#!/usr/bin/env bash
# The one device check, for a lent GPU machine (16 cores + one H200): builds steermoe with CUDA,
# runs the CUDA tests (kernels against the CPU scalar reference, the forward on the oracle models
# against the CPU engine, determinism), then benches the OLMoE-1B-7B shape (random bf16 weights,
# made here) on the CUDA backend at 100%, 50% and 25% expert residency for four policies.
# Prints one JSON object and a short table last. Budget: under 8 minutes including the build.
#
# Status: written without a GPU; it has never been run (see docs/gpu.md).
#
# Choices (documented in docs/gpu.md):
# - Policies other than exact LRU need a calibration below 100% residency, and random weights
#   have none: the script records an exact-routing trace of the made model on data/text/
#   heldout.txt (256 tokens, on the GPU) and runs `calibrate` on it (/tmp/olmoe.smcal, found
#   beside /tmp/olmoe.gguf by every command).
# - 100% residency: --link resident (every expert uploaded to device memory). 50% / 25%:
#   --link $LINK (default cuda: the mapping pinned with cudaHostRegister, C device slots per
#   layer, one copy stream, events as tickets). LINK=emulated:25,5 instead routes experts
#   through host RAM slots at an emulated PCIe bandwidth, then into device slots.
# - A failing bench run does not stop the others; its exit status is in the JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
OUT=${OUT:-/tmp/steermoe-device}
MODEL=${MODEL:-/tmp/olmoe.gguf}
LINK=${LINK:-cuda}
WINDOWS=${WINDOWS:-2}
WINDOW_LEN=${WINDOW_LEN:-48}
mkdir -p "$OUT"
start=$(date +%s)
stamp() { echo "[device-check +$(( $(date +%s) - start ))s] $*" >&2; }

stamp "build (CUDA, sm_90)"
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTEERMOE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DSTEERMOE_BENCH=OFF >/dev/null
cmake --build build-device -j "$JOBS" --target steermoe test_cuda >"$OUT/build.log" 2>&1 ||
  { tail -n 40 "$OUT/build.log"; exit 1; }
SM=./build-device/steermoe
nvidia-smi --query-gpu=name,memory.total,memory.used,pcie.link.gen.current,pcie.link.width.current \
  --format=csv >"$OUT/gpu.csv" 2>/dev/null || echo "nvidia-smi unavailable" >"$OUT/gpu.csv"

stamp "CUDA tests"
tests_rc=0
./build-device/tests/cuda/test_cuda --gtest_output="json:$OUT/test_cuda.json" \
  >"$OUT/test_cuda.log" 2>&1 || tests_rc=$?
tail -n 25 "$OUT/test_cuda.log" >&2

stamp "make-model OLMoE-1B-7B (random, bf16)"
[ -f "$MODEL" ] || "$SM" make-model --arch olmoe --shape OLMoE-1B-7B --random --dtype bf16 -o "$MODEL"
CALIB="${MODEL%.gguf}.smcal"

stamp "calibration: exact trace (256 tokens) + calibrate"
rm -rf "$OUT/trace"
"$SM" trace -m "$MODEL" -f data/text/heldout.txt -o "$OUT/trace" --window 64 --max-tokens 256 \
  --backend cuda >"$OUT/trace.log" 2>&1
"$SM" calibrate --trace "$OUT/trace" -o "$CALIB" >"$OUT/calibrate.json"

POLICIES=(exact:evict=lru exact:evict=a,n=1 cacheprior:lambda=0.2 psr:lambda=0.3,n=1)
declare -A bench_rc
for res in 1.0 0.5 0.25; do
  link=resident
  [ "$res" = 1.0 ] || link="$LINK"
  stamp "bench residency $res link $link"
  rc=0
  timeout 150 "$SM" bench -m "$MODEL" -f data/text/eval.txt --policy "${POLICIES[@]}" \
    --residency "$res" --link "$link" --backend cuda --calib "$CALIB" --rounds 1 \
    --windows "$WINDOWS" --window-len "$WINDOW_LEN" --no-floor --json "$OUT/bench_$res.json" \
    >"$OUT/bench_$res.md" 2>"$OUT/bench_$res.log" || rc=$?
  bench_rc[$res]=$rc
  [ "$rc" = 0 ] || { echo "bench at $res failed ($rc):" >&2; tail -n 5 "$OUT/bench_$res.log" >&2; }
done
stamp "done"

# One JSON object, then the tables.
python3 - "$OUT" "$tests_rc" "$(( $(date +%s) - start ))" "${bench_rc[1.0]}" "${bench_rc[0.5]}" \
  "${bench_rc[0.25]}" "$LINK" <<'PY'
import json, os, sys
out, rc, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
bench_rc = dict(zip(("1.0", "0.5", "0.25"), map(int, sys.argv[4:7])))
link = sys.argv[7]
def load(name):
    p = os.path.join(out, name)
    try:
        with open(p) as f:
            return json.load(f)
    except Exception as e:
        return {"error": f"{p}: {e}"}
tests = load("test_cuda.json")
summary = {k: tests.get(k) for k in ("tests", "failures", "disabled", "errors")} if "tests" in tests else tests
skipped = [t["name"] for s in tests.get("testsuites", []) for t in s.get("testsuite", [])
           if t.get("result") == "SKIPPED"]
with open(os.path.join(out, "gpu.csv")) as f:
    gpu = f.read().strip().splitlines()
print(json.dumps({"gpu": gpu, "seconds": secs, "test_cuda_rc": rc, "test_cuda": summary,
                  "skipped": skipped, "link_below_100": link, "bench_rc": bench_rc,
                  "bench": {r: load(f"bench_{r}.json") for r in ("1.0", "0.5", "0.25")}}))
for r in ("1.0", "0.5", "0.25"):
    print(f"\n### residency {r}")
    with open(os.path.join(out, f"bench_{r}.md")) as f:
        print(f.read().strip() or f"(no table: exit status {bench_rc[r]})")
PY
exit "$tests_rc"
