// Reference kernels for reductions (Reduce*, ArgMax/ArgMin), the softmax
// family and the losses built on it.
//
// Floating-point inputs are computed in double and converted back to the
// input's element type; integer sums and products are computed with wrapping
// 64-bit arithmetic so they stay exact where double would round.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/reference/kernel_registry.hpp"
#include "backends/reference/ops/op_util.hpp"

namespace kiln::ref {
namespace {

int64_t product(const Dims& d, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= d[i];
  return p;
}

// ---------------------------------------------------------------------------
// Reduce*

enum class Reduce { L1, L2, LogSum, LogSumExp, Max, Mean, Min, Prod, Sum, SumSquare };

double reduce_doubles(Reduce op, const std::vector<double>& v) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  double acc = 0;
  switch (op) {
    case Reduce::Max:
    case Reduce::Min: {
      acc = op == Reduce::Max ? -inf : inf;
      for (double x : v) {
        if (std::isnan(x)) return x;
        acc = op == Reduce::Max ? std::max(acc, x) : std::min(acc, x);
      }
      return acc;
    }
    case Reduce::Prod:
      acc = 1;
      for (double x : v) acc *= x;
      return acc;
    case Reduce::LogSumExp: {
      double m = reduce_doubles(Reduce::Max, v);
      // Shifting by the maximum avoids overflow; an infinite maximum is the result.
      if (!std::isfinite(m)) return m;
      for (double x : v) acc += std::exp(x - m);
      return m + std::log(acc);
    }
    default:
      for (double x : v) {
        if (op == Reduce::L1)
          acc += std::fabs(x);
        else if (op == Reduce::L2 || op == Reduce::SumSquare)
          acc += x * x;
        else
          acc += x;
      }
      if (op == Reduce::L2) return std::sqrt(acc);
      if (op == Reduce::LogSum) return std::log(acc);
      if (op == Reduce::Mean) return acc / double(v.size());
      return acc;
  }
}

template <typename T>
T reduce_group(Reduce op, const std::vector<T>& v) {
  if constexpr (std::is_integral_v<T>) {
    if (op == Reduce::Max || op == Reduce::Min) {
      if (v.empty()) return op == Reduce::Max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
      return op == Reduce::Max ? *std::max_element(v.begin(), v.end()) : *std::min_element(v.begin(), v.end());
    }
    if (op == Reduce::Sum || op == Reduce::Prod || op == Reduce::L1 || op == Reduce::SumSquare) {
      uint64_t acc = op == Reduce::Prod ? 1 : 0;
      for (T x : v) {
        uint64_t y = static_cast<uint64_t>(x);
        if constexpr (std::is_signed_v<T>)
          if (op == Reduce::L1 && x < 0) y = 0 - y;
        if (op == Reduce::SumSquare) y *= y;
        acc = op == Reduce::Prod ? acc * y : acc + y;
      }
      if constexpr (std::is_same_v<T, bool>)
        return acc != 0;
      else
        return static_cast<T>(acc);
    }
  }
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = static_cast<double>(v[i]);
  return saturate_cast<T>(reduce_doubles(op, d));
}

// Axes come from the `axes` input from opset 13 (ReduceSum) / 18 (the others)
// and from the attribute before; accepting whichever is present covers both.
template <Reduce op>
void reduce_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  std::vector<int64_t> axes;
  if (ctx.has_input(1)) {
    const Tensor& a = ctx.input(1);
    if (!ir::dtype_is_int(a.dtype()))
      ctx.fail(std::string("axes input has element type ") + ir::dtype_name(a.dtype()) + ", expected int64");
    if (a.rank() > 1) ctx.fail("axes input has rank " + std::to_string(a.rank()) + ", expected a 1-D tensor");
    axes = a.to_int64_vector();
  } else {
    axes = ctx.attr_ints("axes");
  }
  bool keepdims = ctx.attr_int("keepdims", 1) != 0;
  if (axes.empty() && ctx.attr_int("noop_with_empty_axes", 0) != 0) {
    ctx.set_output(0, x);
    return;
  }
  std::vector<bool> reduced(size_t(rank), axes.empty());
  for (int64_t a : axes) {
    int64_t n = normalize_axis(ctx, a, rank);
    if (n >= rank) ctx.fail("axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
    if (reduced[size_t(n)]) ctx.fail("axis " + std::to_string(a) + " is listed more than once in axes");
    reduced[size_t(n)] = true;
  }

  Dims kept_dims(x.dims()), out_dims;
  for (size_t d = 0; d < size_t(rank); ++d) {
    if (reduced[d]) kept_dims[d] = 1;
    if (!reduced[d] || keepdims) out_dims.push_back(kept_dims[d]);
  }
  std::vector<int64_t> out_strides = strides_of(kept_dims);
  for (size_t d = 0; d < size_t(rank); ++d)
    if (reduced[d]) out_strides[d] = 0;

  Tensor out(x.dtype(), out_dims);
  ir::dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    std::vector<std::vector<T>> groups(size_t(out.numel()));
    int64_t i = 0;
    for (BroadcastIterator it(x.dims(), {out_strides}); !it.done(); it.next()) groups[size_t(it.offset(0))].push_back(in[i++]);
    T* o = out.data<T>();
    for (size_t g = 0; g < groups.size(); ++g) o[g] = reduce_group<T>(op, groups[g]);
  });
  ctx.set_output(0, out);
}

