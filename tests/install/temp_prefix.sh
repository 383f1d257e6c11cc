# Sourced by the install tests: installs the build BUILD into a temporary
# prefix and moves the prefix elsewhere (what someone who unpacks the
# .tar.gz does), in an environment where nothing but that prefix can supply
# Kiln. Sets $work (the scratch directory, removed on exit, and the current
# directory) and $prefix; defines fail.
install_to_temp_prefix() {
  local build=$1
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  cd "$work"
  unset LD_LIBRARY_PATH LIBRARY_PATH CPATH C_INCLUDE_PATH CPLUS_INCLUDE_PATH CMAKE_PREFIX_PATH KILN_PLUGIN_PATH
  export PKG_CONFIG_PATH=
  cmake --install "$build" --prefix "$work/staged" >install.log
  mv "$work/staged" "$work/prefix"
  prefix=$work/prefix
}

fail() {
  echo "FAIL: $*"
  exit 1
}
