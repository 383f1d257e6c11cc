#pragma once
// Helpers shared by the elementwise_*.cpp reference kernels: element-type
// classes, typed dispatch restricted to the types an op accepts, and the
// unary / broadcasting binary element loops.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "backends/reference/kernel_context.hpp"
#include "backends/reference/ops/op_util.hpp"

namespace kiln::ref {

class KernelRegistry;
// Defined in elementwise_binary.cpp; called by register_elementwise_ops.
void register_elementwise_binary_ops(KernelRegistry& r);

namespace elementwise_detail {

template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, ir::Half> || std::is_same_v<T, ir::BFloat16>;
template <typename T>
inline constexpr bool is_float_v = is_half_v<T> || std::is_floating_point_v<T>;
// Arithmetic type for an element type: the 16-bit floats compute in float.
template <typename T>
using Calc = std::conditional_t<is_half_v<T>, float, T>;

// Classes of element types an op accepts (bit set).
enum Kinds : unsigned {
  kFloat = 1,
  kSigned = 2,
  kUnsigned = 4,
  kBool = 8,
  kInt = kSigned | kUnsigned,
  kNumeric = kFloat | kInt,
  kAny = kNumeric | kBool,
};

template <typename T>
constexpr unsigned kind_v = std::is_same_v<T, bool> ? kBool
                            : is_float_v<T>         ? kFloat
                            : std::is_signed_v<T>   ? kSigned
                                                    : kUnsigned;

inline unsigned kind_of(DType t) {
  if (t == DType::Bool) return kBool;
  if (ir::dtype_is_float(t)) return kFloat;
  if (ir::dtype_is_signed_int(t)) return kSigned;
  if (ir::dtype_is_unsigned_int(t)) return kUnsigned;
  return 0;  // string, complex, undefined
}

inline std::string kinds_to_string(unsigned kinds) {
  std::string s;
  auto add = [&](unsigned k, const char* name) {
    if (kinds & k) s += (s.empty() ? "" : " or ") + std::string(name);
  };
  add(kFloat, "floating-point");
  add(kSigned, "signed integer");
  add(kUnsigned, "unsigned integer");
  add(kBool, "bool");
  return s;
}

inline void require_kinds(const KernelContext& ctx, DType t, unsigned kinds, const char* what) {
  if (!(kind_of(t) & kinds))
    ctx.fail(std::string(what) + " has element type " + ir::dtype_name(t) + ", expected " + kinds_to_string(kinds));
}

// Calls f(T{}) for the element type t, which must belong to Kinds; only
// those types are instantiated, so f may use operations others lack.
template <unsigned Kinds, typename F>
void dispatch_kinds(const KernelContext& ctx, DType t, const char* what, F&& f) {
  require_kinds(ctx, t, Kinds, what);
  ir::dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr ((kind_v<T> & Kinds) != 0) f(tag);
  });
}

// Float to integer conversion without undefined behaviour: NaN becomes 0 and
// out-of-range values saturate.
template <typename T>
T saturate(double d) {
  if (std::isnan(d)) return T(0);
  if (d <= double(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
  if (d >= double(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return T(d);
}

// Converts a computed value back to the element type T.
template <typename T, typename R>
T store(R r) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool> && std::is_floating_point_v<R>)
    return saturate<T>(double(r));
  else if constexpr (is_half_v<T>)
    return T(float(r));
  else
    return static_cast<T>(r);
}

// Integer add/sub/mul wrap around (two's complement) instead of overflowing.
template <typename C>
C add_values(C a, C b) {
  if constexpr (std::is_integral_v<C>)
    return C(uint64_t(a) + uint64_t(b));
  else
    return a + b;
}
template <typename C>
C sub_values(C a, C b) {
  if constexpr (std::is_integral_v<C>)
    return C(uint64_t(a) - uint64_t(b));
  else
    return a - b;
}
template <typename C>
C mul_values(C a, C b) {
  if constexpr (std::is_integral_v<C>)
    return C(uint64_t(a) * uint64_t(b));
  else
    return a * b;
}

// y[i] = f(x[i]) computed in Calc<T>, y of x's type (or bool when BoolOut).
template <unsigned Kinds, bool BoolOut = false, typename F>
Tensor map_tensor(const KernelContext& ctx, const Tensor& x, const char* what, F&& f) {
  Tensor y(BoolOut ? DType::Bool : x.dtype(), x.dims());
  dispatch_kinds<Kinds>(ctx, x.dtype(), what, [&](auto tag) {
    using T = decltype(tag);
    using O = std::conditional_t<BoolOut, bool, T>;
    const T* in = x.data<T>();
    O* out = y.data<O>();
    for (int64_t i = 0; i < x.numel(); ++i) out[i] = store<O>(f(Calc<T>(in[i])));
  });
  return y;
}

// out = f(a[i], b[j]) over the numpy broadcast of a and b; f sees raw elements.
template <typename TA, typename TB, typename TO, typename F>
Tensor broadcast_map(const KernelContext& ctx, const Tensor& a, const Tensor& b, DType out_dtype, F&& f) {
  Dims od = broadcast_shapes(ctx, a.dims(), b.dims());
  Tensor out(out_dtype, od);
  const TA* pa = a.data<TA>();
  const TB* pb = b.data<TB>();
  TO* po = out.data<TO>();
  int64_t i = 0;
  for (BroadcastIterator it(od, {broadcast_strides(a.dims(), od), broadcast_strides(b.dims(), od)}); !it.done(); it.next())
    po[i++] = f(pa[it.offset(0)], pb[it.offset(1)]);
  return out;
}

// Broadcasting binary op on two tensors of one element type in Kinds;
// f(Calc<T>, Calc<T>) gives the result, stored as T (or bool when BoolOut).
template <unsigned Kinds, bool BoolOut = false, typename F>
Tensor binary_map(const KernelContext& ctx, const Tensor& a, const Tensor& b, F&& f) {
  if (a.dtype() != b.dtype())
    ctx.fail(std::string("inputs have element types ") + ir::dtype_name(a.dtype()) + " and " + ir::dtype_name(b.dtype()) +
             ", expected the same type");
  Tensor r;
  dispatch_kinds<Kinds>(ctx, a.dtype(), "inputs", [&](auto tag) {
    using T = decltype(tag);
    using O = std::conditional_t<BoolOut, bool, T>;
    r = broadcast_map<T, T, O>(ctx, a, b, BoolOut ? DType::Bool : a.dtype(),
                               [&](T x, T y) { return store<O>(f(Calc<T>(x), Calc<T>(y))); });
  });
  return r;
}

}  // namespace elementwise_detail
}  // namespace kiln::ref
