#!/usr/bin/env bash
# Every C and C++ source file of the repository follows .clang-format (the
# fuzz corpora and the reference cases' data are not code). Fix one with
#   clang-format-19 -i FILE
#   format_test.sh SOURCE_DIR
set -euo pipefail
cd "$1"
command -v clang-format-19 >/dev/null || { echo "FAIL: clang-format-19 is not installed (scripts/setup.sh installs it)"; exit 1; }
sources() {
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z '*.cpp' '*.hpp' '*.h' '*.c'
  else  # an unpacked source tree
    find . -path ./build -prune -o \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.c' \) -printf '%P\0'
  fi
}
sources | grep -zv '/corpus/\|^tests/reference_cases/\|^build' | xargs -0 clang-format-19 --dry-run --Werror
