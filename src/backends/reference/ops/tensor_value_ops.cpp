// Reference kernels of the tensor group that look at element values:
// TopK, Unique, CumSum, Range, OneHot, EyeLike.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "backends/reference/kernel_registry.hpp"
#include "backends/reference/ops/op_util.hpp"
#include "backends/reference/ops/tensor_common.hpp"

namespace kiln::ref {

using namespace tensor_detail;

namespace {

// A strict weak order that puts NaN above every number, so sorting never
// sees an inconsistent comparison.
template <typename C>
bool value_less(C a, C b) {
  bool na = a != a, nb = b != b;
  if (na || nb) return !na && nb;
  return a < b;
}

// Views x as [outer, dim, inner] around `axis`.
struct AxisView {
  int64_t outer = 1, dim = 1, inner = 1;
  AxisView(const Dims& dims, int64_t axis) {
    for (size_t d = 0; d < dims.size(); ++d) {
      if (int64_t(d) < axis)
        outer *= dims[d];
      else if (int64_t(d) == axis)
        dim = dims[d];
      else
        inner *= dims[d];
    }
  }
  int64_t at(int64_t o, int64_t i, int64_t in) const { return (o * dim + i) * inner + in; }
};

void topk_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t k = ctx.opset() < 10 ? ctx.attr_int("k") : scalar_int(ctx, ctx.input(1), "k");
  int64_t axis = tensor_axis(ctx, ctx.attr_int("axis", -1), x.rank());
  bool largest = ctx.attr_int("largest", 1) != 0;
  AxisView v(x.dims(), axis);
  if (k < 0 || k > v.dim)
    ctx.fail("k = " + std::to_string(k) + " should be within [0, " + std::to_string(v.dim) + "], the axis size");
  Dims out = x.dims();
  out[size_t(axis)] = k;
  Tensor values(x.dtype(), out), indices(DType::Int64, out);
  AxisView ov(out, axis);
  int64_t* ip = indices.data<int64_t>();
  ir::dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = Compute<T>;
    const T* xp = x.data<T>();
    T* vp = values.data<T>();
    std::vector<int64_t> order(size_t(v.dim));
    for (int64_t o = 0; o < v.outer; ++o)
      for (int64_t in = 0; in < v.inner; ++in) {
        std::iota(order.begin(), order.end(), 0);
        // Stable, so equal values keep the lower index first.
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
          C va = C(xp[v.at(o, a, in)]), vb = C(xp[v.at(o, b, in)]);
          return largest ? value_less(vb, va) : value_less(va, vb);
        });
        for (int64_t j = 0; j < k; ++j) {
          vp[ov.at(o, j, in)] = xp[v.at(o, order[size_t(j)], in)];
          ip[ov.at(o, j, in)] = order[size_t(j)];
        }
      }
  });
  ctx.set_output(0, values);
  ctx.set_output(1, indices);
}

void unique_kernel(KernelContext& ctx) {
  const Tensor& input = ctx.input(0);
  bool sorted = ctx.attr_int("sorted", 1) != 0;
  bool has_axis = ctx.has_attr("axis");
  // Without an axis the items are the elements of the flattened input.
  Tensor x = has_axis ? input : input.reshaped({input.numel()});
  int64_t axis = has_axis ? tensor_axis(ctx, ctx.attr_int("axis"), x.rank()) : 0;
  AxisView v(x.dims(), axis);
  std::vector<int64_t> first;  // per unique item, in output order: first occurrence
  std::vector<int64_t> inverse(size_t(v.dim));
  std::vector<int64_t> counts;
  ir::dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = Compute<T>;
    const T* xp = x.data<T>();
    auto item = [&](int64_t i) {
      std::vector<C> e;
      for (int64_t o = 0; o < v.outer; ++o)
        for (int64_t in = 0; in < v.inner; ++in) e.push_back(C(xp[v.at(o, i, in)]));
      return e;
    };
    auto less = [](const std::vector<C>& a, const std::vector<C>& b) {
      return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), value_less<C>);
    };
    std::map<std::vector<C>, int64_t, decltype(less)> seen(less);  // item -> index in first-occurrence order
    std::vector<int64_t> occurrence_of(size_t(v.dim));
    for (int64_t i = 0; i < v.dim; ++i) {
      auto [it, fresh] = seen.emplace(item(i), int64_t(first.size()));
      if (fresh) first.push_back(i);
      occurrence_of[size_t(i)] = it->second;
    }
    // rank[j]: output position of the j-th distinct item in occurrence order.
    std::vector<int64_t> rank(first.size());
    if (sorted) {
      int64_t pos = 0;
      std::vector<int64_t> ordered;
      for (auto& [key, j] : seen) {
        rank[size_t(j)] = pos++;
        ordered.push_back(first[size_t(j)]);
      }
      first = ordered;
    } else {
      std::iota(rank.begin(), rank.end(), 0);
    }
    counts.assign(first.size(), 0);
    for (int64_t i = 0; i < v.dim; ++i) {
      inverse[size_t(i)] = rank[size_t(occurrence_of[size_t(i)])];
      ++counts[size_t(inverse[size_t(i)])];
    }
  });
  int64_t n = int64_t(first.size());
  Dims ydims = x.dims();
  ydims[size_t(axis)] = n;
  Tensor y(x.dtype(), ydims);
  AxisView yv(ydims, axis);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t o = 0; o < v.outer; ++o)
      for (int64_t in = 0; in < v.inner; ++in) copy_elem(y, yv.at(o, j, in), x, v.at(o, first[size_t(j)], in));
  ctx.set_output(0, y);
  ctx.set_output(1, Tensor::from_vector<int64_t>({n}, first));
  ctx.set_output(2, Tensor::from_vector<int64_t>({v.dim}, inverse));
  ctx.set_output(3, Tensor::from_vector<int64_t>({n}, counts));
}

