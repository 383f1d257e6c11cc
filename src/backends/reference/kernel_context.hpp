#pragma once
// What a reference kernel sees: the node, its input values and the output
// slots to fill. Kernels compute their own output shapes from the inputs.
// Most take and make tensors only; the sequence and optional operators (and
// Identity, If, Loop) take and make any value.
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
  using SubgraphRunner = std::function<std::vector<ir::Value>(const ir::Graph&, const std::vector<ir::Value>& inputs)>;

  KernelContext(const ir::Node& node, std::vector<const Tensor*> inputs, SubgraphRunner runner);
  // Inputs of any kind (the reference executor's).
  static KernelContext with_values(const ir::Node& node, std::vector<const ir::Value*> inputs, SubgraphRunner runner);

  const ir::Node& node() const { return node_; }
  // Version of the operator set the node's domain was imported with (e.g. 13).
  int opset() const { return node_.opset; }

  size_t num_inputs() const { return inputs_.size(); }
  // Optional inputs may be omitted ("" in the model) or be past the end.
  bool has_input(size_t i) const { return i < inputs_.size() && (inputs_[i] || (i < values_.size() && values_[i])); }
  // Throws a node-naming error when the input is missing or not a tensor.
  const Tensor& input(size_t i) const;
  // The input as it is: a tensor, a sequence or an optional. Required.
  ir::Value input_value(size_t i) const;

  size_t num_outputs() const { return node_.outputs.size(); }
  // Whether output i is consumed (not omitted in the model).
  bool output_wanted(size_t i) const { return i < node_.outputs.size() && !node_.outputs[i].empty(); }
  void set_output(size_t i, Tensor t);
  void set_output_value(size_t i, ir::Value v);
  // The tensor outputs (a sequence or an optional output is undefined here).
  std::vector<Tensor>& outputs() { return outputs_; }
  // Output i whatever its kind, moved out.
  ir::Value take_output(size_t i);

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
  std::vector<ir::Value> run_subgraph(const ir::Graph& g, const std::vector<ir::Value>& inputs) const;

  // Throws an error naming the node: "node 'conv1' (Conv): <message>".
  [[noreturn]] void fail(const std::string& message) const;
  [[noreturn]] void unsupported(const std::string& message) const;

 private:
  const ir::Node& node_;
  std::vector<const Tensor*> inputs_;     // null where missing or not a tensor
  std::vector<const ir::Value*> values_;  // every input, when given as values
  std::vector<Tensor> outputs_;
  std::vector<ir::Value> value_outputs_;  // outputs that are not tensors, by index (sized on first use)
  SubgraphRunner runner_;
};

using KernelFn = void (*)(KernelContext&);

}  // namespace kiln::ref
