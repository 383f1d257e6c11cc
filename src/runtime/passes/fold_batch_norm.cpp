// Conv -> BatchNormalization (inference) becomes one Conv:
//   s = scale / sqrt(var + eps);  W'[m] = W[m] * s[m];  B'[m] = (B[m] - mean[m]) * s[m] + bias[m]
#include <cmath>
#include <map>
#include <set>

#include "runtime/passes/passes.hpp"

namespace kiln::passes {

namespace {

std::map<std::string, int> count_uses(const ir::Graph& g) {
  std::map<std::string, int> uses;
  for (const auto& n : g.nodes)
    for (const auto& name : ir::values_read(n)) uses[name]++;
  for (const auto& o : g.outputs) uses[o.name]++;
  return uses;
}

std::string fresh_name(const ir::Graph& g, const std::string& base) {
  std::string name = base;
  for (int i = 1; g.initializers.count(name); ++i) name = base + "_" + std::to_string(i);
  return name;
}

}  // namespace

int fold_batch_norm(ir::Graph& graph) {
  std::set<std::string> overridable;
  for (const auto& in : graph.inputs) overridable.insert(in.name);
  auto constant = [&](const std::string& name) -> const ir::Tensor* {
    auto it = graph.initializers.find(name);
    return it == graph.initializers.end() || overridable.count(name) ? nullptr : &it->second;
  };
  auto uses = count_uses(graph);
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    for (const auto& o : graph.nodes[i].outputs) producer[o] = i;

  int folded = 0;
  std::vector<bool> removed(graph.nodes.size(), false);
  for (size_t b = 0; b < graph.nodes.size(); ++b) {
    const ir::Node& bn = graph.nodes[b];
    if (bn.op_type != "BatchNormalization" || !bn.domain.empty() || bn.inputs.size() != 5) continue;
    const ir::Attribute* training = bn.attr("training_mode");
    const ir::Attribute* spatial = bn.attr("spatial");
    if ((training && training->i != 0) || (spatial && spatial->i == 0)) continue;
    bool extra_outputs = false;
    for (size_t i = 1; i < bn.outputs.size(); ++i) extra_outputs |= !bn.outputs[i].empty();
    if (extra_outputs) continue;
    auto p = producer.find(bn.inputs[0]);
    if (p == producer.end() || removed[p->second]) continue;
    ir::Node& conv = graph.nodes[p->second];
    if (conv.op_type != "Conv" || !conv.domain.empty() || uses[conv.outputs[0]] != 1 || conv.inputs.size() < 2) continue;
    const ir::Tensor* w = constant(conv.inputs[1]);
    const ir::Tensor* bias = conv.inputs.size() > 2 && !conv.inputs[2].empty() ? constant(conv.inputs[2]) : nullptr;
    if (!w || (conv.inputs.size() > 2 && !conv.inputs[2].empty() && !bias)) continue;
    const ir::Tensor *scale = constant(bn.inputs[1]), *shift = constant(bn.inputs[2]);
    const ir::Tensor *mean = constant(bn.inputs[3]), *var = constant(bn.inputs[4]);
    if (!scale || !shift || !mean || !var || w->rank() < 3) continue;
    if (w->dtype() != ir::DType::Float32 && w->dtype() != ir::DType::Float64) continue;
    const int64_t m = w->dim(0);
    if (scale->numel() != m || shift->numel() != m || mean->numel() != m || var->numel() != m || (bias && bias->numel() != m))
      continue;

    const ir::Attribute* eps_attr = bn.attr("epsilon");
    const double eps = eps_attr ? eps_attr->f : 1e-5;
    const int64_t per_channel = w->numel() / std::max<int64_t>(m, 1);
    ir::Tensor new_w(w->dtype(), w->dims()), new_b(w->dtype(), {m});
    for (int64_t c = 0; c < m; ++c) {
      const double s = scale->as_double(c) / std::sqrt(var->as_double(c) + eps);
      const double b0 = bias ? bias->as_double(c) : 0.0;
      const double nb = (b0 - mean->as_double(c)) * s + shift->as_double(c);
      for (int64_t k = 0; k < per_channel; ++k) {
        const int64_t i = c * per_channel + k;
        if (w->dtype() == ir::DType::Float32) new_w.data<float>()[i] = float(w->as_double(i) * s);
        else new_w.data<double>()[i] = w->as_double(i) * s;
      }
      if (w->dtype() == ir::DType::Float32) new_b.data<float>()[c] = float(nb);
      else new_b.data<double>()[c] = nb;
    }
    const std::string w_name = fresh_name(graph, conv.name + "_bn_weight");
    graph.initializers[w_name] = new_w;
    const std::string b_name = fresh_name(graph, conv.name + "_bn_bias");
    graph.initializers[b_name] = new_b;
    conv.inputs.resize(3);
    conv.inputs[1] = w_name;
    conv.inputs[2] = b_name;
    conv.outputs[0] = bn.outputs[0];
    removed[b] = true;
    ++folded;
  }
  std::vector<ir::Node> kept;
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    if (!removed[i]) kept.push_back(std::move(graph.nodes[i]));
  graph.nodes = std::move(kept);
  if (folded) remove_dead_nodes(graph);  // the old weights
  return folded;
}

}  // namespace kiln::passes
