#include "backends/reference/kernel_registry.hpp"

namespace kiln::ref {

void register_tensor_ops(KernelRegistry& r) { (void)r; }

}  // namespace kiln::ref
