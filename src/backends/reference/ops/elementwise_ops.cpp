#include "backends/reference/kernel_registry.hpp"

namespace kiln::ref {

void register_elementwise_ops(KernelRegistry& r) { (void)r; }

}  // namespace kiln::ref
