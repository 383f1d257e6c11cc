// Reference MatMul and Gemm: numpy matrix-product semantics, accumulated in
// double (floats) or int64 (integers) and converted back once.
#include <type_traits>

#include "backends/reference/kernel_registry.hpp"
#include "backends/reference/ops/op_util.hpp"

namespace kiln::ref {
namespace {

template <typename T>
using Acc = std::conditional_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int64_t, double>;

template <typename T>
T store(Acc<T> v) {
  if constexpr (std::is_same_v<T, ir::Half> || std::is_same_v<T, ir::BFloat16>)
    return T(float(v));
  else
    return static_cast<T>(v);
}

// Both operands numeric and of one element type.
void require_operands(const KernelContext& ctx, const Tensor& a, const Tensor& b) {
  if (a.dtype() == DType::Bool) ctx.fail("A must be numeric, is bool");
  if (a.dtype() != b.dtype())
    ctx.fail(std::string("A is ") + ir::dtype_name(a.dtype()) + " but B is " + ir::dtype_name(b.dtype()));
}

void matmul(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  require_operands(ctx, a, b);
  const MatMulShape s = matmul_shape(ctx, a.dims(), b.dims());
  const int64_t m = s.m, k = s.k, n = s.n;
  Tensor out(a.dtype(), s.out);
  ir::dispatch_dtype(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      const T* pa = a.data<T>();
      const T* pb = b.data<T>();
      T* po = out.data<T>();
      int64_t batch_index = 0;
      for (BroadcastIterator it(s.batch, {s.a_batch_strides, s.b_batch_strides}); !it.done(); it.next(), ++batch_index) {
        const T* ma = pa + it.offset(0) * m * k;
        const T* mb = pb + it.offset(1) * k * n;
        T* mo = po + batch_index * m * n;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            Acc<T> acc = 0;
            for (int64_t p = 0; p < k; ++p) acc += Acc<T>(ma[i * k + p]) * Acc<T>(mb[p * n + j]);
            mo[i * n + j] = store<T>(acc);
          }
      }
    }
  });
  ctx.set_output(0, out);
}

void gemm(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  require_operands(ctx, a, b);
  if (a.rank() != 2 || b.rank() != 2)
    ctx.fail("A and B must be matrices, got " + ir::dims_to_string(a.dims()) + " and " + ir::dims_to_string(b.dims()));
  const bool ta = ctx.attr_int("transA", 0) != 0, tb = ctx.attr_int("transB", 0) != 0;
  const double alpha = ctx.attr_float("alpha", 1.0f), beta = ctx.attr_float("beta", 1.0f);
  const int64_t m = ta ? a.dim(1) : a.dim(0), k = ta ? a.dim(0) : a.dim(1);
  const int64_t k2 = tb ? b.dim(1) : b.dim(0), n = tb ? b.dim(0) : b.dim(1);
  if (k != k2)
    ctx.fail("inner dimensions differ: A " + ir::dims_to_string(a.dims()) + (ta ? " (transposed)" : "") + ", B " +
             ir::dims_to_string(b.dims()) + (tb ? " (transposed)" : ""));
  Tensor out(a.dtype(), {m, n});
  const Tensor* c = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  std::vector<int64_t> c_strides;
  if (c) {
    // C broadcasts to [M, N] in one direction only (old opsets: when `broadcast` is set).
    Dims target{m, n};
    if (c->rank() > 2) ctx.fail("C must have rank 2 or less, has shape " + ir::dims_to_string(c->dims()));
    for (int i = 0; i < c->rank(); ++i) {
      int64_t d = c->dims()[size_t(i)], want = target[size_t(2 - c->rank() + i)];
      if (d != 1 && d != want)
        ctx.fail("C of shape " + ir::dims_to_string(c->dims()) + " does not broadcast to " + ir::dims_to_string(target));
    }
    c_strides = broadcast_strides(c->dims(), target);
  }
  ir::dispatch_dtype(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      const T* pa = a.data<T>();
      const T* pb = b.data<T>();
      T* po = out.data<T>();
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          Acc<T> acc = 0;
          for (int64_t p = 0; p < k; ++p)
            acc += Acc<T>(pa[ta ? p * a.dim(1) + i : i * k + p]) * Acc<T>(pb[tb ? j * b.dim(1) + p : p * n + j]);
          const int64_t c_index = c ? i * c_strides[0] + j * c_strides[1] : 0;
          if constexpr (std::is_integral_v<T>) {
            // Exact integer arithmetic unless alpha or beta scale it.
            if (alpha == 1 && beta == 1) {
              po[i * n + j] = store<T>(acc + (c ? c->as_int64(c_index) : 0));
              continue;
            }
          }
          double v = alpha * double(acc);
          if (c) v += beta * c->as_double(c_index);
          po[i * n + j] = store<T>(Acc<T>(v));
        }
    }
  });
  ctx.set_output(0, out);
}

}  // namespace

void register_matrix_ops(KernelRegistry& r) {
  r.add("MatMul", &matmul);
  r.add("Gemm", &gemm);
}

}  // namespace kiln::ref
