#include "runtime/ir/shape_inference.hpp"

#include <set>
#include <string_view>

#include "runtime/ir/control_flow_shapes.hpp"
#include "runtime/ir/shape_rules/shape_rule.hpp"

namespace kiln::ir {

namespace {

using shape_rules::NodeView;
using shape_rules::shape_range;
using shape_rules::with_shape;

// Constants larger than this are never folded: folding is for shape
// arithmetic and small tables, not for precomputing the network.
constexpr int64_t kMaxFoldElements = 1 << 16;

// The operator's rule from the table, whatever the node's domain.
std::vector<ValueInfo> infer_node(const NodeView& n, const Graph& graph) {
  const std::string& op = n.node.op_type;
  // Every standard operator but these needs its first input; the backends
  // may then take input 0 as given.
  static const std::set<std::string> first_input_optional = {"Constant", "RandomNormal", "RandomUniform", "Loop",
                                                             "Scan",     "Optional",     "SequenceEmpty"};
  if (!n.input(0) && n.node.domain.empty() && !first_input_optional.count(op)) n.fail("its first input is required but missing");
  if (shape_rules::ShapeRule rule = shape_rules::ShapeRuleTable::instance().find(op)) return rule(n);
  // No rule: fall back on the model's own annotations, if any.
  std::vector<ValueInfo> outs;
  for (const auto& o : n.node.outputs) {
    auto it = graph.value_info.find(o);
    outs.push_back(it != graph.value_info.end() ? it->second : ValueInfo{});
  }
  return outs;
}

bool foldable(const NodeView& n) {
  if (!may_fold(n.node)) return false;
  bool any = false;
  for (size_t i = 0; i < n.in.size(); ++i) {
    if (!n.in[i]) continue;
    if (!n.values[i] || n.values[i]->numel() > kMaxFoldElements) return false;
    any = true;
  }
  return any || n.node.op_type == "Range" || n.node.op_type == "EyeLike";
}

// Unifies an inferred value with the model's declaration: declared fixed dims
// fill in unknown ones; contradictions are errors. Not for the outputs whose
// length is the data's to decide: a model that declares NonZero's output
// 2x3 (as ONNX's own backend tests do) describes one input, and taken as the
// shape it made every other input an error.
ValueInfo reconcile(const Node& node, const std::string& name, ValueInfo inferred, const ValueInfo* declared) {
  inferred.name = name;
  static const std::set<std::string> data_decides = {"NonZero", "Unique", "NonMaxSuppression", "Compress"};
  if (!declared || (node.domain.empty() && data_decides.count(node.op_type))) return inferred;
  if (inferred.kind == ValueKind::Tensor && inferred.dtype == DType::Undefined && !inferred.shape.rank_known) {
    inferred.kind = declared->kind;  // nothing inferred: the declaration says what it is
    inferred.element_kind = declared->element_kind;
  }
  if (inferred.dtype == DType::Undefined) inferred.dtype = declared->dtype;
  if (!inferred.shape.rank_known) {
    inferred.shape = declared->shape;
    return inferred;
  }
  if (!declared->shape.rank_known || declared->shape.rank() != inferred.shape.rank()) return inferred;
  for (size_t i = 0; i < inferred.shape.dims.size(); ++i) {
    Dim& got = inferred.shape.dims[i];
    const Dim& want = declared->shape.dims[i];
    if (!got.is_known() && got.symbol.empty()) got = want;
  }
  return inferred;
}

}  // namespace

bool may_fold(const Node& node) {
  static const std::set<std::string> never = {
      "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli", "If",
      "Loop",         "Scan",          "Dropout"};
  return node.domain.empty() && !never.count(node.op_type);
}

InferenceResult infer_shapes(const Graph& graph, const std::vector<ValueInfo>& inputs, const ConstantEvaluator& evaluator) {
  InferenceResult r;
  for (const auto& [name, t] : graph.initializers) {
    r.values[name] = with_shape(t.dtype(), Shape::from_dims(t.dims()));
    r.values[name].name = name;
    r.constants[name] = t;
  }
  for (const auto& in : graph.inputs) {
    ValueInfo v = in;
    for (const auto& o : inputs)
      if (o.name == in.name) v = o;
    if (graph.initializers.count(in.name)) {
      bool overridden = false;
      for (const auto& o : inputs) overridden |= o.name == in.name;
      if (!overridden) continue;  // keeps the initializer's own shape and value
      r.constants.erase(in.name);
    }
    r.values[in.name] = v;
  }

  for (const Node& node : graph.nodes) {
    NodeView view{node, {}, {}};
    for (const auto& name : node.inputs) {
      if (name.empty()) {
        view.in.push_back(nullptr);
        view.values.push_back(nullptr);
        continue;
      }
      auto it = r.values.find(name);
      // Outer-scope names of a subgraph are unknown here: treat them as untyped.
      static const ValueInfo untyped;
      view.in.push_back(it == r.values.end() ? &untyped : &it->second);
      auto c = r.constants.find(name);
      view.values.push_back(c == r.constants.end() ? nullptr : &c->second);
    }

    std::vector<ValueInfo> outs;
    bool folded = false;
    if (evaluator && foldable(view)) {
      std::optional<std::vector<Tensor>> values;
      try {
        values = evaluator(node, view.values);
      } catch (const Error& e) {
        // A constant subexpression that fails to evaluate is an error of the model.
        fail(ErrorKind::InvalidModel, e.what());
      }
      if (values) {
        folded = true;
        for (size_t i = 0; i < node.outputs.size() && i < values->size(); ++i) {
          if (node.outputs[i].empty()) continue;
          r.constants[node.outputs[i]] = (*values)[i];
          outs.push_back(with_shape((*values)[i].dtype(), Shape::from_dims((*values)[i].dims())));
        }
      }
    }
    if (!folded) {
      try {
        outs = infer_node(view, graph);
        // The rule says what kind of value control flow passes on; its
        // bodies, what type and shape a tensor it passes on has.
        if (auto through_bodies = infer_control_flow(node, view.in, view.values, r, evaluator))
          for (size_t i = 0; i < outs.size() && i < through_bodies->size(); ++i)
            if (outs[i].kind == ValueKind::Tensor && (*through_bodies)[i].kind == ValueKind::Tensor) {
              outs[i].dtype = (*through_bodies)[i].dtype;
              outs[i].shape = (*through_bodies)[i].shape;
            }
      } catch (const Error& e) {
        // A size checked where the node is not known (checked_numel) is named here.
        if (std::string_view(e.what()).substr(0, 6) == "node '") throw;
        fail(e.kind(), node.describe() + ": " + e.what());
      }
      // Shape of a concrete shape is a constant: the heart of shape-arithmetic folding.
      // input(0): a node may come with no inputs at all.
      const ValueInfo* first = view.input(0);
      if (node.op_type == "Shape" && node.domain.empty() && first && first->shape.is_concrete() && !node.outputs.empty()) {
        Dims d = first->shape.concrete();
        auto [start, end] = shape_range(view, int64_t(d.size()));
        r.constants[node.outputs[0]] =
            Tensor::from_vector<int64_t>({end - start}, std::vector<int64_t>(d.begin() + start, d.begin() + end));
      } else if (node.op_type == "Size" && node.domain.empty() && first && first->shape.is_concrete() && !node.outputs.empty()) {
        r.constants[node.outputs[0]] = Tensor::scalar<int64_t>(checked_numel(first->shape.concrete()));
      }
    }
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      const std::string& name = node.outputs[i];
      if (name.empty()) continue;
      ValueInfo inferred = i < outs.size() ? outs[i] : ValueInfo{};
      const ValueInfo* declared = nullptr;
      auto vi = graph.value_info.find(name);
      if (vi != graph.value_info.end()) declared = &vi->second;
      for (const auto& o : graph.outputs)
        if (o.name == name) declared = &o;
      r.values[name] = reconcile(node, name, inferred, declared);
    }
  }
  return r;
}

