#!/usr/bin/env bash
# Installs every Debian package steermoe needs to build, test and fuzz. Idempotent.
# (chromium: the headless test of `steermoe serve`'s chat page; cpp-httplib: the server tests'
# HTTP client.)
set -euo pipefail
PKGS=(cmake ninja-build g++ clang libclang-rt-14-dev libgtest-dev libgmock-dev libbenchmark-dev
      nlohmann-json3-dev libcli11-dev libfmt-dev libpcre2-dev liburing-dev pkg-config python3
      python3-dev python3-numpy python3-scipy python3-matplotlib pybind11-dev
      libcpp-httplib-dev python3-jinja2 chromium)
missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