void cumsum_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& axis_t = ctx.input(1);
  int64_t axis = tensor_axis(ctx, scalar_int(ctx, axis_t, "axis"), x.rank());
  bool exclusive = ctx.attr_int("exclusive", 0) != 0, reverse = ctx.attr_int("reverse", 0) != 0;
  AxisView v(x.dims(), axis);
  Tensor out(x.dtype(), x.dims());
  ir::dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = Compute<T>;
    if constexpr (std::is_same_v<T, bool>) {
      ctx.fail("bool input is not supported (expected a numeric type)");
    } else {
      const T* xp = x.data<T>();
      T* op = out.data<T>();
      for (int64_t o = 0; o < v.outer; ++o)
        for (int64_t in = 0; in < v.inner; ++in) {
          C acc = C(0);
          for (int64_t s = 0; s < v.dim; ++s) {
            int64_t i = v.at(o, reverse ? v.dim - 1 - s : s, in);
            C val = C(xp[i]);
            if (!exclusive) acc = C(acc + val);
            op[i] = T(acc);
            if (exclusive) acc = C(acc + val);
          }
        }
    }
  });
  ctx.set_output(0, out);
}

void range_kernel(KernelContext& ctx) {
  const Tensor& start = ctx.input(0);
  const Tensor& limit = ctx.input(1);
  const Tensor& delta = ctx.input(2);
  for (const Tensor* t : {&start, &limit, &delta}) scalar_double(ctx, *t, "start, limit and delta each");
  if (limit.dtype() != start.dtype() || delta.dtype() != start.dtype())
    ctx.fail("start, limit and delta should have the same type");
  Tensor out;
  ir::dispatch_dtype(start.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = Compute<T>;
    if constexpr (std::is_same_v<T, bool>) {
      ctx.fail("bool is not a valid Range type (expected a number)");
    } else {
      C s = C(start.data<T>()[0]), l = C(limit.data<T>()[0]), d = C(delta.data<T>()[0]);
      if (d == C(0)) ctx.fail("delta is 0 (expected nonzero)");
      double count = std::ceil((double(l) - double(s)) / double(d));
      if (!(count < 1e12))
        ctx.fail("(limit - start) / delta = " + std::to_string(count) +
                 " is not a usable element count (expected finite and < 1e12)");
      int64_t n = count > 0 ? int64_t(count) : 0;
      out = Tensor(start.dtype(), {n});
      T* p = out.data<T>();
      C acc = s;
      // Repeated addition matches the spec's reference loop.
      for (int64_t i = 0; i < n; ++i, acc = C(acc + d)) p[i] = T(acc);
    }
  });
  ctx.set_output(0, out);
}

void onehot_kernel(KernelContext& ctx) {
  const Tensor& ind = ctx.input(0);
  const Tensor& depth_t = ctx.input(1);
  const Tensor& values = ctx.input(2);
  if (values.numel() != 2) ctx.fail("values should hold [off, on], has shape " + ir::dims_to_string(values.dims()));
  double depth_v = scalar_double(ctx, depth_t, "depth");
  if (!(depth_v >= 1 && depth_v < 1e12)) ctx.fail("depth " + std::to_string(depth_v) + " should be a positive size");
  int64_t depth = int64_t(depth_v);
  int64_t r = ind.rank() + 1;
  int64_t axis = ctx.attr_int("axis", -1);
  if (axis < -r || axis >= r) ctx.fail("axis " + std::to_string(axis) + " is out of range for output rank " + std::to_string(r));
  if (axis < 0) axis += r;
  Dims out = ind.dims();
  out.insert(out.begin() + axis, depth);
  AxisView ov(out, axis);
  Tensor result(values.dtype(), out);
  for (int64_t o = 0; o < ov.outer; ++o)
    for (int64_t in = 0; in < ov.inner; ++in) {
      double v = ind.as_double(o * ov.inner + in);
      // Out-of-range indices (NaN included) select no position.
      int64_t hot = v >= -double(depth) && v < double(depth) ? int64_t(v) : depth;
      if (hot < 0) hot += depth;
      for (int64_t p = 0; p < depth; ++p) copy_elem(result, ov.at(o, p, in), values, p == hot ? 1 : 0);
    }
  ctx.set_output(0, result);
}

void eyelike_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.rank() != 2) ctx.fail("input should be 2-D, is " + ir::dims_to_string(x.dims()));
  DType dt = ctx.has_attr("dtype") ? DType(ctx.attr_int("dtype")) : x.dtype();
  if (!ir::dtype_supported(dt)) ctx.unsupported("dtype " + std::to_string(int(dt)) + " is not supported");
  int64_t k = ctx.attr_int("k", 0);
  Tensor one = Tensor::scalar<double>(1.0).cast(dt);
  Tensor out(dt, x.dims());
  for (int64_t i = 0; i < x.dim(0); ++i)
    if (k >= -i && k < x.dim(1) - i) copy_elem(out, i * x.dim(1) + i + k, one, 0);  // i + k could overflow
  ctx.set_output(0, out);
}

}  // namespace

void register_tensor_value_ops(KernelRegistry& r) {
  r.add("TopK", &topk_kernel);
  r.add("Unique", &unique_kernel);
  r.add("CumSum", &cumsum_kernel);
  r.add("Range", &range_kernel);
  r.add("OneHot", &onehot_kernel);
  r.add("EyeLike", &eyelike_kernel);
}

}  // namespace kiln::ref
