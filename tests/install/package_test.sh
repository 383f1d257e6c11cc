#!/usr/bin/env bash
# CPack's packages of a build: the .deb holds what `cmake --install` puts in
# /usr and depends on the Debian packages of the libraries libkiln links; the
# .tar.gz unpacks anywhere and its kiln command runs from there. Both hold
# the plugins the build installs.
#
#   package_test.sh BUILD_DIR PLUGIN_FILE...
set -euo pipefail
build=$(cd "$1" && pwd)
shift
plugin_files=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
unset LD_LIBRARY_PATH

fail() {
  echo "FAIL: $*"
  exit 1
}

cpack --config "$build/CPackConfig.cmake" -B "$work" >cpack.log || fail "cpack failed: $(cat cpack.log)"
deb=$(find . -maxdepth 1 -name 'kiln_*.deb')
tgz=$(find . -maxdepth 1 -name 'kiln-*.tar.gz')
[[ -n $deb && -n $tgz ]] || fail "cpack made no .deb or no .tar.gz: $(ls)"

depends=$(dpkg-deb -f "$deb" Depends)
names=$(sed 's/ ([^)]*)//g; s/, /\n/g' <<<"$depends")
for package in libllvm19 libdnnl2 libtbb12 libonnx1 libprotobuf32 libxxhash0 libssl3 libstdc++6; do
  grep -Fxq "$package" <<<"$names" || fail "the .deb does not depend on $package: Depends: $depends"
done
contents=$(dpkg-deb -c "$deb")
for file in ./usr/bin/kiln ./usr/include/kiln/kiln.hpp ./usr/include/kiln/kiln.h ./usr/include/kiln/backend.h ./usr/lib/cmake/Kiln/KilnConfig.cmake \
  ./usr/lib/cmake/Kiln/KilnConfigVersion.cmake ./usr/lib/pkgconfig/kiln.pc "./usr/lib/libkiln.so -> libkiln.so.0" \
  "./usr/lib/libkiln.so.0 -> libkiln.so.0.1.0" "${plugin_files[@]/#/./usr/lib/kiln/plugins/}"; do
  grep -Fq " $file" <<<"$contents" || fail "the .deb lacks $file"
done

mkdir unpacked
tar -xzf "$tgz" -C unpacked
kiln=$(find unpacked -path '*/bin/kiln')
version=$("$kiln" --version) || fail "the kiln command of the .tar.gz does not run"
[[ $version == "kiln $(dpkg-deb -f "$deb" Version)" ]] || fail "kiln --version says '$version', the .deb $(dpkg-deb -f "$deb" Version)"
plugins=$("$kiln" plugins)
for f in "${plugin_files[@]}"; do
  grep -Fq " $f" <<<"$plugins" || fail "the kiln command of the .tar.gz does not see its plugin $f: $plugins"
done
echo "$deb depends on $depends"
