// Reference kernels of the elementwise group: unary math, activations, Clip,
// Cast and CastLike. Broadcasting binary and variadic ops live in
// elementwise_binary.cpp.
#include <cmath>
#include <limits>

#include "backends/reference/kernel_registry.hpp"
#include "backends/reference/ops/elementwise_common.hpp"

namespace kiln::ref {

using namespace elementwise_detail;

namespace {

constexpr double kPi = 3.14159265358979323846;

// Float-only unary op: f computes in double whatever the float width.
template <typename F>
void unary_float(KernelContext& ctx, F f) {
  ctx.set_output(0, map_tensor<kFloat>(ctx, ctx.input(0), "input", [&](auto x) { return f(double(x)); }));
}

template <unsigned Kinds, typename F>
void unary_typed(KernelContext& ctx, F f) {
  ctx.set_output(0, map_tensor<Kinds>(ctx, ctx.input(0), "input", f));
}

double softplus(double x) {
  // log(1 + e^x) without overflowing e^x for large x.
  return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

double sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x)); }

#define KILN_FLOAT_UNARY(name, expr)                 \
  void name##_kernel(KernelContext& ctx) {           \
    unary_float(ctx, [](double x) { return expr; }); \
  }

KILN_FLOAT_UNARY(acos, std::acos(x))
KILN_FLOAT_UNARY(acosh, std::acosh(x))
KILN_FLOAT_UNARY(asin, std::asin(x))
KILN_FLOAT_UNARY(asinh, std::asinh(x))
KILN_FLOAT_UNARY(atan, std::atan(x))
KILN_FLOAT_UNARY(atanh, std::atanh(x))
KILN_FLOAT_UNARY(ceil, std::ceil(x))
KILN_FLOAT_UNARY(cos, std::cos(x))
KILN_FLOAT_UNARY(cosh, std::cosh(x))
KILN_FLOAT_UNARY(erf, std::erf(x))
KILN_FLOAT_UNARY(exp, std::exp(x))
KILN_FLOAT_UNARY(floor, std::floor(x))
KILN_FLOAT_UNARY(log, std::log(x))
KILN_FLOAT_UNARY(reciprocal, 1.0 / x)
// nearbyint honours the default rounding mode, round-half-to-even.
KILN_FLOAT_UNARY(round, std::nearbyint(x))
KILN_FLOAT_UNARY(sin, std::sin(x))
KILN_FLOAT_UNARY(sinh, std::sinh(x))
KILN_FLOAT_UNARY(sqrt, std::sqrt(x))
KILN_FLOAT_UNARY(tan, std::tan(x))
KILN_FLOAT_UNARY(tanh, std::tanh(x))
KILN_FLOAT_UNARY(sigmoid, sigmoid(x))
KILN_FLOAT_UNARY(softplus, softplus(x))
KILN_FLOAT_UNARY(softsign, x / (1.0 + std::fabs(x)))
KILN_FLOAT_UNARY(mish, x* std::tanh(softplus(x)))
KILN_FLOAT_UNARY(hardswish, x* std::max(0.0, std::min(1.0, x / 6.0 + 0.5)))
#undef KILN_FLOAT_UNARY

void abs_kernel(KernelContext& ctx) {
  unary_typed<kNumeric>(ctx, [](auto x) -> decltype(x) {
    using C = decltype(x);
    if constexpr (std::is_unsigned_v<C>)
      return x;
    else if constexpr (std::is_integral_v<C>)
      return x < 0 ? C(0 - uint64_t(x)) : x;
    else
      return std::fabs(x);
  });
}

void neg_kernel(KernelContext& ctx) {
  unary_typed<kFloat | kSigned>(ctx, [](auto x) -> decltype(x) {
    using C = decltype(x);
    if constexpr (std::is_integral_v<C>)
      return C(0 - uint64_t(x));
    else
      return -x;
  });
}

void sign_kernel(KernelContext& ctx) {
  // NaN and zero map to themselves.
  unary_typed<kNumeric>(ctx, [](auto x) -> decltype(x) {
    using C = decltype(x);
    if (x > C(0)) return C(1);
    if constexpr (!std::is_unsigned_v<C>)
      if (x < C(0)) return C(-1);
    return x;
  });
}

void relu_kernel(KernelContext& ctx) {
  unary_typed<kFloat | kSigned>(ctx, [](auto x) -> decltype(x) { return x > 0 ? x : decltype(x)(0); });
}

void not_kernel(KernelContext& ctx) {
  ctx.set_output(0, map_tensor<kBool, true>(ctx, ctx.input(0), "input", [](bool x) { return !x; }));
}

