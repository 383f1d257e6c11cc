# libFuzzer targets (tests/fuzz/README.md). In a KILN_FUZZ build (clang),
# everything compiled is instrumented with AddressSanitizer and UBSan (a
# finding aborts, so that libFuzzer reports it); scripts/fuzz.sh builds the
# `kiln_fuzzers` target and runs each target for a fixed time.

option(KILN_FUZZ "build the libFuzzer targets (clang only)" OFF)

if(KILN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "KILN_FUZZ needs clang (libFuzzer): -DCMAKE_CXX_COMPILER=clang++-19")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
  add_custom_target(kiln_fuzzers)
endif()

# kiln_add_fuzzer(NAME SOURCE LIBRARY...): the executable fuzz/fuzz_NAME,
# SOURCE defining LLVMFuzzerTestOneInput, linked with the libraries it
# fuzzes; its seed corpus is tests/fuzz/corpus/NAME/, which must exist (and
# which is how scripts/fuzz.sh finds the targets). Only the check of the
# corpus without KILN_FUZZ.
function(kiln_add_fuzzer name source)
  if(NOT IS_DIRECTORY ${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/${name})
    message(FATAL_ERROR "fuzz target ${name}: no seed corpus in tests/fuzz/corpus/${name}/")
  endif()
  if(NOT KILN_FUZZ)
    return()
  endif()
  add_executable(fuzz_${name} ${source})
  target_link_libraries(fuzz_${name} PRIVATE ${ARGN})
  target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer)
  set_target_properties(fuzz_${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
  add_dependencies(kiln_fuzzers fuzz_${name})
endfunction()
