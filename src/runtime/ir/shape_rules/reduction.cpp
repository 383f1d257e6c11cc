// Reductions over axes, ArgMax/ArgMin, TopK and the losses.
#include <set>

#include "runtime/ir/shape_rules/shape_rule.hpp"

namespace kiln::ir::shape_rules {

namespace {

std::vector<ValueInfo> reduce(const NodeView& n, bool arg) {
  const ValueInfo* x = n.input(0);
  DType dt = arg ? DType::Int64 : (x ? x->dtype : DType::Undefined);
  if (!n.rank_known(0)) return {unknown_like(dt)};
  const int64_t rank = x->shape.rank();
  const bool keep = n.attr_int("keepdims", 1) != 0;
  std::vector<int64_t> axes;
  if (arg) {
    axes.push_back(n.attr_int("axis", 0));
  } else if (auto a = n.attr_ints("axes")) {
    axes = *a;
  } else if (n.input(1)) {
    const Tensor* t = n.value(1);
    if (!t) return {unknown_like(dt)};
    axes = t->to_int64_vector();
  }
  if (axes.empty() && !arg) {
    if (n.attr_int("noop_with_empty_axes", 0)) return {*x};
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  std::set<int64_t> reduced;
  for (int64_t a : axes) reduced.insert(norm_axis(n, a, rank));
  Shape out;
  for (int64_t i = 0; i < rank; ++i) {
    if (!reduced.count(i))
      out.dims.push_back(x->shape.dims[size_t(i)]);
    else if (keep)
      out.dims.push_back(Dim::known(1));
  }
  return {with_shape(dt, out)};
}

std::vector<ValueInfo> reduce_values(const NodeView& n) { return reduce(n, false); }
std::vector<ValueInfo> reduce_to_index(const NodeView& n) { return reduce(n, true); }

std::vector<ValueInfo> top_k(const NodeView& n) {
  const ValueInfo* x = n.input(0);
  const DType dt = n.dtype(0);
  auto k = n.ints_from("k", 1);
  if (!n.rank_known(0) || !k || k->size() != 1) return {unknown_like(dt), unknown_like(DType::Int64)};
  Shape s = x->shape;
  s.dims[size_t(norm_axis(n, n.attr_int("axis", -1), s.rank()))] = Dim::known((*k)[0]);
  return {with_shape(dt, s), with_shape(DType::Int64, s)};
}

// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: the loss per item
// (input (N, C, d1..dk) less its class axis) or a scalar; SCE's
// log-probabilities are the input's shape.
std::vector<ValueInfo> loss(const NodeView& n) {
  const ValueInfo* x = n.input(0);
  const DType dt = n.dtype(0);
  if (!n.rank_known(0) || x->shape.rank() < 2) return {unknown_like(dt), unknown_like(dt)};
  const Attribute* r = n.node.attr("reduction");
  Shape per_item = x->shape;
  per_item.dims.erase(per_item.dims.begin() + 1);
  const bool none = r && r->kind == Attribute::Kind::String && r->s == "none";
  return {with_shape(dt, none ? per_item : Shape{}), *x};
}

}  // namespace

void register_reduction_rules(ShapeRuleTable& t) {
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                         "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"})
    t.add(op, &reduce_values);
  t.add("ArgMax", &reduce_to_index);
  t.add("ArgMin", &reduce_to_index);
  t.add("TopK", &top_k);
  t.add("NegativeLogLikelihoodLoss", &loss);
  t.add("SoftmaxCrossEntropyLoss", &loss);
}

}  // namespace kiln::ir::shape_rules
