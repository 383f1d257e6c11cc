#include "backends/reference/kernel_registry.hpp"

namespace kiln::ref {

void register_control_flow_ops(KernelRegistry& r) { (void)r; }

}  // namespace kiln::ref
