#include "backends/reference/kernel_registry.hpp"

namespace kiln::ref {

const KernelRegistry& KernelRegistry::instance() {
  static const KernelRegistry registry = [] {
    KernelRegistry r;
    register_elementwise_ops(r);
    register_tensor_ops(r);
    register_gather_scatter_ops(r);
    register_nn_ops(r);
    register_reduction_ops(r);
    register_image_ops(r);
    register_signal_ops(r);
    register_control_flow_ops(r);
    register_rnn_ops(r);
    register_matrix_ops(r);
    register_quantize_ops(r);
    register_tfidf_vectorizer(r);
    register_mel_weight_matrix(r);
    register_sequence_ops(r);
    register_optional_ops(r);
    register_string_ops(r);
    return r;
  }();
  return registry;
}

void KernelRegistry::add(const std::string& op_type, KernelFn fn) { kernels_[op_type] = fn; }

KernelFn KernelRegistry::find(const std::string& op_type) const {
  auto it = kernels_.find(op_type);
  return it == kernels_.end() ? nullptr : it->second;
}

std::vector<std::string> KernelRegistry::op_types() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : kernels_) out.push_back(k);
  return out;
}

}  // namespace kiln::ref
