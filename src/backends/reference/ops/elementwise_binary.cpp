// Reference kernels of the elementwise group with broadcasting: arithmetic,
// comparisons, logic, bit shifts, PRelu and the variadic Max/Min/Mean/Sum.
#include <cmath>
#include <limits>

#include "backends/reference/kernel_registry.hpp"
#include "backends/reference/ops/elementwise_common.hpp"

namespace kiln::ref {

using namespace elementwise_detail;

namespace {

// Before opset 7 binary ops broadcast only with broadcast=1, and then B's
// dims line up with A's starting at `axis` (default: trailing, as numpy).
Tensor second_operand(const KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (ctx.opset() >= 7) return b;
  if (ctx.attr_int("broadcast", 0) == 0) {
    if (a.dims() != b.dims())
      ctx.fail("input shapes " + ir::dims_to_string(a.dims()) + " and " + ir::dims_to_string(b.dims()) +
               " differ but broadcast=0; before opset 7 shapes must match unless broadcast=1");
    return b;
  }
  if (!ctx.has_attr("axis")) return b;
  int64_t axis = normalize_axis(ctx, ctx.attr_int("axis"), a.rank());
  if (axis + b.rank() > a.rank())
    ctx.fail("B of shape " + ir::dims_to_string(b.dims()) + " does not fit into A of shape " + ir::dims_to_string(a.dims()) +
             " at axis " + std::to_string(axis));
  Dims d(size_t(axis), 1);
  d.insert(d.end(), b.dims().begin(), b.dims().end());
  d.resize(size_t(a.rank()), 1);
  return b.reshaped(d);
}

template <unsigned Kinds, bool BoolOut = false, typename F>
void binary_kernel(KernelContext& ctx, F f) {
  ctx.set_output(0, binary_map<Kinds, BoolOut>(ctx, ctx.input(0), second_operand(ctx), f));
}

void add_kernel(KernelContext& ctx) {
  binary_kernel<kNumeric>(ctx, [](auto a, auto b) { return add_values(a, b); });
}
void sub_kernel(KernelContext& ctx) {
  binary_kernel<kNumeric>(ctx, [](auto a, auto b) { return sub_values(a, b); });
}
void mul_kernel(KernelContext& ctx) {
  binary_kernel<kNumeric>(ctx, [](auto a, auto b) { return mul_values(a, b); });
}

void div_kernel(KernelContext& ctx) {
  binary_kernel<kNumeric>(ctx, [&](auto a, auto b) -> decltype(a) {
    using C = decltype(a);
    if constexpr (std::is_integral_v<C>) {
      if (b == 0) ctx.fail("integer division by zero");
      // MIN / -1 overflows; wrap like the other integer arithmetic.
      if constexpr (std::is_signed_v<C>)
        if (b == C(-1)) return C(0 - uint64_t(a));
      return C(a / b);  // truncates toward zero
    } else {
      return a / b;
    }
  });
}

void mod_kernel(KernelContext& ctx) {
  bool fmod = ctx.attr_int("fmod", 0) != 0;
  binary_kernel<kNumeric>(ctx, [&](auto a, auto b) -> decltype(a) {
    using C = decltype(a);
    C r;
    if constexpr (std::is_integral_v<C>) {
      if (b == 0) ctx.fail("integer modulo by zero");
      if constexpr (std::is_signed_v<C>)
        if (b == C(-1)) return C(0);
      r = C(a % b);
    } else {
      r = std::fmod(a, b);
    }
    // fmod=0: the result takes the sign of the divisor (Python's %).
    if constexpr (!std::is_unsigned_v<C>)
      if (!fmod && r != 0 && ((r < 0) != (b < 0))) r = C(r + b);
    return r;
  });
}

void pow_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  Tensor b = second_operand(ctx);
  Tensor r;
  // The exponent may have a different type than the base; the result has the base's.
  dispatch_kinds<kFloat | kSigned>(ctx, a.dtype(), "base X", [&](auto ta) {
    using TA = decltype(ta);
    dispatch_kinds<kNumeric>(ctx, b.dtype(), "exponent Y", [&](auto tb) {
      using TB = decltype(tb);
      r = broadcast_map<TA, TB, TA>(ctx, a, b, a.dtype(),
                                    [](TA x, TB y) { return store<TA>(std::pow(double(Calc<TA>(x)), double(Calc<TB>(y)))); });
    });
  });
  ctx.set_output(0, std::move(r));
}

void bitshift_kernel(KernelContext& ctx) {
  std::string dir = ctx.attr_string("direction", "");
  if (dir != "LEFT" && dir != "RIGHT") ctx.fail("direction must be 'LEFT' or 'RIGHT', got '" + dir + "'");
  bool left = dir == "LEFT";
  binary_kernel<kUnsigned>(ctx, [left](auto a, auto s) -> decltype(a) {
    using C = decltype(a);
    // Shifting by the bit width or more is undefined in C++; all bits are gone.
    if (s >= C(std::numeric_limits<C>::digits)) return C(0);
    return left ? C(a << s) : C(a >> s);
  });
}

void and_kernel(KernelContext& ctx) {
  binary_kernel<kBool, true>(ctx, [](bool a, bool b) { return a && b; });
}
void or_kernel(KernelContext& ctx) {
  binary_kernel<kBool, true>(ctx, [](bool a, bool b) { return a || b; });
}
void xor_kernel(KernelContext& ctx) {
  binary_kernel<kBool, true>(ctx, [](bool a, bool b) { return a != b; });
}

void equal_kernel(KernelContext& ctx) {
  binary_kernel<kAny, true>(ctx, [](auto a, auto b) { return a == b; });
}
void greater_kernel(KernelContext& ctx) {
  binary_kernel<kNumeric, true>(ctx, [](auto a, auto b) { return a > b; });
}
void greater_equal_kernel(KernelContext& ctx) {
  binary_kernel<kNumeric, true>(ctx, [](auto a, auto b) { return a >= b; });
}
void less_kernel(KernelContext& ctx) {
  binary_kernel<kNumeric, true>(ctx, [](auto a, auto b) { return a < b; });
}
void less_equal_kernel(KernelContext& ctx) {
  binary_kernel<kNumeric, true>(ctx, [](auto a, auto b) { return a <= b; });
}

void prelu_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor slope = ctx.input(1);
  // Before opset 7 a 1-D slope holds one value per channel (axis 1).
  if (ctx.opset() < 7 && slope.rank() == 1 && slope.numel() > 1 && x.rank() >= 2 && slope.dim(0) == x.dim(1)) {
    Dims d(size_t(x.rank() - 1), 1);
    d[0] = slope.dim(0);
    slope = slope.reshaped(d);
  }
  if (broadcast_shapes(ctx, x.dims(), slope.dims()) != x.dims())
    ctx.fail("slope of shape " + ir::dims_to_string(slope.dims()) + " cannot be broadcast to X of shape " +
             ir::dims_to_string(x.dims()));
  ctx.set_output(0, binary_map < kFloat |
                        kInt > (ctx, x, slope, [](auto v, auto s) -> decltype(v) { return v < 0 ? mul_values(s, v) : v; }));
}

