#include "backends/reference/kernel_registry.hpp"

namespace kiln::ref {

void register_feature_ops(KernelRegistry& r) { (void)r; }

}  // namespace kiln::ref
