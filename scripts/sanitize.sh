#!/usr/bin/env bash
# The tests that catch memory and thread bugs, under sanitizers, each in its
# own build directory. Not part of CI (it takes far longer): run it before
# resolving an issue that touches the runtime, the backends, the cache or
# threading, and put its closing numbers in the issue's note.
#
#   build-asan/  AddressSanitizer + LeakSanitizer + UBSan, any finding fatal:
#                the unit, operator and cache tests (ctest labels unit,
#                operator, cache; tests/CMakeLists.txt).
#   build-tsan/  ThreadSanitizer: the concurrency tests, the suite
#                ConcurrentRuns and every test whose name contains
#                "Concurren" (the binaries built: KILN_TSAN_TARGETS,
#                default kiln_api_tests, where ConcurrentRuns lives).
#
# Uninstrumented libraries. LLVM, oneDNN, oneTBB and libgomp are Debian's,
# built without sanitizers, and so is the code the JIT generates.
# - ASan and UBSan see no access they make themselves (a bug inside them goes
#   unseen) but raise no false report because of them: no suppression.
# - TSan cannot see the synchronisation inside libgomp (a parallel region's
#   hand-off and join) or libtbb (task hand-off). The cpu backend is checked
#   all the same, with tests/sanitize/tsan.supp suppressing reports whose
#   stacks run through those two libraries, each with its reason: races
#   between the threads of one OpenMP region go unchecked, while Kiln's own
#   concurrency (run admission, specialisation, caches, arenas) stays
#   checked. tbbmalloc, which allocates tensors, recycles memory between
#   threads without TSan's knowledge: a report of two accesses to a tensor
#   buffer in unrelated runs may be that, and is to be read with it in mind.
#
#   KILN_SANITIZE=asan|tsan   one of the two only (default both)
#   KILN_JOBS                 build jobs (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
JOBS=${KILN_JOBS:-2}
WHICH=${KILN_SANITIZE:-asan tsan}
status=0
summary=()

# configure DIR BUILD_TYPE FLAGS: FLAGS on every compile and link.
configure() {
  if [[ ! -f "$1/build.ninja" ]]; then
    cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE="$2" -DCMAKE_C_FLAGS="$3" -DCMAKE_CXX_FLAGS="$3" \
      -DCMAKE_EXE_LINKER_FLAGS="$3" -DCMAKE_SHARED_LINKER_FLAGS="$3" >/dev/null
  fi
}

# run_ctest NAME DIR ARGS...: the selected tests, two at a time; a line for the summary.
run_ctest() {
  local name=$1 dir=$2
  shift 2
  local start log
  start=$(date +%s)
  log="$dir/sanitize-$name.log"
  if ! ctest --test-dir "$dir" --output-on-failure --no-tests=error -j "$JOBS" --timeout 1800 "$@" >"$log" 2>&1; then
    status=1
  fi
  grep -E '^[0-9]+% tests passed|^The following tests FAILED' -A 200 "$log" | grep -vE '^\s*$' | head -n 60 || true
  local findings
  findings=$(grep -cE 'ERROR: (Address|Leak)Sanitizer|runtime error:|WARNING: ThreadSanitizer' "$log" || true)
  summary+=("$name: $(grep -E '^[0-9]+% tests passed' "$log" || echo 'no summary line'); $findings sanitizer reports; $(($(date +%s) - start)) s (log: $log)")
}

if [[ " $WHICH " == *" asan "* ]]; then
  start=$(date +%s)
  # -O1 -g1: UBSan's checks make -O2 -g compiles several times slower.
  configure build-asan None "-O1 -g1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
  cmake --build build-asan -j "$JOBS" --target kiln_unit_tests kiln_api_tests kiln_c_api_test kiln_portable_kernels_tests \
    kiln_cpu_tests kiln_cache_tests
  summary+=("asan build: $(($(date +%s) - start)) s")
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0
  export UBSAN_OPTIONS=print_stacktrace=1
  run_ctest asan build-asan -L 'unit|operator|cache'
  unset ASAN_OPTIONS UBSAN_OPTIONS
fi

if [[ " $WHICH " == *" tsan "* ]]; then
  start=$(date +%s)
  configure build-tsan RelWithDebInfo "-fsanitize=thread -fno-omit-frame-pointer"
  # The binaries that hold concurrency tests (ConcurrentRuns is in kiln_api_tests).
  cmake --build build-tsan -j "$JOBS" --target ${KILN_TSAN_TARGETS:-kiln_api_tests}
  summary+=("tsan build: $(($(date +%s) - start)) s")
  export TSAN_OPTIONS="suppressions=$PWD/tests/sanitize/tsan.supp:second_deadlock_stack=1:history_size=4"
  run_ctest tsan build-tsan -R 'ConcurrentRuns|Concurren'
  unset TSAN_OPTIONS
fi

printf 'sanitize: %s\n' "${summary[@]}"
exit "$status"
