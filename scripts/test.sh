#!/usr/bin/env bash
# Builds steermoe and runs every test: the release build with -Werror, the same suite under
# AddressSanitizer + UndefinedBehaviorSanitizer, and each libFuzzer target briefly.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
JOBS=${JOBS:-$(nproc)}
FUZZ_SECONDS=${FUZZ_SECONDS:-10}

# The CUDA toolkit, when installed, is compiled into the release build (kernels, CUDA backend and
# its tests, -Werror on host and device code): nothing runs on a GPU here (tests/cuda skip
# without one), and the host code is the same objects, so a separate CUDA build would compile
# every host file a second time.
cuda=(-DSTEERMOE_CUDA=OFF)
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda=(-DSTEERMOE_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=80;90")
fi
echo "== release build (-Werror; ${cuda[0]}) =="
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTEERMOE_WERROR=ON "${cuda[@]}" >/dev/null
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
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" -DSTEERMOE_FUZZ=ON -DSTEERMOE_TESTS=OFF -DSTEERMOE_BENCH=OFF \
  -DSTEERMOE_WERROR=ON >/dev/null
# Only the fuzz targets (and the libraries they link), not the CLI.
fuzz_targets=$(ninja -C build-fuzz -t targets all | sed -n 's/^\(fuzz_[a-z0-9_]*\): phony$/\1/p')
cmake --build build-fuzz -j "$JOBS" --target $fuzz_targets
# One fuzzer per core at a time (each is single-threaded); each one's report is printed whole
# when it ends, so reports of fuzzers running side by side do not interleave.
fuzz_one() {
  local f=$1 name corpus work
  name=$(basename "$f")
  corpus="fuzz/corpus/${name#fuzz_}"
  work=$(mktemp -d)
  [ -d "$corpus" ] && cp -r "$corpus"/. "$work"/
  echo "-- $name"
  # On a find, show the report (exception, stack, the input as Base64), not just its last lines.
  if ! "$f" "$work" -max_total_time="$FUZZ_SECONDS" -max_len=65536 -rss_limit_mb=2048 \
    -print_final_stats=0 > "$work.log" 2>&1; then
    grep -v '^INFO:\|^#[0-9]*\s*\(NEW\|REDUCE\|pulse\|INITED\)' "$work.log" | tail -n 80
    rm -rf "$work" "$work.log"
    echo "$name found a failing input (see above)"
    return 1
  fi
  tail -n 2 "$work.log"
  rm -rf "$work" "$work.log"
}
reports=$(mktemp -d)
fuzz_failed=0
for f in build-fuzz/fuzz/fuzz_*; do
  [ -x "$f" ] || continue
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || fuzz_failed=1; done
  fuzz_one "$f" > "$reports/$(basename "$f")" 2>&1 &
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || fuzz_failed=1; done
cat "$reports"/*
rm -rf "$reports"
if [ "$fuzz_failed" != 0 ]; then
  exit 1
fi
if [ "${cuda[0]}" = "-DSTEERMOE_CUDA=OFF" ]; then
  echo "nvcc not found (neither on PATH nor /usr/local/cuda/bin): the CUDA code was not compiled"
fi
echo "all test stages passed"
