// Matrix products.
#include "runtime/ir/shape_rules/shape_rule.hpp"

namespace kiln::ir::shape_rules {

namespace {

// `right`: the input holding the right operand.
std::vector<ValueInfo> matmul(const NodeView& n, size_t right = 1) {
  const ValueInfo *a = n.input(0), *b = n.input(right);
  DType dt = a ? a->dtype : DType::Undefined;
  if (!n.rank_known(0) || !n.rank_known(right)) return {unknown_like(dt)};
  Shape as = a->shape, bs = b->shape;
  if (as.dims.empty() || bs.dims.empty()) n.fail("MatMul operands must not be scalars");
  bool a_vec = as.dims.size() == 1, b_vec = bs.dims.size() == 1;
  if (a_vec) as.dims.insert(as.dims.begin(), Dim::known(1));
  if (b_vec) bs.dims.push_back(Dim::known(1));
  const Dim& k1 = as.dims.back();
  const Dim& k2 = bs.dims[bs.dims.size() - 2];
  if (k1.is_known() && k2.is_known() && *k1.value != *k2.value)
    n.fail("inner dimensions differ: " + a->shape.to_string() + " times " + b->shape.to_string());
  ValueInfo ba = with_shape(dt, Shape{{as.dims.begin(), as.dims.end() - 2}, true});
  ValueInfo bb = with_shape(dt, Shape{{bs.dims.begin(), bs.dims.end() - 2}, true});
  Shape out = *broadcast(n, {&ba, &bb});  // both ranks are known, so there is a result
  if (!a_vec) out.dims.push_back(as.dims[as.dims.size() - 2]);
  if (!b_vec) out.dims.push_back(bs.dims.back());
  return {with_shape(dt, out)};
}

std::vector<ValueInfo> matmul_integer(const NodeView& n) {
  auto outs = matmul(n);
  outs[0].dtype = DType::Int32;
  return outs;
}

// a, a_scale, a_zero_point, b, ...: the result has the type of y_zero_point.
std::vector<ValueInfo> qlinear_matmul(const NodeView& n) {
  auto outs = matmul(n, 3);
  const ValueInfo* zero_point = n.input(7);
  outs[0].dtype = zero_point ? zero_point->dtype : DType::Undefined;
  return outs;
}

// B is input `b_index` (3 for QGemm); the result of type `dt`.
std::vector<ValueInfo> gemm(const NodeView& n, size_t b_index, DType dt) {
  const ValueInfo *x = n.input(0), *b = n.input(b_index);
  if (!n.rank_known(0) || !n.rank_known(b_index)) return {unknown_like(dt)};
  if (x->shape.rank() != 2 || b->shape.rank() != 2)
    n.fail("A and B must be matrices, got " + x->shape.to_string() + " and " + b->shape.to_string());
  bool ta = n.attr_int("transA", 0), tb = n.attr_int("transB", 0);
  Dim m = x->shape.dims[ta ? 1 : 0], k1 = x->shape.dims[ta ? 0 : 1];
  Dim k2 = b->shape.dims[tb ? 1 : 0], nn = b->shape.dims[tb ? 0 : 1];
  if (k1.is_known() && k2.is_known() && *k1.value != *k2.value)
    n.fail("inner dimensions differ: A " + x->shape.to_string() + " and B " + b->shape.to_string());
  return {with_shape(dt, Shape{{m, nn}, true})};
}

}  // namespace

void register_matmul_rules(ShapeRuleTable& t) {
  t.add("MatMul", [](const NodeView& n) { return matmul(n); });
  t.add("QLinearMatMul", &qlinear_matmul);
  t.add("MatMulInteger", &matmul_integer);
  t.add("Gemm", [](const NodeView& n) { return gemm(n, 1, n.dtype(0)); });
  // com.microsoft's QGemm: A, a_scale, a_zero_point, B, b_scale,
  // b_zero_point, C, y_scale, y_zero_point; the result float without a
  // y_scale, else of y_zero_point's type (uint8 without one).
  t.add("QGemm", [](const NodeView& n) {
    const ValueInfo* zero_point = n.input(8);
    return gemm(n, 3, zero_point ? zero_point->dtype : n.input(7) ? DType::UInt8 : DType::Float32);
  });
}

}  // namespace kiln::ir::shape_rules
