// Inference BatchNormalization, y = x * s + t per channel with
//   s = scale / sqrt(var + eps),  t = B - mean * s:
// - after a Conv it folds into it: W'[m] = W[m] * s[m], B'[m] = bias[m] * s[m] + t[m];
// - elsewhere (DenseNet's Concat -> BatchNormalization -> Relu) it becomes
//   a depthwise 1x1 Conv of weights s and bias t, which backends run as
//   fast as a convolution and fuse what follows into.
#include <cmath>
#include <map>
#include <optional>
#include <vector>

#include "runtime/passes/new_value.hpp"
#include "runtime/passes/passes.hpp"

namespace kiln::passes {

namespace {

// A BatchNormalization in inference mode with constant parameters for
// `channels` channels, as its per-channel factor s and offset t.
struct Affine {
  std::vector<double> s, t;
};

std::optional<Affine> affine(const ir::Graph& graph, const ir::Node& bn, int64_t channels) {
  if (bn.op_type != "BatchNormalization" || !bn.domain.empty() || bn.inputs.size() != 5) return std::nullopt;
  const ir::Attribute* training = bn.attr("training_mode");
  const ir::Attribute* spatial = bn.attr("spatial");
  if ((training && training->i != 0) || (spatial && spatial->i == 0)) return std::nullopt;
  for (size_t i = 1; i < bn.outputs.size(); ++i)
    if (!bn.outputs[i].empty()) return std::nullopt;
  const ir::Tensor *scale = graph.constant(bn.inputs[1]), *shift = graph.constant(bn.inputs[2]);
  const ir::Tensor *mean = graph.constant(bn.inputs[3]), *var = graph.constant(bn.inputs[4]);
  for (const ir::Tensor* p : {scale, shift, mean, var})
    if (!p || p->numel() != channels || (p->dtype() != ir::DType::Float32 && p->dtype() != ir::DType::Float64))
      return std::nullopt;
  const ir::Attribute* eps_attr = bn.attr("epsilon");
  const double eps = eps_attr ? eps_attr->f : 1e-5;
  Affine a;
  for (int64_t c = 0; c < channels; ++c) {
    a.s.push_back(scale->as_double(c) / std::sqrt(var->as_double(c) + eps));
    a.t.push_back(shift->as_double(c) - mean->as_double(c) * a.s.back());
  }
  return a;
}

// A new initializer named after `base`, with its type in `spec` too.
std::string add_weight(ir::Graph& graph, ir::Specialization& spec, const std::string& base, ir::DType dtype, const ir::Dims& dims,
                       const std::vector<double>& values) {
  ir::Tensor t(dtype, dims);
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == ir::DType::Float32)
      t.data<float>()[i] = float(values[i]);
    else
      t.data<double>()[i] = values[i];
  }
  const std::string name = new_value(graph, spec, base, dtype, dims);
  graph.initializers[name] = t;
  spec.result.constants[name] = t;
  return name;
}

}  // namespace

int fold_batch_norm(ir::Graph& graph, ir::Specialization& spec) {
  auto uses = ir::use_counts(graph);
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    for (const auto& o : graph.nodes[i].outputs) producer[o] = i;

  int folded = 0;
  std::vector<bool> removed(graph.nodes.size(), false);
  for (size_t b = 0; b < graph.nodes.size(); ++b) {
    const ir::Node& bn = graph.nodes[b];
    if (bn.op_type != "BatchNormalization" || bn.inputs.empty()) continue;
    auto p = producer.find(bn.inputs[0]);
    if (p == producer.end() || removed[p->second]) continue;
    ir::Node& conv = graph.nodes[p->second];
    if (conv.op_type != "Conv" || !conv.domain.empty() || uses[conv.outputs[0]] != 1 || conv.inputs.size() < 2) continue;
    const ir::Tensor* w = graph.constant(conv.inputs[1]);
    const bool has_bias = conv.inputs.size() > 2 && !conv.inputs[2].empty();
    const ir::Tensor* bias = has_bias ? graph.constant(conv.inputs[2]) : nullptr;
    if (!w || (has_bias && !bias) || w->rank() < 3) continue;
    if (w->dtype() != ir::DType::Float32 && w->dtype() != ir::DType::Float64) continue;
    const int64_t m = w->dim(0);
    if (bias && bias->numel() != m) continue;
    const std::optional<Affine> a = affine(graph, bn, m);
    if (!a) continue;

    const int64_t per_channel = w->numel() / std::max<int64_t>(m, 1);
    std::vector<double> new_w(static_cast<size_t>(w->numel())), new_b(static_cast<size_t>(m));
    for (int64_t c = 0; c < m; ++c) {
      new_b[size_t(c)] = (bias ? bias->as_double(c) : 0.0) * a->s[size_t(c)] + a->t[size_t(c)];
      for (int64_t k = 0; k < per_channel; ++k)
        new_w[size_t(c * per_channel + k)] = w->as_double(c * per_channel + k) * a->s[size_t(c)];
    }
    conv.inputs.resize(3);
    conv.inputs[1] = add_weight(graph, spec, conv.name + "_bn_weight", w->dtype(), w->dims(), new_w);
    conv.inputs[2] = add_weight(graph, spec, conv.name + "_bn_bias", w->dtype(), {m}, new_b);
    conv.outputs[0] = bn.outputs[0];
    removed[b] = true;
    ++folded;
  }
  ir::erase_nodes(graph, removed);
  if (folded) remove_dead_nodes(graph);  // the old weights
  return folded;
}

int batch_norm_as_conv(ir::Graph& graph, ir::Specialization& spec) {
  int changed = 0;
  for (ir::Node& bn : graph.nodes) {
    if (bn.op_type != "BatchNormalization" || bn.inputs.empty()) continue;
    auto x = spec.result.values.find(bn.inputs[0]);
    if (x == spec.result.values.end() || !x->second.shape.rank_known) continue;
    const ir::Dims dims = x->second.shape.concrete();
    const ir::DType dtype = x->second.dtype;
    // A Conv needs spatial axes; BatchNormalization of [N, C] stays.
    if (dims.size() < 3 || dtype != ir::DType::Float32) continue;
    const std::optional<Affine> a = affine(graph, bn, dims[1]);
    if (!a) continue;
    ir::Dims w_dims(dims.size(), 1);
    w_dims[0] = dims[1];
    ir::Node conv;
    conv.name = bn.name;
    conv.op_type = "Conv";
    conv.opset = bn.opset;
    conv.inputs = {bn.inputs[0], add_weight(graph, spec, bn.name + "_as_conv_weight", dtype, w_dims, a->s),
                   add_weight(graph, spec, bn.name + "_as_conv_bias", dtype, {dims[1]}, a->t)};
    conv.outputs = {bn.outputs[0]};
    conv.attributes["group"] = ir::int_attribute(dims[1]);
    bn = std::move(conv);
    ++changed;
  }
  if (changed) remove_dead_nodes(graph);  // the old parameters
  return changed;
}

}  // namespace kiln::passes
