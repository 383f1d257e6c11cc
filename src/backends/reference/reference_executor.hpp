#pragma once
// Runs a graph node by node with the reference kernels. Clarity over speed:
// this is the oracle every compiled backend is checked against.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/ir/graph.hpp"
#include "runtime/ir/shape_inference.hpp"

namespace kiln::ref {

class KernelRegistry;

// Outputs in the order of graph.outputs. `inputs` may also override
// initializers that are graph inputs. `kernels` replaces the built-in table
// (an interpreter with faster kernels for some operators). Throws ir::Error
// naming the node. `timer`, if given, hears how long each node of `graph`
// took, in milliseconds (a node with subgraphs includes them).
using NodeTimer = std::function<void(size_t node, double ms)>;
std::vector<ir::Tensor> run_graph(const ir::Graph& graph, const std::map<std::string, ir::Tensor>& inputs,
                                  const KernelRegistry* kernels = nullptr, const NodeTimer* timer = nullptr);
// The same with values of any kind (sequences, optionals) in and out;
// run_graph fails with InvalidArgument on an output that is not a tensor.
std::vector<ir::Value> run_graph_values(const ir::Graph& graph, const std::map<std::string, ir::Value>& inputs,
                                        const KernelRegistry* kernels = nullptr, const NodeTimer* timer = nullptr);
// The tensors of `values` (outputs of `graph`), moved out; InvalidArgument
// naming the first output that is not a tensor.
std::vector<ir::Tensor> tensors_only(std::vector<ir::Value>& values, const ir::Graph& graph);

// Op types of `graph` (and its subgraphs) with no reference kernel.
std::vector<std::string> unsupported_ops(const ir::Graph& graph);
bool has_kernel(const std::string& domain, const std::string& op_type);
// Whether the reference kernels take `domain`'s operators: ONNX's, and
// com.microsoft's QLinearAdd and QGemm.
bool domain_has(const std::string& domain, const std::string& op_type);

// Folds constant nodes for shape inference with the reference kernels.
ir::ConstantEvaluator constant_evaluator();

}  // namespace kiln::ref
