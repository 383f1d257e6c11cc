// Operators whose output is a shape or made from one: Shape, Size,
// ConstantOfShape, NonZero.
#include "runtime/ir/shape_rules/shape_rule.hpp"

namespace kiln::ir::shape_rules {

namespace {

std::vector<ValueInfo> shape(const NodeView& n) {
  const ValueInfo* x = n.input(0);
  int64_t r = x && x->shape.rank_known ? x->shape.rank() : -1;
  if (r < 0) return {with_shape(DType::Int64, Shape{{Dim::unknown()}, true})};
  auto [start, end] = shape_range(n, r);
  return {with_shape(DType::Int64, Shape{{Dim::known(end - start)}, true})};
}

std::vector<ValueInfo> size(const NodeView&) { return {with_shape(DType::Int64, Shape{})}; }

std::vector<ValueInfo> constant_of_shape(const NodeView& n) {
  const ValueInfo* x = n.input(0);
  const Attribute* v = n.node.attr("value");
  DType t = v && v->kind == Attribute::Kind::Tensor ? v->t.dtype() : DType::Float32;
  if (const Tensor* shape = n.value(0))
    return {with_shape(t, Shape::from_dims(sizes_from(n, shape->to_int64_vector(), "shape")))};
  if (n.rank_known(0) && x->shape.rank() == 1 && x->shape.dims[0].is_known()) {
    Shape s;
    s.dims.assign(size_t(*x->shape.dims[0].value), Dim::unknown());
    return {with_shape(t, s)};
  }
  return {unknown_like(t)};
}

// One column per nonzero element: only the count depends on the data.
std::vector<ValueInfo> non_zero(const NodeView& n) {
  if (!n.rank_known(0)) return {unknown_like(DType::Int64)};
  return {with_shape(DType::Int64, Shape{{Dim::known(n.input(0)->shape.rank()), Dim::unknown()}, true})};
}

}  // namespace

void register_shape_value_rules(ShapeRuleTable& t) {
  t.add("Shape", &shape);
  t.add("Size", &size);
  t.add("ConstantOfShape", &constant_of_shape);
  t.add("NonZero", &non_zero);
}

}  // namespace kiln::ir::shape_rules