// ---------------------------------------------------------------------------
// ArgMax / ArgMin

template <bool is_max>
void arg_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  if (rank == 0) ctx.fail("input is a scalar, expected a tensor of rank >= 1");
  int64_t axis = normalize_axis(ctx, ctx.attr_int("axis", 0), rank);
  bool keepdims = ctx.attr_int("keepdims", 1) != 0;
  bool last = ctx.attr_int("select_last_index", 0) != 0;
  const Dims& dims = x.dims();
  int64_t outer = product(dims, 0, size_t(axis)), n = dims[size_t(axis)], inner = product(dims, size_t(axis) + 1, dims.size());
  if (n == 0 && outer * inner > 0) ctx.fail("cannot take the arg-extremum along axis of size 0");
  Dims out_dims = dims;
  if (keepdims)
    out_dims[size_t(axis)] = 1;
  else
    out_dims.erase(out_dims.begin() + axis);
  Tensor out(DType::Int64, out_dims);
  int64_t* o = out.data<int64_t>();
  ir::dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using V = std::conditional_t<std::is_integral_v<T>, T, double>;
    const T* v = x.data<T>();
    for (int64_t a = 0; a < outer; ++a)
      for (int64_t b = 0; b < inner; ++b) {
        int64_t best = 0;
        V best_v = static_cast<V>(v[a * n * inner + b]);
        for (int64_t k = 1; k < n; ++k) {
          V c = static_cast<V>(v[(a * n + k) * inner + b]);
          if constexpr (!std::is_integral_v<T>) {
            if (std::isnan(best_v)) break;  // like numpy, the first NaN wins
            if (std::isnan(c)) {
              best = k, best_v = c;
              continue;
            }
          }
          if ((is_max ? c > best_v : c < best_v) || (last && c == best_v)) best = k, best_v = c;
        }
        o[a * inner + b] = best;
      }
  });
  ctx.set_output(0, out);
}

// ---------------------------------------------------------------------------
// Softmax, LogSoftmax, Hardmax

// Before opset 13 the input is coerced to 2-D [prod(dims[:axis]), prod(dims[axis:])]
// and normalised along the second dimension; from 13 along the single axis.
struct AxisLayout {
  int64_t outer, n, inner;
};

AxisLayout softmax_layout(const KernelContext& ctx, const Tensor& x) {
  const int64_t rank = x.rank();
  const Dims& dims = x.dims();
  if (ctx.opset() >= 13) {
    if (rank == 0) return {1, 1, 1};
    int64_t axis = normalize_axis(ctx, ctx.attr_int("axis", -1), rank);
    return {product(dims, 0, size_t(axis)), dims[size_t(axis)], product(dims, size_t(axis) + 1, dims.size())};
  }
  int64_t axis = ctx.attr_int("axis", 1);
  if (axis < -rank || axis > rank) ctx.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  if (axis < 0) axis += rank;
  return {product(dims, 0, size_t(axis)), product(dims, size_t(axis), dims.size()), 1};
}

enum class SoftmaxKind { Softmax, LogSoftmax, Hardmax };

// Applies the normalisation in place on v along the layout's middle axis.
void softmax_along(SoftmaxKind kind, const AxisLayout& l, std::vector<double>& v) {
  for (int64_t a = 0; a < l.outer; ++a)
    for (int64_t b = 0; b < l.inner; ++b) {
      auto at = [&](int64_t k) -> double& { return v[size_t((a * l.n + k) * l.inner + b)]; };
      if (l.n == 0) continue;
      int64_t arg = 0;
      double m = at(0);
      for (int64_t k = 1; k < l.n; ++k)
        if (at(k) > m) m = at(k), arg = k;
      if (kind == SoftmaxKind::Hardmax) {
        for (int64_t k = 0; k < l.n; ++k) at(k) = k == arg ? 1.0 : 0.0;
        continue;
      }
      double sum = 0;
      for (int64_t k = 0; k < l.n; ++k) sum += std::exp(at(k) - m);
      for (int64_t k = 0; k < l.n; ++k)
        at(k) = kind == SoftmaxKind::Softmax ? std::exp(at(k) - m) / sum : at(k) - m - std::log(sum);
    }
}

template <SoftmaxKind kind>
void softmax_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  require_float(ctx, x, "input");
  AxisLayout l = softmax_layout(ctx, x);
  std::vector<double> v = to_doubles(x);
  softmax_along(kind, l, v);
  ctx.set_output(0, from_doubles(x.dtype(), x.dims(), v));
}

