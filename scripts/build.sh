#!/usr/bin/env bash
# Installs what is missing, configures and builds Kiln into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${KILN_BUILD_DIR:-build}
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
# Two jobs: the machines we build on have two cores.
cmake --build "$BUILD_DIR" -j "${KILN_JOBS:-2}"
