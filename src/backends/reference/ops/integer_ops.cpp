#include "backends/reference/kernel_registry.hpp"

namespace kiln::ref {

void register_integer_ops(KernelRegistry& r) { (void)r; }

}  // namespace kiln::ref
