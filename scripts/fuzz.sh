#!/usr/bin/env bash
# Builds every libFuzzer target (kiln_add_fuzzer, cmake/KilnFuzz.cmake) with
# clang-19, AddressSanitizer and UBSan into build-fuzz/, only what the
# targets link, and runs each from its seed corpus tests/fuzz/corpus/<target>/.
# A crash, leak, timeout, out-of-memory or UB report fails the run, and the
# log says where the reproducer is.
#
# By default (CI) each target runs a fixed number of inputs from a fixed
# seed and an empty scratch corpus: the same inputs on every run, so a
# failure in CI comes from the change under test, not from luck. Finding new
# bugs is the exploratory mode's job: KILN_FUZZ_SECONDS=N runs each target
# N seconds from a random seed and keeps what it learns in
# build-fuzz/fuzz-corpus/.
#   KILN_FUZZ_SECONDS   exploratory: seconds per target
#   KILN_FUZZ_BUILD_DIR build directory (default build-fuzz)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${KILN_FUZZ_BUILD_DIR:-build-fuzz}
EXPLORE_SECONDS=${KILN_FUZZ_SECONDS:-}
# Inputs per target in CI, about 20 s each on one core of the CI machine
# (cache_files writes, authenticates and reads real files: 260 inputs/s;
# partitioned_artifact loads a plugin partition per input: 2000 inputs/s;
# value_files reads sequence and optional files: 25000 inputs/s; remote_header
# parses JSON headers and addresses: 10000 inputs/s).
declare -A CI_RUNS=([onnx_import]=200000 [npy]=100000 [cache_files]=5000 [bundle_weights]=400000 [partitioned_artifact]=40000 [value_files]=400000 [remote_header]=200000)
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang-19 \
    -DCMAKE_CXX_COMPILER=clang++-19 -DKILN_FUZZ=ON -DBUILD_TESTING=OFF >/dev/null
fi
build_start=$(date +%s)
cmake --build "$BUILD_DIR" --target kiln_fuzzers -j "${KILN_JOBS:-2}"
echo "fuzz: targets built in $(($(date +%s) - build_start)) s"

# UBSan's report with its stack (ASan prints one anyway).
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
failed=0
for corpus in tests/fuzz/corpus/*/; do
  name=$(basename "$corpus")
  # New inputs go to a scratch corpus: the committed seeds stay as they are.
  work="$BUILD_DIR/fuzz-corpus/$name"
  artifacts="$BUILD_DIR/fuzz-artifacts/$name"
  log="$BUILD_DIR/fuzz-$name.log"
  rm -rf "$artifacts"  # what is left there is this run's
  if [[ -n $EXPLORE_SECONDS ]]; then
    mode=(-max_total_time="$EXPLORE_SECONDS")
  else
    [[ -n ${CI_RUNS[$name]:-} ]] || { echo "fuzz: no CI_RUNS entry for target '$name' in $0" >&2; exit 1; }
    rm -rf "$work"
    # max_total_time only bounds a run that went wrong (a target grown slow).
    mode=(-seed=1 -runs="${CI_RUNS[$name]}" -max_total_time=300)
  fi
  mkdir -p "$work" "$artifacts"
  # -timeout: an input that takes 10 s is a hang; -rss_limit_mb: an
  # allocation the input cannot back fails too (libFuzzer's malloc limit).
  # The importer also starts from the team's numpy-checked models.
  seeds=("$corpus")
  [[ $name == onnx_import ]] && seeds+=(tests/reference_cases)
  start=$(date +%s)
  if "$BUILD_DIR/fuzz/fuzz_$name" "$work" "${seeds[@]}" "${mode[@]}" -timeout=10 \
      -rss_limit_mb=2048 -artifact_prefix="$artifacts/" -print_final_stats=1 >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "fuzz $name: ${runs:-?} inputs in $(($(date +%s) - start)) s, no finding"
  else
    failed=1
    tail -n 80 "$log"
    echo "fuzz $name: FAILED (whole log: $log)"
    for f in "$artifacts"/*; do
      [[ -e "$f" ]] && echo "  reproducer: $f  (run: $BUILD_DIR/fuzz/fuzz_$name $f)"
    done
  fi
done
exit "$failed"
