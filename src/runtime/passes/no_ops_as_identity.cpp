// Exporters leave nodes that, at the concrete shapes of a specialization, do
// nothing: torchvision's Swin pads each window partition to a multiple of the
// window size, which at 224x224 is a Pad of zeros. As Identity they cost a
// backend nothing (the cpu backend makes them views). An inference-mode
// Dropout is one too; the mask it may also return is all ones, a constant.
#include <algorithm>
#include <cstring>

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

  // Dropout returns its input unless it trains with a ratio above zero. Some
  // exporters (torchvision's Swin) write training_mode = true with ratio 0.
  bool is_identity_dropout(const ir::Node& n) const {
    if (n.op_type != "Dropout" || (!n.domain.empty() && n.domain != "ai.onnx") || n.inputs.empty() || n.inputs[0].empty())
      return false;
    const ir::ValueInfo* in = info(n.inputs[0]);
    if (!in || !in->shape.is_concrete()) return false;
    if (n.opset < 7) {
      const ir::Attribute *is_test = n.attr("is_test"), *ratio = n.attr("ratio");
      return (is_test && is_test->i != 0) || (ratio && ratio->f == 0.0f);
    }
    if (n.opset < 12 || n.inputs.size() < 3 || n.inputs[2].empty()) return true;  // no training mode
    const ir::Tensor* training = graph_.constant(n.inputs[2]);
    const ir::Tensor* ratio = n.inputs.size() > 1 && !n.inputs[1].empty() ? graph_.constant(n.inputs[1]) : nullptr;
    if (training && training->numel() == 1 && training->as_int64(0) == 0) return true;
    return ratio && ratio->numel() == 1 && ratio->as_double(0) == 0.0;
  }

  // The mask of an identity Dropout: ones, bool from opset 10, else the input's type.
  ir::Tensor dropout_mask(const ir::Node& n) const {
    const ir::ValueInfo& in = *info(n.inputs[0]);
    ir::Tensor ones(ir::DType::Bool, in.shape.concrete());
    std::memset(ones.raw(), 1, ones.nbytes());
    return n.opset < 10 ? ones.cast(in.dtype) : ones;
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
    if (no_ops.is_identity_dropout(n)) {
      if (n.outputs.size() > 1 && !n.outputs[1].empty()) graph.initializers[n.outputs[1]] = no_ops.dropout_mask(n);
      n.outputs.resize(1);
    } else if (!no_ops.is_no_op(n)) {
      continue;
    }
    n.op_type = "Identity";
    n.domain.clear();
    n.inputs.resize(1);
    n.attributes.clear();
    ++changed;
  }
  return changed;
}

}  // namespace kiln::passes
