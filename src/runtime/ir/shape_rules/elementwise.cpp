// Elementwise operators: outputs shaped like the input, or like the inputs
// broadcast together; casts and (de)quantization, which change the dtype only.
#include "runtime/ir/shape_rules/shape_rule.hpp"

namespace kiln::ir::shape_rules {

namespace {

std::vector<ValueInfo> bool_like_input(const NodeView& n) {
  ValueInfo v = same_as_input(n)[0];
  v.dtype = DType::Bool;
  return {v};
}

std::vector<ValueInfo> broadcast_to(const NodeView& n, DType t) {
  auto s = broadcast(n, n.in);
  return {s ? with_shape(t, *s) : unknown_like(t)};
}

std::vector<ValueInfo> broadcast_arithmetic(const NodeView& n) { return broadcast_to(n, n.dtype(0)); }
std::vector<ValueInfo> broadcast_comparison(const NodeView& n) { return broadcast_to(n, DType::Bool); }
std::vector<ValueInfo> where(const NodeView& n) { return broadcast_to(n, n.dtype(1)); }

std::vector<ValueInfo> expand(const NodeView& n) {
  const DType dt = n.dtype(0);
  const Tensor* shape = n.value(1);
  if (!shape) return {unknown_like(dt)};
  ValueInfo target = with_shape(dt, Shape::from_dims(sizes_from(n, shape->to_int64_vector(), "shape")));
  auto s = broadcast(n, {n.input(0), &target});
  return {s ? with_shape(dt, *s) : unknown_like(dt)};
}

Shape input_shape(const NodeView& n) { return n.input(0) ? n.input(0)->shape : Shape::unknown_rank(); }

std::vector<ValueInfo> cast(const NodeView& n) { return {with_shape(DType(n.attr_int("to", 0)), input_shape(n))}; }
std::vector<ValueInfo> cast_like(const NodeView& n) { return {with_shape(n.dtype(1), input_shape(n))}; }
std::vector<ValueInfo> dequantize(const NodeView& n) { return {with_shape(DType::Float32, input_shape(n))}; }

std::vector<ValueInfo> quantize(const NodeView& n) {
  const ValueInfo* zero_point = n.input(2);
  return {with_shape(zero_point ? zero_point->dtype : DType::UInt8, input_shape(n))};
}

// y (uint8, the input's shape), y_scale (float) and y_zero_point (uint8).
std::vector<ValueInfo> dynamic_quantize(const NodeView& n) {
  return {with_shape(DType::UInt8, input_shape(n)), with_shape(DType::Float32, Shape{{}, true}),
          with_shape(DType::UInt8, Shape{{}, true})};
}

// com.microsoft's QLinearAdd: A, A_scale, A_zero_point, B, ...; the result
// has the type of C_zero_point (uint8 without one).
std::vector<ValueInfo> qlinear_add(const NodeView& n) {
  const ValueInfo* zero_point = n.input(7);
  auto shape = broadcast(n, {n.input(0), n.input(3)});
  return {with_shape(zero_point ? zero_point->dtype : DType::UInt8, shape ? *shape : Shape::unknown_rank())};
}

std::vector<ValueInfo> dropout(const NodeView& n) {
  const ValueInfo out = same_as_input(n)[0];
  ValueInfo mask = out;
  if (n.node.opset >= 10) mask.dtype = DType::Bool;  // before, the input's type
  return {out, mask};
}

}  // namespace

void register_elementwise_rules(ShapeRuleTable& t) {
  for (const char* op :
       {"Abs",       "Acos",        "Acosh",     "Asin", "Asinh",      "Atan",       "Atanh",           "Ceil",   "Cos",  "Cosh",
        "Erf",       "Exp",         "Floor",     "Log",  "Neg",        "Reciprocal", "Round",           "Sign",   "Sin",  "Sinh",
        "Sqrt",      "Tan",         "Tanh",      "Not",  "BitwiseNot", "Relu",       "Sigmoid",         "Elu",    "Selu", "Celu",
        "LeakyRelu", "HardSigmoid", "HardSwish", "Mish", "Softplus",   "Softsign",   "ThresholdedRelu", "Shrink", "Gelu", "PRelu",
        "Clip",      "Identity",    "CumSum"})
    t.add(op, &same_as_input);
  t.add("IsNaN", &bool_like_input);
  t.add("IsInf", &bool_like_input);
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "BitShift", "And", "Or", "Xor", "Max", "Min", "Mean", "Sum"})
    t.add(op, &broadcast_arithmetic);
  for (const char* op : {"Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"}) t.add(op, &broadcast_comparison);
  t.add("Where", &where);
  t.add("Expand", &expand);
  t.add("Cast", &cast);
  t.add("CastLike", &cast_like);
  t.add("DequantizeLinear", &dequantize);
  t.add("QuantizeLinear", &quantize);
  t.add("DynamicQuantizeLinear", &dynamic_quantize);
  t.add("QLinearAdd", &qlinear_add);
  t.add("Dropout", &dropout);
}

}  // namespace kiln::ir::shape_rules
