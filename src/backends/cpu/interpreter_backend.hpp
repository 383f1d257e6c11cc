#pragma once
#include <memory>

#include "backends/backend.hpp"
#include "backends/cpu/thread_budget.hpp"

namespace kiln::backends {

// What the cpu backend leaves (values whose shapes depend on the data): the
// reference kernels run node by node, except float products (MatMul, Gemm),
// which run as oneDNN matmuls made for each call's shapes, inside the cpu
// backend's thread budget. A detector's box head after its proposals, say.
std::unique_ptr<Backend> make_interpreter_backend(std::shared_ptr<cpu::ThreadBudget> budget);

}  // namespace kiln::backends