template <typename C>
bool is_nan_value(C v) {
  if constexpr (std::is_floating_point_v<C>)
    return std::isnan(v);
  else
    return false;
}

// Left fold of a binary op over all inputs, broadcasting as it goes.
template <unsigned Kinds, typename F>
Tensor fold_inputs(KernelContext& ctx, F f) {
  if (ctx.num_inputs() == 0) ctx.fail("expects at least one input");
  Tensor acc = ctx.input(0);
  require_kinds(ctx, acc.dtype(), Kinds, "input 0");
  for (size_t i = 1; i < ctx.num_inputs(); ++i) acc = binary_map<Kinds>(ctx, acc, ctx.input(i), f);
  return acc;
}

// NaN wins in Max and Min, as in numpy.maximum/minimum.
void max_kernel(KernelContext& ctx) {
  ctx.set_output(0, fold_inputs<kNumeric>(ctx, [](auto a, auto b) { return is_nan_value(a) || a > b ? a : b; }));
}
void min_kernel(KernelContext& ctx) {
  ctx.set_output(0, fold_inputs<kNumeric>(ctx, [](auto a, auto b) { return is_nan_value(a) || a < b ? a : b; }));
}
void sum_kernel(KernelContext& ctx) {
  ctx.set_output(0, fold_inputs<kNumeric>(ctx, [](auto a, auto b) { return add_values(a, b); }));
}
void mean_kernel(KernelContext& ctx) {
  Tensor sum = fold_inputs<kFloat>(ctx, [](auto a, auto b) { return add_values(a, b); });
  double n = double(ctx.num_inputs());
  ctx.set_output(0, map_tensor<kFloat>(ctx, sum, "input", [n](auto v) { return double(v) / n; }));
}

}  // namespace

void register_elementwise_binary_ops(KernelRegistry& r) {
  r.add("Add", &add_kernel);
  r.add("Sub", &sub_kernel);
  r.add("Mul", &mul_kernel);
  r.add("Div", &div_kernel);
  r.add("Pow", &pow_kernel);
  r.add("Mod", &mod_kernel);
  r.add("BitShift", &bitshift_kernel);
  r.add("And", &and_kernel);
  r.add("Or", &or_kernel);
  r.add("Xor", &xor_kernel);
  r.add("Equal", &equal_kernel);
  r.add("Greater", &greater_kernel);
  r.add("GreaterOrEqual", &greater_equal_kernel);
  r.add("Less", &less_kernel);
  r.add("LessOrEqual", &less_equal_kernel);
  r.add("PRelu", &prelu_kernel);
  r.add("Max", &max_kernel);
  r.add("Min", &min_kernel);
  r.add("Mean", &mean_kernel);
  r.add("Sum", &sum_kernel);
}

}  // namespace kiln::ref
