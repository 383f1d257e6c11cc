#!/usr/bin/env bash
# Builds Kiln and runs every test: unit, API, CLI, C API and ONNX conformance.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
ctest --test-dir "${KILN_BUILD_DIR:-build}" --output-on-failure -j 2
