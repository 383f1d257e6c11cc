// Sequences and optionals: the sequence and optional operators, and the kind
// of value If and Loop pass on. A sequence's tensors may differ in shape, so
// a sequence (and what is taken from one) has an unknown shape.
#include "runtime/ir/shape_rules/shape_rule.hpp"

namespace kiln::ir::shape_rules {

namespace {

ValueInfo of_kind(ValueKind kind, DType dt, ValueKind element_kind = ValueKind::Tensor) {
  ValueInfo v = unknown_like(dt);
  v.kind = kind;
  v.element_kind = element_kind;
  return v;
}

ValueInfo sequence_of(DType dt) { return of_kind(ValueKind::Sequence, dt); }

std::vector<ValueInfo> sequence_empty(const NodeView& n) {
  return {sequence_of(DType(n.attr_int("dtype", int64_t(DType::Float32))))};
}
std::vector<ValueInfo> sequence_of_input(const NodeView& n) { return {sequence_of(n.dtype(0))}; }
std::vector<ValueInfo> tensor_of_input(const NodeView& n) { return {unknown_like(n.dtype(0))}; }
std::vector<ValueInfo> int64_scalar(const NodeView&) { return {with_shape(DType::Int64, Shape{{}, true})}; }
std::vector<ValueInfo> bool_scalar(const NodeView&) { return {with_shape(DType::Bool, Shape{{}, true})}; }

std::vector<ValueInfo> sequence_insert(const NodeView& n) {
  return {sequence_of(n.dtype(0) != DType::Undefined ? n.dtype(0) : n.dtype(1))};
}

// Each body output, collected over the sequence.
std::vector<ValueInfo> sequence_map(const NodeView& n) {
  std::vector<ValueInfo> outs(n.node.outputs.size(), sequence_of(DType::Undefined));
  const Attribute* body = n.node.attr("body");
  if (body && body->kind == Attribute::Kind::Graph && body->g)
    for (size_t i = 0; i < outs.size() && i < body->g->outputs.size(); ++i) outs[i].dtype = body->g->outputs[i].dtype;
  return outs;
}

std::vector<ValueInfo> optional(const NodeView& n) {
  if (const ValueInfo* x = n.input(0)) {
    ValueInfo v = *x;
    v.element_kind = x->kind;
    v.kind = ValueKind::Optional;
    return {v};
  }
  const Attribute* type = n.node.attr("type");
  if (!type || type->kind != Attribute::Kind::Type) n.fail("an Optional without input needs the attribute 'type'");
  return {of_kind(ValueKind::Optional, type->type.dtype, type->type.kind)};
}

// An optional's element; opset 18 passes a tensor or a sequence through.
std::vector<ValueInfo> optional_get_element(const NodeView& n) {
  const ValueInfo* x = n.input(0);
  if (!x) return {ValueInfo{}};
  ValueInfo v = *x;
  if (v.kind == ValueKind::Optional) {
    v.kind = v.element_kind;
    v.element_kind = ValueKind::Tensor;
  }
  return {v};
}

// The strings left after the stopwords: the input's rank, last axis unknown.
std::vector<ValueInfo> string_normalizer(const NodeView& n) {
  const ValueInfo* x = n.input(0);
  if (!x || !x->shape.rank_known || x->shape.rank() == 0) return {unknown_like(DType::String)};
  Shape s = x->shape;
  s.dims.back() = Dim::unknown();
  return {with_shape(DType::String, s)};
}

// The kinds only (dtypes and shapes come from the model's annotations, as
// for every operator without a rule): a branch's outputs, a loop's carried
// values.
std::vector<ValueInfo> if_kinds(const NodeView& n) {
  std::vector<ValueInfo> outs(n.node.outputs.size());
  const Attribute* branch = n.node.attr("then_branch");
  if (branch && branch->kind == Attribute::Kind::Graph && branch->g)
    for (size_t i = 0; i < outs.size() && i < branch->g->outputs.size(); ++i) {
      outs[i].kind = branch->g->outputs[i].kind;
      outs[i].element_kind = branch->g->outputs[i].element_kind;
    }
  return outs;
}

// A carried value is what the body makes of it (an optional may become the
// sequence it holds): the body's output where it has a type, else the input.
std::vector<ValueInfo> loop_kinds(const NodeView& n) {
  std::vector<ValueInfo> outs(n.node.outputs.size());
  const Attribute* body = n.node.attr("body");
  const Graph* g = body && body->kind == Attribute::Kind::Graph ? body->g.get() : nullptr;
  for (size_t i = 0; i < outs.size() && i + 2 < n.in.size(); ++i) {
    const ValueInfo* made = g && i + 1 < g->outputs.size() ? &g->outputs[i + 1] : nullptr;
    const ValueInfo* from = made && (made->kind != ValueKind::Tensor || made->dtype != DType::Undefined) ? made : n.input(i + 2);
    if (from) {
      outs[i].kind = from->kind;
      outs[i].element_kind = from->element_kind;
    }
  }
  return outs;
}

}  // namespace

void register_sequence_rules(ShapeRuleTable& t) {
  t.add("SequenceEmpty", &sequence_empty);
  t.add("SequenceConstruct", &sequence_of_input);
  t.add("SequenceInsert", &sequence_insert);
  t.add("SequenceAt", &tensor_of_input);
  t.add("SequenceErase", &sequence_of_input);
  t.add("SequenceLength", &int64_scalar);
  t.add("SplitToSequence", &sequence_of_input);
  t.add("ConcatFromSequence", &tensor_of_input);
  t.add("SequenceMap", &sequence_map);
  t.add("Optional", &optional);
  t.add("OptionalHasElement", &bool_scalar);
  t.add("OptionalGetElement", &optional_get_element);
  t.add("StringNormalizer", &string_normalizer);
  t.add("If", &if_kinds);
  t.add("Loop", &loop_kinds);
}

}  // namespace kiln::ir::shape_rules
