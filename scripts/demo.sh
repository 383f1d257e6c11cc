#!/usr/bin/env bash
# Builds Kiln and classifies the shipped handwritten digit with the shipped model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
build/bin/kiln run examples/digits/digits.onnx --input image=examples/digits/digit.npy --repeat 100
