#!/usr/bin/env bash
# Fails if libkiln.so exports a symbol that include/kiln/ does not declare:
# every global or weak dynamic symbol must be a kiln_* function of kiln.h, or
# belong to a namespace-scope name of kiln.hpp (kiln::Model::run, the
# typeinfo of kiln::Error...). The private parts of public classes
# (kiln::Model::Impl) are not API either. Internal symbols come back if a
# library linked into libkiln loses its hidden visibility or the version
# script (src/runtime/libkiln.map) is dropped.
#
#   exported_symbols.sh LIBKILN INCLUDE_DIR
set -euo pipefail
lib=$1
c_header=$2/kiln/kiln.h
cxx_header=$2/kiln/kiln.hpp

# nm -D lists local symbols too (lower-case types): only the upper-case ones,
# and 'u' (GNU unique), can be bound by another object.
mapfile -t exported < <(nm -D --defined-only "$lib" | awk '$2 ~ /^[A-Zu]$/ {print $3}' | c++filt)

bad=()
for sym in "${exported[@]}"; do
  if [[ $sym =~ ^kiln_[a-z0-9_]+$ ]]; then
    grep -Eq "\\b${sym}\\(" "$c_header" || bad+=("$sym")
    continue
  fi
  name=${sym#typeinfo for }
  name=${name#typeinfo name for }
  name=${name#vtable for }
  if [[ $name =~ ::Impl($|[^A-Za-z0-9_]) ]]; then
    bad+=("$sym")
  elif [[ $name =~ ^kiln::([A-Za-z_][A-Za-z0-9_]*) ]]; then
    # Namespace-scope declarations of kiln.hpp start in the first column.
    top=${BASH_REMATCH[1]}
    grep -Eq "^((class|struct|enum class) ${top}\\b|[^ /#].*\\b${top}\\()" "$cxx_header" || bad+=("$sym")
  else
    bad+=("$sym")
  fi
done

# What must be there: the check sees the API (C, C++, and the typeinfo that
# lets callers catch kiln::Error thrown inside libkiln).
missing=()
for want in kiln_runtime_create "kiln::Model::load(" "typeinfo for kiln::Error"; do
  printf '%s\n' "${exported[@]}" | grep -Fq -- "$want" || missing+=("$want")
done

echo "$lib: ${#exported[@]} exported symbols"
if ((${#bad[@]})); then
  echo "FAIL: ${#bad[@]} exported symbols are not declared by $2/kiln (the first 20):"
  printf '  %s\n' "${bad[@]:0:20}"
fi
if ((${#missing[@]})); then
  echo "FAIL: the public API is not exported:"
  printf '  %s\n' "${missing[@]}"
fi
((${#bad[@]} == 0 && ${#missing[@]} == 0))
