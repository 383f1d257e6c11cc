#pragma once
// Shape and dtype inference over the IR with symbolic dimensions: a model
// whose input is [batch,3,224,224] infers [batch,1000] for its output. Given
// concrete input shapes (a specialization) it also tracks the values of
// small integer tensors, so that the Shape -> Gather -> Concat -> Reshape
// arithmetic exporters emit resolves to concrete shapes.
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/ir/graph.hpp"

namespace kiln::ir {

// Evaluates a node whose inputs are all known constants (nullptr = omitted
// input). Returns nothing when it cannot. Supplied by a backend, so that the
// IR does not depend on one.
using ConstantEvaluator = std::function<std::optional<std::vector<Tensor>>(const Node&, const std::vector<const Tensor*>&)>;

// Whether a node may be evaluated at compile time when its inputs are known:
// not for random ops, control flow, Dropout (training mode is random) or
// domains other than ai.onnx.
bool may_fold(const Node& node);

struct InferenceResult {
  std::map<std::string, ValueInfo> values;  // every value of the graph
  std::map<std::string, Tensor> constants;  // values known at compile time (initializers included)
};

// `inputs` overrides the declared type of graph inputs (e.g. concrete shapes
// for a specialization); inputs not listed keep their declaration. Throws
// Error(InvalidModel) naming the node when shapes are inconsistent.
InferenceResult infer_shapes(const Graph& graph, const std::vector<ValueInfo>& inputs = {},
                             const ConstantEvaluator& evaluator = nullptr);

// Concrete shapes for every value given concrete input shapes. Throws
// Error(InvalidArgument) if an input shape contradicts the declaration, and
// lists values whose shape depends on data (e.g. NonZero) in `dynamic`.
// Inputs that are sequences or optionals are not given: they keep their
// declaration, and what is made from them is dynamic.
struct Specialization {
  InferenceResult result;
  std::vector<std::string> dynamic;
};
Specialization specialize(const Graph& graph, const std::map<std::string, std::pair<DType, Dims>>& input_shapes,
                          const ConstantEvaluator& evaluator = nullptr);

}  // namespace kiln::ir
