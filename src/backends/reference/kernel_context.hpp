#pragma once
// What a reference kernel sees: the node, its input tensors and the output
// slots to fill. Kernels compute their own output shapes from the inputs.
#include <functional>
#include <string>
#include <vector>

#include "runtime/ir/graph.hpp"

namespace kiln::ref {

using ir::Dims;
using ir::DType;
using ir::Tensor;

class KernelContext {
 public:
  using SubgraphRunner = std::function<std::vector<Tensor>(const ir::Graph&, const std::vector<Tensor>& inputs)>;

  KernelContext(const ir::Node& node, std::vector<const Tensor*> inputs, SubgraphRunner runner);

  const ir::Node& node() const { return node_; }
  // Version of the operator set the node's domain was imported with (e.g. 13).
  int opset() const { return node_.opset; }

  size_t num_inputs() const { return inputs_.size(); }
  // Optional inputs may be omitted ("" in the model) or be past the end.
  bool has_input(size_t i) const { return i < inputs_.size() && inputs_[i] != nullptr; }
  // Throws a node-naming error when the input is missing.
  const Tensor& input(size_t i) const;

  size_t num_outputs() const { return node_.outputs.size(); }
  // Whether output i is consumed (not omitted in the model).
  bool output_wanted(size_t i) const { return i < node_.outputs.size() && !node_.outputs[i].empty(); }
  void set_output(size_t i, Tensor t);
  std::vector<Tensor>& outputs() { return outputs_; }

  bool has_attr(const std::string& name) const { return node_.attr(name) != nullptr; }
  int64_t attr_int(const std::string& name, int64_t fallback) const;
  int64_t attr_int(const std::string& name) const;  // required
  float attr_float(const std::string& name, float fallback) const;
  std::string attr_string(const std::string& name, const std::string& fallback) const;
  std::vector<int64_t> attr_ints(const std::string& name, std::vector<int64_t> fallback = {}) const;
  std::vector<float> attr_floats(const std::string& name, std::vector<float> fallback = {}) const;
  std::vector<std::string> attr_strings(const std::string& name) const;
  const Tensor* attr_tensor(const std::string& name) const;
  const ir::Graph& attr_graph(const std::string& name) const;  // required

  // Runs a subgraph (If/Loop/Scan bodies) with outer-scope values visible.
  std::vector<Tensor> run_subgraph(const ir::Graph& g, const std::vector<Tensor>& inputs) const;

  // Throws an error naming the node: "node 'conv1' (Conv): <message>".
  [[noreturn]] void fail(const std::string& message) const;
  [[noreturn]] void unsupported(const std::string& message) const;

 private:
  const ir::Node& node_;
  std::vector<const Tensor*> inputs_;
  std::vector<Tensor> outputs_;
  SubgraphRunner runner_;
};

using KernelFn = void (*)(KernelContext&);

}  // namespace kiln::ref
