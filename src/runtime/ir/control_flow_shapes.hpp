#pragma once
// Shapes through If, Loop and Scan. Their bodies are inferred with the
// types (and constants) of the enclosing scope, so a specialization knows
// a control-flow node's outputs wherever its bodies' shapes are static: the
// cpu backend then compiles the node and its bodies, instead of leaving it
// to the interpreter with outputs of unknown shape.
#include <functional>
#include <optional>
#include <vector>

#include "runtime/ir/graph.hpp"
#include "runtime/ir/shape_inference.hpp"

namespace kiln::ir {

// `body` as a graph of its own: the enclosing-scope values it reads become
// inputs after its own, in outer_references() order, typed by `outer`
// (untyped where it knows none), except those `constants` holds, which
// become initializers.
Graph standalone_body(const Graph& body, const std::function<const ValueInfo*(const std::string&)>& outer,
                      const std::map<std::string, Tensor>& constants);

// The outputs of an If, a Loop or a Scan (opset 9 on) from its bodies, given
// what the enclosing scope knows; std::nullopt for other nodes and for
// opset-8 Scan. A body that fails to infer (a branch whose shapes only work
// at values where it is not taken) leaves the outputs it decides unknown.
std::optional<std::vector<ValueInfo>> infer_control_flow(const Node& node, const std::vector<const ValueInfo*>& inputs,
                                                         const std::vector<const Tensor*>& input_values,
                                                         const InferenceResult& outer, const ConstantEvaluator& evaluator);

}  // namespace kiln::ir
