// torchvision's MnasNet and ShuffleNet end with `x.mean([2, 3])`, which
// exports as ReduceMean over the spatial axes: what GlobalAveragePool does,
// which backends already compile (the cpu backend had it on reference
// kernels: 0.5 of MnasNet's 2.6 ms).
#include <algorithm>

#include "runtime/passes/new_value.hpp"
#include "runtime/passes/passes.hpp"

namespace kiln::passes {

namespace {

// The node's axes, sorted and made non-negative; empty if they are not
// known constants (or absent, which means every axis).
std::vector<int64_t> reduced_axes(const ir::Graph& graph, const ir::Node& n, int64_t rank) {
  std::vector<int64_t> axes;
  if (n.opset < 18) {
    if (const ir::Attribute* a = n.attr("axes")) axes = a->ints;
  } else if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
    if (const ir::Tensor* t = graph.constant(n.inputs[1])) axes = t->to_int64_vector();
  }
  for (int64_t& a : axes) {
    if (a < -rank || a >= rank) return {};
    if (a < 0) a += rank;
  }
  std::sort(axes.begin(), axes.end());
  return axes;
}

}  // namespace

int reduce_as_global_pool(ir::Graph& graph, ir::Specialization& spec) {
  auto& values = spec.result.values;
  std::vector<ir::Node> nodes;
  nodes.reserve(graph.nodes.size());
  int changed = 0;
  for (ir::Node& n : graph.nodes) {
    const bool mean = n.op_type == "ReduceMean", max = n.op_type == "ReduceMax";
    auto in = n.inputs.empty() ? values.end() : values.find(n.inputs[0]);
    if ((!mean && !max) || !n.domain.empty() || n.outputs.size() != 1 || in == values.end() ||
        in->second.dtype != ir::DType::Float32 || !in->second.shape.is_concrete() || in->second.shape.rank() < 3) {
      nodes.push_back(std::move(n));
      continue;
    }
    const ir::Dims dims = in->second.shape.concrete();
    const int64_t rank = int64_t(dims.size());
    std::vector<int64_t> spatial(size_t(rank - 2));
    for (int64_t a = 2; a < rank; ++a) spatial[size_t(a - 2)] = a;
    if (reduced_axes(graph, n, rank) != spatial) {
      nodes.push_back(std::move(n));
      continue;
    }
    const ir::Attribute* keep = n.attr("keepdims");
    const bool keepdims = !keep || keep->i != 0;
    ir::Node pool;
    pool.name = n.name;
    pool.op_type = mean ? "GlobalAveragePool" : "GlobalMaxPool";
    pool.opset = n.opset;
    pool.inputs = {n.inputs[0]};
    pool.outputs = n.outputs;
    if (keepdims) {
      nodes.push_back(std::move(pool));
      ++changed;
      continue;
    }
    // Without the kept axes: the pool's N x C x 1 x ... then Flatten to N x C.
    ir::Dims pooled_dims = dims;
    std::fill(pooled_dims.begin() + 2, pooled_dims.end(), 1);
    const std::string pooled = new_value(graph, spec, n.outputs[0] + "/pooled", ir::DType::Float32, pooled_dims);
    pool.outputs = {pooled};
    ir::Node flatten;
    flatten.name = n.name + "/flatten";
    flatten.op_type = "Flatten";
    flatten.opset = n.opset;
    flatten.inputs = {pooled};
    flatten.outputs = n.outputs;
    flatten.attributes["axis"] = ir::int_attribute(1);
    nodes.push_back(std::move(pool));
    nodes.push_back(std::move(flatten));
    ++changed;
  }
  graph.nodes = std::move(nodes);
  return changed;
}

}  // namespace kiln::passes
