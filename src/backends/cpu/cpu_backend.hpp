#pragma once
#include <memory>

#include "backends/backend.hpp"

namespace kiln::backends {

// The compiled backend: oneDNN primitives and generated loops called from
// one JIT-compiled entry function per specialization, run inside a thread
// budget of `threads` (see cpu_backend.cpp for how oneDNN's OpenMP threads
// are kept inside it).
std::unique_ptr<Backend> make_cpu_backend(int threads);

}  // namespace kiln::backends
