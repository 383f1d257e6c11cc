#include "backends/reference/kernel_registry.hpp"

namespace kiln::ref {

void register_quantization_ops(KernelRegistry& r) { (void)r; }

}  // namespace kiln::ref