void isnan_kernel(KernelContext& ctx) {
  ctx.set_output(0, map_tensor<kFloat, true>(ctx, ctx.input(0), "input", [](auto x) { return std::isnan(x); }));
}

void isinf_kernel(KernelContext& ctx) {
  bool neg = ctx.attr_int("detect_negative", 1) != 0, pos = ctx.attr_int("detect_positive", 1) != 0;
  ctx.set_output(
      0, map_tensor<kFloat, true>(ctx, ctx.input(0), "input", [&](auto x) { return std::isinf(x) && (x < 0 ? neg : pos); }));
}

void elu_kernel(KernelContext& ctx) {
  double alpha = ctx.attr_float("alpha", 1.0f);
  unary_float(ctx, [&](double x) { return x < 0 ? alpha * (std::exp(x) - 1.0) : x; });
}

void selu_kernel(KernelContext& ctx) {
  double alpha = ctx.attr_float("alpha", 1.67326319217681884765625f);
  double gamma = ctx.attr_float("gamma", 1.05070102214813232421875f);
  unary_float(ctx, [&](double x) { return x > 0 ? gamma * x : gamma * alpha * (std::exp(x) - 1.0); });
}

void celu_kernel(KernelContext& ctx) {
  double alpha = ctx.attr_float("alpha", 1.0f);
  if (alpha == 0) ctx.fail("alpha must be non-zero");
  unary_float(ctx, [&](double x) { return std::max(0.0, x) + std::min(0.0, alpha * (std::exp(x / alpha) - 1.0)); });
}

void leakyrelu_kernel(KernelContext& ctx) {
  double alpha = ctx.attr_float("alpha", 0.01f);
  unary_float(ctx, [&](double x) { return x < 0 ? alpha * x : x; });
}

void hardsigmoid_kernel(KernelContext& ctx) {
  double alpha = ctx.attr_float("alpha", 0.2f), beta = ctx.attr_float("beta", 0.5f);
  unary_float(ctx, [&](double x) { return std::max(0.0, std::min(1.0, alpha * x + beta)); });
}

void thresholdedrelu_kernel(KernelContext& ctx) {
  double alpha = ctx.attr_float("alpha", 1.0f);
  unary_float(ctx, [&](double x) { return x > alpha ? x : 0.0; });
}

void gelu_kernel(KernelContext& ctx) {
  std::string approx = ctx.attr_string("approximate", "none");
  if (approx == "none") {
    unary_float(ctx, [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); });
  } else if (approx == "tanh") {
    unary_float(ctx, [](double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / kPi) * (x + 0.044715 * x * x * x))); });
  } else {
    ctx.fail("approximate must be 'none' or 'tanh', got '" + approx + "'");
  }
}

void shrink_kernel(KernelContext& ctx) {
  double lambd = ctx.attr_float("lambd", 0.5f), bias = ctx.attr_float("bias", 0.0f);
  unary_typed<kNumeric>(ctx, [&](auto x) {
    double v = double(x);
    return v < -lambd ? v + bias : v > lambd ? v - bias : 0.0;
  });
}

// -inf/+inf for float types so infinite inputs are not clamped to finite limits.
template <typename C>
C lowest_value() {
  return std::numeric_limits<C>::has_infinity ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::lowest();
}
template <typename C>
C highest_value() {
  return std::numeric_limits<C>::has_infinity ? std::numeric_limits<C>::infinity() : std::numeric_limits<C>::max();
}

void clip_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor y(x.dtype(), x.dims());
  dispatch_kinds<kNumeric>(ctx, x.dtype(), "input", [&](auto tag) {
    using T = decltype(tag);
    using C = Calc<T>;
    C lo = lowest_value<C>(), hi = highest_value<C>();
    if (ctx.opset() < 11) {
      if (ctx.has_attr("min")) lo = store<C>(ctx.attr_float("min", 0));
      if (ctx.has_attr("max")) hi = store<C>(ctx.attr_float("max", 0));
    } else {
      auto bound = [&](size_t i, const char* name, C& v) {
        if (!ctx.has_input(i)) return;
        const Tensor& t = ctx.input(i);
        if (t.dtype() != x.dtype() || t.numel() != 1)
          ctx.fail(std::string(name) + " must be a one-element " + ir::dtype_name(x.dtype()) + " tensor, got " +
                   ir::dtype_name(t.dtype()) + " of shape " + ir::dims_to_string(t.dims()));
        v = C(t.data<T>()[0]);
      };
      bound(1, "min", lo);
      bound(2, "max", hi);
    }
    const T* in = x.data<T>();
    T* out = y.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      // max then min, so min > max yields max (numpy.clip).
      C v = C(in[i]);
      if (v < lo) v = lo;
      if (v > hi) v = hi;
      out[i] = store<T>(v);
    }
  });
  ctx.set_output(0, std::move(y));
}

