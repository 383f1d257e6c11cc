#include "runtime/ir/control_flow_shapes.hpp"

#include <algorithm>

namespace kiln::ir {

namespace {

// What both of two possible values have in common: their dtype if it is the
// same, each dim on which they agree.
ValueInfo common(const ValueInfo& a, const ValueInfo& b) {
  ValueInfo v;
  v.kind = a.kind == b.kind ? a.kind : ValueKind::Tensor;
  v.element_kind = a.element_kind == b.element_kind ? a.element_kind : ValueKind::Tensor;
  v.dtype = a.dtype == b.dtype ? a.dtype : DType::Undefined;
  if (!a.shape.rank_known || !b.shape.rank_known || a.shape.rank() != b.shape.rank()) return v;
  v.shape = a.shape;
  for (size_t i = 0; i < v.shape.dims.size(); ++i)
    if (a.shape.dims[i] != b.shape.dims[i]) v.shape.dims[i] = Dim::unknown();
  return v;
}

bool same(const ValueInfo& a, const ValueInfo& b) {
  return a.dtype == b.dtype && a.shape.is_concrete() && b.shape.is_concrete() && a.shape.concrete() == b.shape.concrete();
}

ValueInfo of(DType dtype, Dims dims) {
  ValueInfo v;
  v.dtype = dtype;
  v.shape = Shape::from_dims(dims);
  return v;
}

// A value an iteration carries whose shape changed on the first: later ones
// may change it again, so only its dtype and rank are known.
ValueInfo varying(const ValueInfo& v) {
  ValueInfo out;
  out.kind = v.kind;
  out.element_kind = v.element_kind;
  out.dtype = v.dtype;
  if (v.shape.rank_known) out.shape = Shape{std::vector<Dim>(v.shape.dims.size(), Dim::unknown()), true};
  return out;
}

struct Inferred {
  std::vector<ValueInfo> outputs;  // the body's, in order
  std::map<std::string, Tensor> constants;
  const Graph* body = nullptr;
};

// The body's outputs with its own inputs typed `formal`, and those `fixed`
// names taking that value; nullopt if it does not infer.
std::optional<Inferred> infer_body(const Graph& body, const std::vector<ValueInfo>& formal, const InferenceResult& outer,
                                   const ConstantEvaluator& evaluator, const std::map<std::string, Tensor>& fixed = {}) {
  auto lookup = [&](const std::string& name) -> const ValueInfo* {
    auto it = outer.values.find(name);
    return it == outer.values.end() ? nullptr : &it->second;
  };
  Graph g = standalone_body(body, lookup, outer.constants);
  for (const auto& [name, value] : fixed) g.initializers[name] = value;
  std::vector<ValueInfo> inputs;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    if (fixed.count(g.inputs[i].name)) continue;
    inputs.push_back(i < formal.size() ? formal[i] : g.inputs[i]);
    inputs.back().name = g.inputs[i].name;
  }
  try {
    InferenceResult r = infer_shapes(g, inputs, evaluator);
    Inferred out;
    out.body = &body;
    for (const auto& o : g.outputs) {
      auto it = r.values.find(o.name);
      out.outputs.push_back(it == r.values.end() ? ValueInfo{} : it->second);
    }
    out.constants = std::move(r.constants);
    return out;
  } catch (const Error&) {
    return std::nullopt;
  }
}

const Graph* graph_attr(const Node& node, const char* name) {
  const Attribute* a = node.attr(name);
  return a && a->kind == Attribute::Kind::Graph ? a->g.get() : nullptr;
}

std::vector<int64_t> ints_attr(const Node& node, const char* name, size_t count) {
  const Attribute* a = node.attr(name);
  if (a && a->kind == Attribute::Kind::Ints) return a->ints;
  return std::vector<int64_t>(count, 0);
}

bool is_true(const Tensor* t) { return t && t->numel() == 1 && t->as_double(0) != 0; }

std::optional<std::vector<ValueInfo>> infer_if(const Node& node, const std::vector<const Tensor*>& values,
                                               const InferenceResult& outer, const ConstantEvaluator& evaluator) {
  const Graph* then_branch = graph_attr(node, "then_branch");
  const Graph* else_branch = graph_attr(node, "else_branch");
  if (!then_branch || !else_branch) return std::nullopt;
  std::optional<Inferred> then_out, else_out;
  const Tensor* cond = values.empty() ? nullptr : values[0];
  if (!cond || is_true(cond)) then_out = infer_body(*then_branch, {}, outer, evaluator);
  if (!cond || !is_true(cond)) else_out = infer_body(*else_branch, {}, outer, evaluator);
  std::vector<ValueInfo> outs(node.outputs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    const bool in_then = then_out && i < then_out->outputs.size(), in_else = else_out && i < else_out->outputs.size();
    if (cond)
      outs[i] = in_then ? then_out->outputs[i] : in_else ? else_out->outputs[i] : ValueInfo{};
    else if (in_then && in_else)
      outs[i] = common(then_out->outputs[i], else_out->outputs[i]);
  }
  return outs;
}

// Whether a Loop runs every trip of its count: its condition starts true
// (absent or a true constant), and a body given a true condition makes it
// true again (the body was inferred with its condition input fixed to true).
bool runs_every_trip(bool starts_true, const Inferred& body) {
  const Graph& g = *body.body;
  if (!starts_true || g.outputs.empty()) return false;
  auto c = body.constants.find(g.outputs[0].name);
  return c != body.constants.end() && is_true(&c->second);
}

std::optional<std::vector<ValueInfo>> infer_loop(const Node& node, const std::vector<const ValueInfo*>& inputs,
                                                 const std::vector<const Tensor*>& values, const InferenceResult& outer,
                                                 const ConstantEvaluator& evaluator) {
  const Graph* body = graph_attr(node, "body");
  if (!body || node.inputs.size() < 2) return std::nullopt;
  const size_t carried = node.inputs.size() - 2;
  std::vector<ValueInfo> formal = {of(DType::Int64, {}), of(DType::Bool, {})};
  for (size_t i = 0; i < carried; ++i) formal.push_back(inputs[2 + i] ? *inputs[2 + i] : ValueInfo{});
  const bool cond_given = !node.inputs[1].empty();
  const bool starts_true = !cond_given || is_true(values.size() > 1 ? values[1] : nullptr);
  std::map<std::string, Tensor> fixed;
  if (starts_true && body->inputs.size() > 1) fixed[body->inputs[1].name] = Tensor::scalar<bool>(true);
  std::optional<Inferred> b = infer_body(*body, formal, outer, evaluator, fixed);
  if (!b || b->outputs.size() < carried + 1) return std::nullopt;
  bool steady = true;
  for (size_t i = 0; i < carried; ++i) steady = steady && same(formal[2 + i], b->outputs[1 + i]);
  std::vector<ValueInfo> outs(node.outputs.size());
  for (size_t i = 0; i < carried && i < outs.size(); ++i) outs[i] = steady ? formal[2 + i] : varying(b->outputs[1 + i]);
  const Tensor* trip = values.empty() ? nullptr : values[0];
  const Dim count = trip && trip->numel() == 1 && runs_every_trip(starts_true, *b)
                        ? Dim::known(std::max<int64_t>(0, trip->as_int64(0)))
                        : Dim::unknown();
  for (size_t j = carried; j < outs.size() && 1 + j < b->outputs.size(); ++j) {
    ValueInfo each = steady ? b->outputs[1 + j] : varying(b->outputs[1 + j]);
    if (!each.shape.rank_known) continue;
    each.shape.dims.insert(each.shape.dims.begin(), count);
    outs[j] = each;
  }
  return outs;
}

std::optional<std::vector<ValueInfo>> infer_scan(const Node& node, const std::vector<const ValueInfo*>& inputs,
                                                 const InferenceResult& outer, const ConstantEvaluator& evaluator) {
  const Graph* body = graph_attr(node, "body");
  const Attribute* m_attr = node.attr("num_scan_inputs");
  if (!body || !m_attr || node.opset < 9 || m_attr->i < 1 || size_t(m_attr->i) > node.inputs.size()) return std::nullopt;
  const size_t m = size_t(m_attr->i), n = node.inputs.size() - m;
  std::vector<int64_t> in_axes = ints_attr(node, "scan_input_axes", m);
  if (in_axes.size() != m) return std::nullopt;
  std::vector<ValueInfo> formal;
  for (size_t i = 0; i < n; ++i) formal.push_back(inputs[i] ? *inputs[i] : ValueInfo{});
  Dim length = Dim::unknown();
  for (size_t j = 0; j < m; ++j) {
    const ValueInfo* in = inputs[n + j];
    if (!in || !in->shape.rank_known) return std::nullopt;
    int64_t axis = in_axes[j] < 0 ? in_axes[j] + in->shape.rank() : in_axes[j];
    if (axis < 0 || axis >= in->shape.rank()) return std::nullopt;
    ValueInfo slice = *in;
    if (j == 0) length = slice.shape.dims[size_t(axis)];
    slice.shape.dims.erase(slice.shape.dims.begin() + axis);
    formal.push_back(slice);
  }
  std::optional<Inferred> b = infer_body(*body, formal, outer, evaluator);
  if (!b || b->outputs.size() < n) return std::nullopt;
  bool steady = true;
  for (size_t i = 0; i < n; ++i) steady = steady && same(formal[i], b->outputs[i]);
  const size_t k = b->outputs.size() - n;
  std::vector<int64_t> out_axes = ints_attr(node, "scan_output_axes", k);
  std::vector<ValueInfo> outs(node.outputs.size());
  for (size_t i = 0; i < n && i < outs.size(); ++i) outs[i] = steady ? formal[i] : varying(b->outputs[i]);
  for (size_t j = 0; j < k && n + j < outs.size() && j < out_axes.size(); ++j) {
    ValueInfo each = steady ? b->outputs[n + j] : varying(b->outputs[n + j]);
    if (!each.shape.rank_known) continue;
    int64_t axis = out_axes[j] < 0 ? out_axes[j] + each.shape.rank() + 1 : out_axes[j];
    if (axis < 0 || axis > each.shape.rank()) continue;
    each.shape.dims.insert(each.shape.dims.begin() + axis, length);
    outs[n + j] = each;
  }
  return outs;
}

}  // namespace

Graph standalone_body(const Graph& body, const std::function<const ValueInfo*(const std::string&)>& outer,
                      const std::map<std::string, Tensor>& constants) {
  Graph g = body;
  for (const auto& name : body.outer_references()) {
    auto c = constants.find(name);
    if (c != constants.end()) {
      g.initializers[name] = c->second;
      continue;
    }
    const ValueInfo* v = outer(name);
    ValueInfo in = v ? *v : ValueInfo{};
    in.name = name;
    g.inputs.push_back(in);
  }
  return g;
}

std::optional<std::vector<ValueInfo>> infer_control_flow(const Node& node, const std::vector<const ValueInfo*>& inputs,
                                                         const std::vector<const Tensor*>& input_values,
                                                         const InferenceResult& outer, const ConstantEvaluator& evaluator) {
  if (!node.domain.empty()) return std::nullopt;
  if (node.op_type == "If") return infer_if(node, input_values, outer, evaluator);
  if (node.op_type == "Loop") return infer_loop(node, inputs, input_values, outer, evaluator);
  if (node.op_type == "Scan") return infer_scan(node, inputs, outer, evaluator);
  return std::nullopt;
}

}  // namespace kiln::ir
