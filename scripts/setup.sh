#!/usr/bin/env bash
# Installs the Debian packages Kiln builds, tests and runs with.
# Idempotent and quiet when everything is already there.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  llvm-19-dev clang-19 libzstd-dev
  libdnnl-dev ocl-icd-opencl-dev
  libtbb-dev
  libonnx-dev libprotobuf-dev protobuf-compiler
  libgtest-dev libgmock-dev libbenchmark-dev
  libxxhash-dev nlohmann-json3-dev libcli11-dev libssl-dev
  libonnx-testdata
  # the fleet's remote cache: hiredis to talk to Redis, and a redis-server
  # that tests/integration/remote_cache_test.cpp starts on loopback.
  libhiredis-dev redis-server
  gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user cargo file
  # scripts/fuzz.sh: clang-19's libFuzzer and sanitizer runtimes, and the
  # OpenMP that CMake's find_package(OpenMP) looks for with clang.
  libclang-rt-19-dev libomp-19-dev
  # plugins/xnnpack: XNNPACK's header and library, and pthreadpool's header
  # (xnnpack.h includes it).
  libxnnpack-dev libpthreadpool-dev
  # tests/format_test.sh: the code follows .clang-format.
  clang-format-19
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