Specialization specialize(const Graph& graph, const std::map<std::string, std::pair<DType, Dims>>& input_shapes,
                          const ConstantEvaluator& evaluator) {
  std::vector<ValueInfo> inputs;
  std::map<std::string, int64_t> symbols;
  for (const auto& [name, spec] : input_shapes) {
    const ValueInfo* decl = graph.find_input(name);
    if (!decl) fail(ErrorKind::InvalidArgument, "the model has no input '" + name + "'");
    if (decl->kind != ValueKind::Tensor)
      fail(ErrorKind::InvalidArgument, "input '" + name + "' is " + value_kind_phrase(decl->kind) + ", was given a tensor");
    const auto& [dtype, dims] = spec;
    if (decl->dtype != DType::Undefined && decl->dtype != dtype)
      fail(ErrorKind::InvalidArgument, "input '" + name + "' must be " + dtype_name(decl->dtype) + ", got " + dtype_name(dtype));
    if (decl->shape.rank_known) {
      if (decl->shape.rank() != int(dims.size()))
        fail(ErrorKind::InvalidArgument,
             "input '" + name + "' must have shape " + decl->shape.to_string() + ", got " + dims_to_string(dims));
      for (size_t i = 0; i < dims.size(); ++i) {
        const Dim& d = decl->shape.dims[i];
        if (d.is_known() && *d.value != dims[i])
          fail(ErrorKind::InvalidArgument,
               "input '" + name + "' must have shape " + decl->shape.to_string() + ", got " + dims_to_string(dims));
        if (!d.is_known() && !d.symbol.empty()) {
          auto [it, fresh] = symbols.emplace(d.symbol, dims[i]);
          if (!fresh && it->second != dims[i])
            fail(ErrorKind::InvalidArgument, "input '" + name + "' sets '" + d.symbol + "' to " + std::to_string(dims[i]) +
                                                 ", another input set it to " + std::to_string(it->second));
        }
      }
    }
    ValueInfo v;
    v.name = name;
    v.dtype = dtype;
    v.shape = Shape::from_dims(dims);
    inputs.push_back(v);
  }
  // Sequences and optionals keep their declaration: the tensors a sequence
  // holds do not enter a specialization.
  for (const auto* req : graph.required_inputs())
    if (!input_shapes.count(req->name) && req->kind == ValueKind::Tensor)
      fail(ErrorKind::InvalidArgument, "no shape given for input '" + req->name + "'");

  Specialization s;
  s.result = infer_shapes(graph, inputs, evaluator);
  for (const auto& node : graph.nodes)
    for (const auto& o : node.outputs)
      if (!o.empty() && !s.result.values[o].shape.is_concrete()) s.dynamic.push_back(o);
  return s;
}

}  // namespace kiln::ir
