#!/usr/bin/env bash
# The plugins of an installed Kiln, used from outside the source and build
# trees: the installed ones sit in the prefix's plugin folder (where kiln.pc
# and KilnConfig.cmake say) and are loaded only when named; a plugin built
# from one C file against the installed header alone loads into the
# installed `kiln run`, takes its nodes and computes what the reference
# computes; so does the installed reference plugin.
#
#   plugin_install_test.sh BUILD_DIR SOURCE_DIR PLUGIN_FILE...
# PLUGIN_FILE: the file name of each plugin the build installs.
set -euo pipefail
build=$(cd "$1" && pwd)
source=$(cd "$2" && pwd)
shift 2
plugin_files=("$@")

source "$(dirname "$0")/temp_prefix.sh"
install_to_temp_prefix "$build"
kiln=$prefix/bin/kiln
export PKG_CONFIG_PATH=$(dirname "$(find "$prefix" -name kiln.pc)")

# Where the plugins are: kiln.pc's plugindir and find_package(Kiln)'s
# Kiln_PLUGIN_DIR name one folder of the prefix, which holds each of them.
plugindir=$(realpath "$(pkg-config --variable=plugindir kiln)") || fail "kiln.pc's plugindir does not exist"
[[ $plugindir == "$prefix"/* ]] || fail "kiln.pc's plugindir $plugindir is not in the prefix"
for f in "${plugin_files[@]}"; do
  [[ -f $plugindir/$f ]] || fail "no $f in the plugin folder $plugindir: $(ls "$plugindir")"
done
mkdir config-src
cat >config-src/CMakeLists.txt <<'EOF'
cmake_minimum_required(VERSION 3.16)
project(plugin_dir LANGUAGES NONE)
find_package(Kiln 0.1 REQUIRED)
message(STATUS "Kiln_PLUGIN_DIR=${Kiln_PLUGIN_DIR}")
EOF
cmake -S config-src -B config-build -DCMAKE_PREFIX_PATH="$prefix" >config.log || fail "find_package(Kiln) failed: $(cat config.log)"
cmake_dir=$(sed -n 's/^-- Kiln_PLUGIN_DIR=//p' config.log)
[[ -n $cmake_dir && $(realpath "$cmake_dir") == "$plugindir" ]] || fail "Kiln_PLUGIN_DIR is '$cmake_dir', kiln.pc says $plugindir"

# Opt-in: the installed command loads none of them by itself, and says where they are.
"$kiln" plugins >plugins.txt || fail "kiln plugins failed: $(cat plugins.txt)"
grep -q "^no plugins" plugins.txt || fail "the installed kiln loaded plugins nobody named: $(cat plugins.txt)"
grep -Fq "installed with this kiln in $plugindir " plugins.txt || fail "kiln plugins does not name $plugindir: $(cat plugins.txt)"
for f in "${plugin_files[@]}"; do grep -Fq " $f" plugins.txt || fail "kiln plugins does not list $f: $(cat plugins.txt)"; done

cp "$source/examples/digits/digits.onnx" "$source/examples/digits/digit.npy" .
run() {  # run OUTPUT_DIR ARGS...: kiln run on the digit, its summary in OUTPUT_DIR.txt
  local out=$1
  shift
  "$kiln" run digits.onnx --input image=digit.npy --no-cache --output-dir "$out" "$@" >"$out.txt" 2>&1 ||
    fail "kiln run $* failed: $(cat "$out.txt")"
}
run out-cpu
grep -q ": cpu backend," out-cpu.txt || fail "without --plugin, the installed kiln did not run on the cpu backend alone: $(cat out-cpu.txt)"
run out-reference --backend reference

# A plugin from one C file, built against the installed header alone and
# linking nothing of Kiln.
cp "$source/tests/plugins/toy_plugin.c" .
cc -std=c11 -O2 -Wall -fPIC -fvisibility=hidden -shared -I "$prefix/include" toy_plugin.c -o toy.so -Wl,--no-undefined ||
  fail "the toy plugin does not build against the installed header"
cc -std=c11 -MM -I "$prefix/include" toy_plugin.c | grep -Fq "$prefix/include/kiln/backend.h" ||
  fail "the toy plugin was not compiled against the installed backend.h"
if readelf -d toy.so | grep NEEDED | grep -q kiln; then fail "the toy plugin links Kiln: $(readelf -d toy.so | grep NEEDED)"; fi

# It takes the Relu (toy_plugin.c's Relu, Add and Mul of equal shapes).
"$kiln" inspect digits.onnx --dim batch=1 --plugin ./toy.so >inspect.txt || fail "kiln inspect --plugin failed: $(cat inspect.txt)"
grep -Eq '^ +operator +cpu +toy$' inspect.txt && grep -Eq '^ +Relu +- +1$' inspect.txt ||
  fail "the toy plugin does not take the Relu: $(cat inspect.txt)"

# With the cpu backend: the same bytes as without it (max(x, 0) is exact).
run out-toy --plugin ./toy.so
grep -q ": toy+cpu backend" out-toy.txt || fail "kiln run --plugin did not use the toy plugin: $(cat out-toy.txt)"
cmp -s out-toy/probabilities.npy out-cpu/probabilities.npy || fail "the toy plugin with the cpu backend differs from the cpu backend alone"
# Forced, the reference interpreter taking the rest: the reference's bytes.
run out-toy-forced --plugin ./toy.so --backend toy
grep -q ": toy+reference backend" out-toy-forced.txt || fail "--backend toy did not force the toy plugin: $(cat out-toy-forced.txt)"
cmp -s out-toy-forced/probabilities.npy out-reference/probabilities.npy || fail "the toy plugin forced differs from the reference"

# The installed reference plugin, forced: every node, the reference's bytes.
run out-reference-plugin --plugin "$plugindir/kiln-reference.so" --backend kiln-reference
grep -q ": kiln-reference backend" out-reference-plugin.txt && grep -q "5 nodes compiled, 0 run by reference kernels" out-reference-plugin.txt ||
  fail "the installed reference plugin did not take every node: $(cat out-reference-plugin.txt)"
cmp -s out-reference-plugin/probabilities.npy out-reference/probabilities.npy || fail "the installed reference plugin differs from the reference"

# The whole folder through KILN_PLUGIN_PATH: each installed plugin loads
# (belongs to the installer, writable by no one else) and, the XNNPACK
# plugin where it is built, classifies the digit.
KILN_PLUGIN_PATH=$plugindir "$kiln" plugins >folder.txt 2>&1 || fail "kiln plugins from KILN_PLUGIN_PATH failed: $(cat folder.txt)"
for f in "${plugin_files[@]}"; do
  grep -Fq "($plugindir/$f)" folder.txt || fail "$f did not load from KILN_PLUGIN_PATH=$plugindir: $(cat folder.txt)"
done
if [[ -f $plugindir/xnnpack.so ]]; then
  run out-xnnpack --plugin "$plugindir/xnnpack.so"
  grep -q ": xnnpack backend" out-xnnpack.txt && grep -q "predicted class): 7" out-xnnpack.txt ||
    fail "the installed XNNPACK plugin did not classify the 7: $(cat out-xnnpack.txt)"
fi
echo "installed plugins in $plugindir: ${plugin_files[*]}; a one-file C plugin built against the installed header matched the reference"