// ---------------------------------------------------------------------------
// NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss

// Loss over log-probabilities `logp` of shape (N, C, d1..dk) and integer
// targets of shape (N, d1..dk); writes output 0.
void nll_loss(KernelContext& ctx, const Tensor& input, const std::vector<double>& logp, const Tensor& target,
              const Tensor* weight) {
  const Dims& dims = input.dims();
  if (dims.size() < 2) ctx.fail("input has shape " + ir::dims_to_string(dims) + ", expected (N, C, d1, ..., dk)");
  Dims expect_target = dims;
  expect_target.erase(expect_target.begin() + 1);
  if (target.dims() != expect_target)
    ctx.fail("target has shape " + ir::dims_to_string(target.dims()) + ", expected " + ir::dims_to_string(expect_target));
  if (!ir::dtype_is_int(target.dtype()))
    ctx.fail(std::string("target has element type ") + ir::dtype_name(target.dtype()) + ", expected int32 or int64");
  const int64_t N = dims[0], C = dims[1], D = product(dims, 2, dims.size());
  std::vector<double> w;
  if (weight) {
    if (weight->dims() != Dims{C})
      ctx.fail("weight has shape " + ir::dims_to_string(weight->dims()) + ", expected (" + std::to_string(C) + ")");
    w = to_doubles(*weight);
  }
  const bool has_ignore = ctx.has_attr("ignore_index");
  const int64_t ignore = ctx.attr_int("ignore_index", 0);
  const std::string reduction = ctx.attr_string("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    ctx.fail("reduction is '" + reduction + "', expected 'none', 'sum' or 'mean'");

  std::vector<double> loss(size_t(N * D));
  double loss_sum = 0, weight_sum = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) {
      int64_t t = target.as_int64(n * D + d);
      if (has_ignore && t == ignore) continue;
      if (t < 0 || t >= C)
        ctx.fail("target value " + std::to_string(t) + " is out of range, expected a class in [0, " + std::to_string(C) + ")");
      double wt = weight ? w[size_t(t)] : 1.0;
      double l = -logp[size_t((n * C + t) * D + d)] * wt;
      loss[size_t(n * D + d)] = l;
      loss_sum += l;
      weight_sum += wt;
    }
  if (reduction == "none") {
    ctx.set_output(0, from_doubles(input.dtype(), target.dims(), loss));
  } else {
    double r = reduction == "sum" ? loss_sum : loss_sum / weight_sum;
    ctx.set_output(0, from_doubles(input.dtype(), {}, {r}));
  }
}

void nll_loss_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  require_float(ctx, x, "input");
  nll_loss(ctx, x, to_doubles(x), ctx.input(1), ctx.has_input(2) ? &ctx.input(2) : nullptr);
}

void softmax_cross_entropy_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  require_float(ctx, x, "scores");
  if (x.rank() < 2) ctx.fail("scores has shape " + ir::dims_to_string(x.dims()) + ", expected (N, C, d1, ..., dk)");
  std::vector<double> logp = to_doubles(x);
  const Dims& dims = x.dims();
  softmax_along(SoftmaxKind::LogSoftmax, {dims[0], dims[1], product(dims, 2, dims.size())}, logp);
  nll_loss(ctx, x, logp, ctx.input(1), ctx.has_input(2) ? &ctx.input(2) : nullptr);
  if (ctx.output_wanted(1)) ctx.set_output(1, from_doubles(x.dtype(), dims, logp));
}

}  // namespace

void register_reduction_ops(KernelRegistry& r) {
  r.add("ReduceL1", &reduce_kernel<Reduce::L1>);
  r.add("ReduceL2", &reduce_kernel<Reduce::L2>);
  r.add("ReduceLogSum", &reduce_kernel<Reduce::LogSum>);
  r.add("ReduceLogSumExp", &reduce_kernel<Reduce::LogSumExp>);
  r.add("ReduceMax", &reduce_kernel<Reduce::Max>);
  r.add("ReduceMean", &reduce_kernel<Reduce::Mean>);
  r.add("ReduceMin", &reduce_kernel<Reduce::Min>);
  r.add("ReduceProd", &reduce_kernel<Reduce::Prod>);
  r.add("ReduceSum", &reduce_kernel<Reduce::Sum>);
  r.add("ReduceSumSquare", &reduce_kernel<Reduce::SumSquare>);
  r.add("ArgMax", &arg_kernel<true>);
  r.add("ArgMin", &arg_kernel<false>);
  r.add("Softmax", &softmax_kernel<SoftmaxKind::Softmax>);
  r.add("LogSoftmax", &softmax_kernel<SoftmaxKind::LogSoftmax>);
  r.add("Hardmax", &softmax_kernel<SoftmaxKind::Hardmax>);
  r.add("NegativeLogLikelihoodLoss", &nll_loss_kernel);
  r.add("SoftmaxCrossEntropyLoss", &softmax_cross_entropy_kernel);
}

}  // namespace kiln::ref
