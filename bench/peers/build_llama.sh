#!/usr/bin/env bash
# Builds llama.cpp's llama-bench, llama-cli and llama-quantize into DIR (default /work/llama) as
# a benchmark peer. Never part of CI: only bench/peers/ uses it. The source is the llama.cpp
# vendored in the PyPI sdist of llama-cpp-python (an ordinary registry download, pinned), so
# the peer's commit is known and the same on every machine. Skips everything when the three
# binaries already exist, so a second engineer reuses the same build.
#
#   bench/peers/build_llama.sh [DIR] [VERSION]     (VERSION default 0.3.36)
#   NO_AMX=1 bench/peers/build_llama.sh DIR         (the same without AMX instructions)
#   AVX2_ONLY=1 bench/peers/build_llama.sh DIR      (AVX2 + FMA + F16C + BMI2, as on an AVX2 CPU)
#
# NO_AMX: some virtual machines advertise AMX (amx_tile, amx_int8 in /proc/cpuinfo) without
# running it: there llama.cpp's AMX buffers for Q8_0 / Q4 prefill die of SIGILL or a protection
# fault (seen on a Firecracker Intel Xeon). GCC's explicit -mno-amx-* win over -march=native, so
# the peer keeps every other instruction set of the CPU and its repacked (non-AMX) layouts.
set -euo pipefail
dir=${1:-/work/llama}
version=${2:-0.3.36}
bin="$dir/build/bin"
if [[ -x $bin/llama-bench && -x $bin/llama-cli && -x $bin/llama-quantize ]]; then
  echo "llama.cpp already built in $bin"
  exit 0
fi
mkdir -p "$dir"
cd "$dir"
if [[ ! -d src/vendor/llama.cpp ]]; then
  pip download --no-binary :all: --no-deps --dest sdist "llama-cpp-python==$version"
  rm -rf src && mkdir src
  tar -xzf sdist/llama_cpp_python-"$version".tar.gz -C src --strip-components=1
fi
# GGML_NATIVE: the peer gets every instruction set of this CPU, as a user's own build would.
# llama-cli needs the server library (LLAMA_BUILD_SERVER stays on); only three targets build.
extra_flags="" variant=""
[[ ${NO_AMX:-0} == 1 ]] && extra_flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" &&
  variant="$extra_flags"
# AVX2_ONLY: the peer an AVX2 machine's user builds, for steermoe's avx2 path on an AVX-512 CPU.
isa=(-DGGML_NATIVE=ON)
if [[ ${AVX2_ONLY:-0} == 1 ]]; then
  isa=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON)
  variant="AVX2 only"
fi
cmake -S src/vendor/llama.cpp -B build -DCMAKE_BUILD_TYPE=Release "${isa[@]}" \
  -DCMAKE_C_FLAGS="$extra_flags" -DCMAKE_CXX_FLAGS="$extra_flags" \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DBUILD_SHARED_LIBS=OFF
cmake --build build -j"${JOBS:-2}" --target llama-bench llama-cli llama-quantize
# The sdist carries no .git, so the peer is named by the sdist version in reports.
echo "llama-cpp-python $version${variant:+ ($variant)}" >"$dir/VERSION"
echo "built: $(ls "$bin")"
