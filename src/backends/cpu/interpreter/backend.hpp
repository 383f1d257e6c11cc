#pragma once
#include <memory>

#include "backends/backend.hpp"
#include "backends/cpu/thread_budget.hpp"

namespace kiln::backends {

// What the cpu backend leaves (values whose shapes depend on the data): the
// reference kernels run node by node, except float products (MatMul, Gemm),
// which run as oneDNN matmuls made for each call's shapes, inside the cpu
// backend's thread budget. A detector's box head after its proposals, say.
// Its executables save their graph, initializers and all, for the cache.
std::unique_ptr<Backend> make_interpreter_backend(std::shared_ptr<cpu::ThreadBudget> budget);

// The interpreter for a graph that a backend was asked to compile whole and
// could not: its save() refuses with `why`, since what loads the entry is
// the backend that was asked, not the interpreter.
std::unique_ptr<Executable> interpret_uncached(std::shared_ptr<const ir::Graph> graph, std::shared_ptr<cpu::ThreadBudget> budget,
                                               std::string why);

}  // namespace kiln::backends
