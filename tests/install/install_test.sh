#!/usr/bin/env bash
# Installs Kiln into a temporary prefix and moves the prefix elsewhere (what
# someone who unpacks the .tar.gz does), then, outside the source and build
# trees, uses it as a user would: the installed `kiln` command, and
# examples/service-cpp built with find_package(Kiln) and with pkg-config.
# Each program must load the installed libkiln, not the build tree's, and
# print what the build tree's programs print for the digits model.
#
#   install_test.sh BUILD_DIR SOURCE_DIR BUILT_KILN BUILT_SERVICE
set -euo pipefail
build=$(cd "$1" && pwd)
source=$(cd "$2" && pwd)
built_kiln=$(realpath "$3")
built_service=$(realpath "$4")

source "$(dirname "$0")/temp_prefix.sh"
install_to_temp_prefix "$build"
[[ -x $prefix/bin/kiln ]] || fail "no bin/kiln in the prefix"
for f in kiln.hpp kiln.h backend.h; do [[ -f $prefix/include/kiln/$f ]] || fail "no include/kiln/$f in the prefix"; done
pc=$(find "$prefix" -name kiln.pc)
[[ -n $pc ]] || fail "no kiln.pc in the prefix"
export PKG_CONFIG_PATH=$(dirname "$pc")
libdir=$(realpath "$(pkg-config --variable=libdir kiln)")
[[ $libdir == "$prefix"/* ]] || fail "kiln.pc's libdir $libdir is not in the prefix"
soname=$(readelf -d "$libdir/libkiln.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[[ $soname == libkiln.so.0 && -e $libdir/$soname ]] || fail "libkiln.so's SONAME is '$soname', not libkiln.so.0 installed beside it"

# The model and its input, away from the source tree.
cp "$source/examples/digits/digits.onnx" "$source/examples/digits/digit.npy" .

# uses_installed_libkiln PROGRAM: the dynamic loader resolves libkiln.so.0 in the prefix.
uses_installed_libkiln() {
  local line
  line=$(ldd "$1" | grep -F "libkiln.so.0 =>") || fail "$1 does not link libkiln.so.0"
  [[ $line =~ =\>\ (/[^ ]*) && $(realpath "${BASH_REMATCH[1]}") == "$prefix"/* ]] ||
    fail "$1 does not load the installed libkiln: ldd says '$line'"
}

# The installed command: a digit classified, the same probabilities as the build tree's command.
uses_installed_libkiln "$prefix/bin/kiln"
"$prefix/bin/kiln" run digits.onnx --input image=digit.npy --no-cache --output-dir out-installed >run-installed.txt ||
  fail "the installed kiln run failed: $(cat run-installed.txt)"
grep -q "predicted class): 7" run-installed.txt || fail "the installed kiln did not classify the 7: $(cat run-installed.txt)"
"$built_kiln" run digits.onnx --input image=digit.npy --no-cache --output-dir out-built >/dev/null
cmp -s out-installed/probabilities.npy out-built/probabilities.npy ||
  fail "the installed kiln's probabilities differ from the build tree's"

# The service: what the build tree's copy prints, from a fresh cache.
expected=$("$built_service" digits.onnx --cache-dir "$work/cache-built" | grep '^checksum ')
[[ -n $expected ]] || fail "the build tree's service printed no checksum"
check_service() {  # check_service PROGRAM HOW
  uses_installed_libkiln "$1"
  "$1" digits.onnx --cache-dir "$work/cache-$2" >"service-$2.txt" || fail "the service built with $2 failed: $(cat "service-$2.txt")"
  grep -q "^batch 8: compiled" "service-$2.txt" || fail "the service built with $2 compiled nothing: $(cat "service-$2.txt")"
  grep -Fqx "$expected" "service-$2.txt" || fail "the service built with $2 printed $(grep checksum "service-$2.txt"), not $expected"
}
cp -r "$source/examples/service-cpp" service-src

# (a) find_package(Kiln), as examples/service-cpp/CMakeLists.txt does.
cmake -S service-src -B service-cmake -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >cmake.log ||
  fail "configuring the service with find_package(Kiln) failed: $(cat cmake.log)"
kiln_dir=$(sed -n 's/^Kiln_DIR:PATH=//p' service-cmake/CMakeCache.txt)
[[ $kiln_dir == "$prefix"/* ]] || fail "find_package(Kiln) found '$kiln_dir', not the installed prefix"
cmake --build service-cmake >>cmake.log || fail "building the service with find_package(Kiln) failed: $(cat cmake.log)"
check_service service-cmake/service find_package

# (b) pkg-config kiln.
# shellcheck disable=SC2046 # pkg-config's flags are separate words
c++ -O2 service-src/main.cpp -o service-pkg-config $(pkg-config --cflags --libs kiln) -Wl,-rpath,"$libdir" -pthread ||
  fail "building the service with pkg-config failed"
check_service ./service-pkg-config pkg-config

# kiln.h alone, from C, through pkg-config.
cat >c_api.c <<'EOF'
#include <kiln/kiln.h>
int main(void) { return kiln_c_api_version() == KILN_C_API_VERSION ? 0 : 1; }
EOF
# shellcheck disable=SC2046
cc c_api.c -o c-api $(pkg-config --cflags --libs kiln) -Wl,-rpath,"$libdir" || fail "building a C program with pkg-config failed"
uses_installed_libkiln ./c-api
./c-api || fail "the C API version of the installed libkiln differs from its kiln.h"
echo "installed into a prefix, moved it, and ran kiln and the service built with find_package and pkg-config from it"
