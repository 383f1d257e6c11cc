#!/usr/bin/env bash
# Builds Kiln and runs every test: unit, API, CLI, C API and ONNX conformance, then the fuzzers.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
BUILD_DIR=${KILN_BUILD_DIR:-build}
# The conformance figure first, so that it is in the log whatever happens next.
"$BUILD_DIR/tests/kiln_conformance" --expected-failures tests/conformance/expected_failures_reference.txt | tail -n 1 || true
ctest --test-dir "$BUILD_DIR" --output-on-failure -j 2
# Every libFuzzer target for a fixed, seeded number of inputs, under ASan and UBSan (tests/fuzz/README.md).
scripts/fuzz.sh
