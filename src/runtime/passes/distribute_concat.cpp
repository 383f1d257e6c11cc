// A Concat along channels costs a copy of everything it joins, and its only
// reader usually works channel by channel (MaxPool) or is linear in its
// input channels (Conv), so the Concat can move past it or vanish:
//   MaxPool(Concat(a, b))  ->  Concat(MaxPool(a), MaxPool(b))
//   Conv(Concat(a, b), W, B)  ->  Conv(a, W[:, :Ca], B) + Conv(b, W[:, Ca:])
// SqueezeNet's fire modules are this pattern: at batch 8 its Concats took a
// fifth of the run. The Add fuses into the second Conv as a residual.
// A Conv is split only when its output is small next to its input.
#include <algorithm>
#include <cstring>
#include <map>

#include "runtime/passes/new_value.hpp"
#include "runtime/passes/passes.hpp"

namespace kiln::passes {

namespace {

class Distributor {
 public:
  Distributor(ir::Graph& g, ir::Specialization& spec)
      : g_(g), spec_(spec), values_(spec.result.values), constants_(spec.result.constants), uses_(ir::use_counts(g)) {}

  int run() {
    int changed = 0;
    std::vector<ir::Node> nodes = std::move(g_.nodes);
    g_.nodes.clear();
    for (ir::Node& n : nodes) {
      if (push_pool(n) || split_conv(n))
        ++changed;
      else
        add(std::move(n));
    }
    if (changed) remove_dead_nodes(g_);
    return changed;
  }

 private:
  void add(ir::Node n) {
    for (const auto& o : n.outputs) producer_[o] = g_.nodes.size();
    g_.nodes.push_back(std::move(n));
  }

  const ir::ValueInfo* info(const std::string& name) const {
    auto it = values_.find(name);
    return it == values_.end() || !it->second.shape.is_concrete() ? nullptr : &it->second;
  }

  std::string new_value(const std::string& base, ir::DType dtype, const ir::Dims& dims) {
    return passes::new_value(g_, spec_, base, dtype, dims);
  }

  // The inputs of the float Concat along axis 1 that produces `value` and
  // is read by nothing else; empty if there is none.
  std::vector<std::string> concat_parts(const std::string& value) const {
    auto p = producer_.find(value);
    const ir::ValueInfo* out = info(value);
    if (p == producer_.end() || !out || out->dtype != ir::DType::Float32 || out->shape.rank() < 3) return {};
    auto u = uses_.find(value);
    if (u == uses_.end() || u->second != 1) return {};
    const ir::Node& c = g_.nodes[p->second];
    if (c.op_type != "Concat" || !c.domain.empty() || c.inputs.size() < 2) return {};
    const ir::Attribute* axis_attr = c.attr("axis");
    int64_t axis = axis_attr ? axis_attr->i : 1;
    if (axis < 0) axis += out->shape.rank();
    if (axis != 1) return {};
    for (const auto& in : c.inputs) {
      const ir::ValueInfo* v = info(in);
      if (in.empty() || !v || v->dtype != ir::DType::Float32) return {};
    }
    return c.inputs;
  }

  bool push_pool(const ir::Node& pool) {
    if (pool.op_type != "MaxPool" || !pool.domain.empty() || pool.inputs.size() != 1 || pool.outputs.empty()) return false;
    for (size_t i = 1; i < pool.outputs.size(); ++i)
      if (!pool.outputs[i].empty()) return false;  // Indices would count channels of the whole
    const std::vector<std::string> parts = concat_parts(pool.inputs[0]);
    const ir::ValueInfo* out = info(pool.outputs[0]);
    if (parts.empty() || !out) return false;
    const ir::Node concat = g_.nodes[producer_.at(pool.inputs[0])];
    ir::Node joined = concat;
    joined.name = concat.name + "/after_pool";
    joined.inputs.clear();
    joined.outputs = {pool.outputs[0]};
    for (size_t i = 0; i < parts.size(); ++i) {
      ir::Dims dims = out->shape.concrete();
      dims[1] = values_.at(parts[i]).shape.concrete()[1];
      ir::Node piece = pool;
      piece.name = pool.name + "/part" + std::to_string(i);
      piece.inputs = {parts[i]};
      piece.outputs = {new_value(pool.outputs[0] + "/part" + std::to_string(i), ir::DType::Float32, dims)};
      joined.inputs.push_back(piece.outputs[0]);
      add(std::move(piece));
    }
    add(std::move(joined));
    return true;
  }