void cast_to(KernelContext& ctx, DType to) {
  const Tensor& x = ctx.input(0);
  if (!ir::dtype_supported(to) && to != DType::String)
    ctx.unsupported(std::string("casting to ") + ir::dtype_name(to) + " is not supported");
  // Strings are read and written as NumPy does (Tensor::cast).
  if (x.dtype() != DType::String) require_kinds(ctx, x.dtype(), kAny, "input");
  ctx.set_output(0, x.dtype() == to ? x : x.cast(to));
}

void cast_kernel(KernelContext& ctx) {
  const ir::Attribute* a = ctx.node().attr("to");
  if (!a) ctx.fail("required attribute 'to' is missing");
  int64_t code = 0;
  if (a->kind == ir::Attribute::Kind::String) {
    // Before opset 6 'to' names the type; the position is the DataType code.
    static const char* const names[] = {"FLOAT", "UINT8",   "INT8",   "UINT16", "INT16",  "INT32",     "INT64",      "STRING",
                                        "BOOL",  "FLOAT16", "DOUBLE", "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16"};
    for (int64_t i = 0; i < int64_t(std::size(names)); ++i)
      if (a->s == names[i]) code = i + 1;
    if (code == 0) ctx.fail("attribute 'to' names unknown type '" + a->s + "', expected e.g. FLOAT or INT64");
  } else if (a->kind == ir::Attribute::Kind::Int) {
    code = a->i;
    if (code < 1 || code > 16) ctx.fail("attribute 'to' is " + std::to_string(code) + ", expected a DataType code 1..16");
  } else {
    ctx.fail("attribute 'to' must be an int (or a type name before opset 6)");
  }
  cast_to(ctx, DType(code));
}

void castlike_kernel(KernelContext& ctx) { cast_to(ctx, ctx.input(1).dtype()); }

}  // namespace

void register_elementwise_ops(KernelRegistry& r) {
  r.add("Abs", &abs_kernel);
  r.add("Acos", &acos_kernel);
  r.add("Acosh", &acosh_kernel);
  r.add("Asin", &asin_kernel);
  r.add("Asinh", &asinh_kernel);
  r.add("Atan", &atan_kernel);
  r.add("Atanh", &atanh_kernel);
  r.add("Ceil", &ceil_kernel);
  r.add("Cos", &cos_kernel);
  r.add("Cosh", &cosh_kernel);
  r.add("Erf", &erf_kernel);
  r.add("Exp", &exp_kernel);
  r.add("Floor", &floor_kernel);
  r.add("Log", &log_kernel);
  r.add("Neg", &neg_kernel);
  r.add("Reciprocal", &reciprocal_kernel);
  r.add("Round", &round_kernel);
  r.add("Sign", &sign_kernel);
  r.add("Sin", &sin_kernel);
  r.add("Sinh", &sinh_kernel);
  r.add("Sqrt", &sqrt_kernel);
  r.add("Tan", &tan_kernel);
  r.add("Tanh", &tanh_kernel);
  r.add("Not", &not_kernel);
  r.add("IsInf", &isinf_kernel);
  r.add("IsNaN", &isnan_kernel);
  r.add("Relu", &relu_kernel);
  r.add("Sigmoid", &sigmoid_kernel);
  r.add("Elu", &elu_kernel);
  r.add("Selu", &selu_kernel);
  r.add("Celu", &celu_kernel);
  r.add("LeakyRelu", &leakyrelu_kernel);
  r.add("HardSigmoid", &hardsigmoid_kernel);
  r.add("HardSwish", &hardswish_kernel);
  r.add("Mish", &mish_kernel);
  r.add("Softplus", &softplus_kernel);
  r.add("Softsign", &softsign_kernel);
  r.add("ThresholdedRelu", &thresholdedrelu_kernel);
  r.add("Shrink", &shrink_kernel);
  r.add("Gelu", &gelu_kernel);
  r.add("Clip", &clip_kernel);
  r.add("Cast", &cast_kernel);
  r.add("CastLike", &castlike_kernel);
  register_elementwise_binary_ops(r);
}

}  // namespace kiln::ref
