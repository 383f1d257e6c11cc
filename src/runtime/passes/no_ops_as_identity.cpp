// Exporters leave nodes that, at the concrete shapes of a specialization, do
// nothing: torchvision's Swin pads each window partition to a multiple of the
// window size, which at 224x224 is a Pad of zeros. As Identity they cost a
// backend nothing (the cpu backend makes them views).
#include <algorithm>

#include "runtime/passes/pad_amounts.hpp"
#include "runtime/passes/passes.hpp"

namespace kiln::passes {

namespace {

class NoOps {
 public:
  NoOps(const ir::Graph& graph, const ir::Specialization& spec) : graph_(graph), values_(spec.result.values) {}

  bool is_no_op(const ir::Node& n) const {
    if (!n.domain.empty() && n.domain != "ai.onnx") return false;
    if (n.inputs.empty() || n.inputs[0].empty() || n.outputs.size() != 1) return false;
    const ir::ValueInfo *in = info(n.inputs[0]), *out = info(n.outputs[0]);
    if (!in || !out || in->dtype != out->dtype || !in->shape.is_concrete() || !out->shape.is_concrete() ||
        in->shape.concrete() != out->shape.concrete())
      return false;
    const std::string& op = n.op_type;
    // Broadcasting or repeating to the same shape changes nothing; neither does a cast to the same type.
    if (op == "Expand" || op == "Tile" || op == "Cast") return true;
    if (op == "Pad") {
      // Negative pads crop, so a same-shaped Pad of [1, -1] shifts: zeros only.
      const auto pads = pad_amounts(graph_, n);
      return pads && std::all_of(pads->begin(), pads->end(), [](int64_t p) { return p == 0; });
    }
    // Same length with positive steps (before opset 10 there are none): the whole axis, in order.
    if (op == "Slice") return n.opset < 10 || all_positive(n, 4);
    if (op == "Transpose") {
      const ir::Attribute* perm = n.attr("perm");
      if (!perm) return in->shape.rank() <= 1;
      for (size_t i = 0; i < perm->ints.size(); ++i)
        if (perm->ints[i] != int64_t(i)) return false;
      return true;
    }
    return false;
  }

 private:
  const ir::ValueInfo* info(const std::string& name) const {
    auto it = values_.find(name);
    return it == values_.end() ? nullptr : &it->second;
  }

  // Slice's steps (input 4): absent means 1.
  bool all_positive(const ir::Node& n, size_t i) const {
    if (i >= n.inputs.size() || n.inputs[i].empty()) return true;
    const ir::Tensor* t = graph_.constant(n.inputs[i]);
    if (!t) return false;
    for (int64_t s : t->to_int64_vector())
      if (s <= 0) return false;
    return true;
  }

  const ir::Graph& graph_;
  const std::map<std::string, ir::ValueInfo>& values_;
};

}  // namespace

int no_ops_as_identity(ir::Graph& graph, const ir::Specialization& spec) {
  const NoOps no_ops(graph, spec);
  int changed = 0;
  for (auto& n : graph.nodes) {
    if (!no_ops.is_no_op(n)) continue;
    n.op_type = "Identity";
    n.domain.clear();
    n.inputs.resize(1);
    n.attributes.clear();
    ++changed;
  }
  return changed;
}

}  // namespace kiln::passes