  bool split_conv(const ir::Node& conv) {
    if (conv.op_type != "Conv" || !conv.domain.empty() || conv.inputs.size() < 2 || conv.outputs.size() != 1) return false;
    const ir::Attribute* group = conv.attr("group");
    if (group && group->i != 1) return false;
    const ir::Tensor* w = g_.constant(conv.inputs[1]);
    const bool has_bias = conv.inputs.size() > 2 && !conv.inputs[2].empty();
    if (!w || w->dtype() != ir::DType::Float32 || w->rank() < 3 || (has_bias && !g_.constant(conv.inputs[2]))) return false;
    const std::vector<std::string> parts = concat_parts(conv.inputs[0]);
    const ir::ValueInfo* out = info(conv.outputs[0]);
    if (parts.empty() || !out) return false;
    int64_t channels = 0;
    for (const auto& p : parts) channels += values_.at(p).shape.concrete()[1];
    if (channels != w->dim(1)) return false;
    // Each part after the first writes the output again and reads it back
    // (the Add): worth it only when that is well under copying the Concat
    // (true of squeeze convolutions, not of a classifier that widens).
    const int64_t out_elements = ir::checked_numel(out->shape.concrete());
    const int64_t concat_elements = ir::checked_numel(values_.at(conv.inputs[0]).shape.concrete());
    if (2 * out_elements * int64_t(parts.size() - 1) > concat_elements) return false;

    // W[:, offset : offset + c] for each part.
    const int64_t m = w->dim(0), window = w->numel() / std::max<int64_t>(m * channels, 1);
    std::string sum;
    int64_t offset = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      const int64_t c = values_.at(parts[i]).shape.concrete()[1];
      ir::Dims wd = w->dims();
      wd[1] = c;
      ir::Tensor piece_w(ir::DType::Float32, wd);
      for (int64_t o = 0; o < m; ++o)
        std::memcpy(piece_w.data<float>() + o * c * window, w->data<float>() + (o * channels + offset) * window,
                    sizeof(float) * size_t(c * window));
      offset += c;
      const std::string suffix = "/part" + std::to_string(i);
      const std::string w_name = new_value(conv.inputs[1] + suffix, ir::DType::Float32, wd);
      constants_[w_name] = piece_w;
      g_.initializers[w_name] = std::move(piece_w);
      ir::Node piece = conv;
      piece.name = conv.name + suffix;
      piece.inputs = {parts[i], w_name};
      if (i == 0 && has_bias) piece.inputs.push_back(conv.inputs[2]);
      const bool last = i + 1 == parts.size();
      piece.outputs = {new_value(conv.outputs[0] + suffix, ir::DType::Float32, out->shape.concrete())};
      const std::string partial = piece.outputs[0];
      add(std::move(piece));
      if (i == 0) {
        sum = partial;
        continue;
      }
      ir::Node add_node;
      add_node.name = conv.name + "/sum" + std::to_string(i);
      add_node.op_type = "Add";
      add_node.opset = conv.opset;
      add_node.inputs = {partial, sum};
      add_node.outputs = {
          last ? conv.outputs[0]
               : new_value(conv.outputs[0] + "/sum" + std::to_string(i), ir::DType::Float32, out->shape.concrete())};
      sum = add_node.outputs[0];
      add(std::move(add_node));
    }
    return true;
  }

  ir::Graph& g_;
  ir::Specialization& spec_;
  std::map<std::string, ir::ValueInfo>& values_;
  std::map<std::string, ir::Tensor>& constants_;
  std::map<std::string, int> uses_;
  std::map<std::string, size_t> producer_;  // into g_.nodes as rebuilt
};

}  // namespace

int distribute_concat(ir::Graph& graph, ir::Specialization& spec) { return Distributor(graph, spec).run(); }

}  // namespace kiln::passes
