#!/usr/bin/env bash
# Builds steermoe and runs every test: the release build with -Werror, the same suite under
# AddressSanitizer + UndefinedBehaviorSanitizer, and each libFuzzer target briefly.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
JOBS=${JOBS:-$(nproc)}
FUZZ_SECONDS=${FUZZ_SECONDS:-15}

echo "== release build (-Werror) =="
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTEERMOE_WERROR=ON >/dev/null
cmake --build build -j "$JOBS"
ctest --test-dir build --output-on-failure -j "$JOBS"

echo "== ASan + UBSan build =="
# -O1 -g1: sanitizer builds compile much faster than at -O2 -g and still report lines.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTEERMOE_WERROR=ON \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" -DSTEERMOE_SANITIZE=ON -DSTEERMOE_BENCH=OFF >/dev/null
cmake --build build-asan -j "$JOBS"
ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j "$JOBS" -LE slow

echo "== libFuzzer targets (${FUZZ_SECONDS}s each) =="
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" -DSTEERMOE_FUZZ=ON -DSTEERMOE_TESTS=OFF -DSTEERMOE_BENCH=OFF >/dev/null
# Only the fuzz targets (and the libraries they link), not the CLI.
fuzz_targets=$(ninja -C build-fuzz -t targets all | sed -n 's/^\(fuzz_[a-z0-9_]*\): phony$/\1/p')
cmake --build build-fuzz -j "$JOBS" --target $fuzz_targets
for f in build-fuzz/fuzz/fuzz_*; do
  [ -x "$f" ] || continue
  name=$(basename "$f")
  corpus="fuzz/corpus/${name#fuzz_}"
  work=$(mktemp -d)
  [ -d "$corpus" ] && cp -r "$corpus"/. "$work"/
  echo "-- $name"
  log="$work.log"
  # On a find, show the report (exception, stack, the input as Base64), not just its last lines.
  if ! "$f" "$work" -max_total_time="$FUZZ_SECONDS" -max_len=65536 -rss_limit_mb=2048 \
    -print_final_stats=0 > "$log" 2>&1; then
    grep -v '^INFO:\|^#[0-9]*\s*\(NEW\|REDUCE\|pulse\|INITED\)' "$log" | tail -n 80
    rm -rf "$work" "$log"
    echo "$name found a failing input (see above)"
    exit 1
  fi
  tail -n 2 "$log"
  rm -rf "$work" "$log"
done
echo "== CUDA compile check (kernels, CUDA backend, CUDA tests, steermoe; not run: no GPU in CI) =="
# A compile check only: nothing here runs on a GPU (tests/cuda skip without one, and CI has
# none). -O1 keeps this third build of the host code short; -Werror covers host and device code.
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda_start=$(date +%s)
  launcher=()
  if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
  cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTEERMOE_WERROR=ON \
    "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" -DSTEERMOE_CUDA=ON -DSTEERMOE_BENCH=OFF \
    "-DCMAKE_CUDA_ARCHITECTURES=80;90" "${launcher[@]}" >/dev/null
  cmake --build build-cuda -j "$JOBS" --target steermoe_kernels_cuda steermoe_engine_cuda steermoe test_cuda
  echo "CUDA compile check done in $(( $(date +%s) - cuda_start )) s"
else
  echo "nvcc not found (neither on PATH nor /usr/local/cuda/bin): skipping the CUDA compile check"
fi
echo "all test stages passed"
