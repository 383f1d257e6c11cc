#pragma once
// The reference backend's table of kernels, keyed by ai.onnx op type.
#include <map>
#include <string>
#include <vector>

#include "backends/reference/kernel_context.hpp"

namespace kiln::ref {

class KernelRegistry {
 public:
  // The registry with every built-in kernel.
  static const KernelRegistry& instance();

  void add(const std::string& op_type, KernelFn fn);
  KernelFn find(const std::string& op_type) const;  // nullptr if missing
  std::vector<std::string> op_types() const;

 private:
  std::map<std::string, KernelFn> kernels_;
};

// Each ops/*.cpp file registers its kernels through one of these.
void register_elementwise_ops(KernelRegistry& r);
void register_tensor_ops(KernelRegistry& r);
void register_gather_scatter_ops(KernelRegistry& r);
void register_nn_ops(KernelRegistry& r);
void register_reduction_ops(KernelRegistry& r);
void register_image_ops(KernelRegistry& r);
void register_signal_ops(KernelRegistry& r);
void register_control_flow_ops(KernelRegistry& r);
void register_rnn_ops(KernelRegistry& r);
void register_matrix_ops(KernelRegistry& r);
void register_quantize_ops(KernelRegistry& r);
void register_tfidf_vectorizer(KernelRegistry& r);
void register_mel_weight_matrix(KernelRegistry& r);
void register_sequence_ops(KernelRegistry& r);
void register_optional_ops(KernelRegistry& r);
void register_string_ops(KernelRegistry& r);

}  // namespace kiln::ref
