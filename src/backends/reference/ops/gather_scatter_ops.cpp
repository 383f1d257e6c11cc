// Reference kernels of the gathers and scatters (Gather, GatherElements,
// GatherND, Scatter, ScatterElements, ScatterND): every index checked
// against the dimension it selects from.
#include <algorithm>
#include <cstring>

#include "backends/reference/kernel_registry.hpp"
#include "backends/reference/ops/op_util.hpp"
#include "backends/reference/ops/tensor_common.hpp"

namespace kiln::ref {

using namespace tensor_detail;

namespace {

// ------------------------------------------------------------------ gathers

void gather_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  int64_t axis = tensor_axis(ctx, ctx.attr_int("axis", 0), x.rank());
  int64_t dim = x.dims()[size_t(axis)];
  std::vector<int64_t> indices = ind.to_int64_vector();
  for (int64_t& i : indices) i = checked_index(ctx, i, dim, "gather");
  Dims out(x.dims().begin(), x.dims().begin() + axis);
  out.insert(out.end(), ind.dims().begin(), ind.dims().end());
  out.insert(out.end(), x.dims().begin() + axis + 1, x.dims().end());
  std::vector<int64_t> strides = strides_of(x.dims());
  size_t q = size_t(ind.rank());
  ctx.set_output(0, remap(x, out, [&](const std::vector<int64_t>& idx) {
                   int64_t s = 0;
                   for (size_t d = 0; d < size_t(axis); ++d) s += idx[d] * strides[d];
                   std::vector<int64_t> ii(idx.begin() + axis, idx.begin() + axis + int64_t(q));
                   s += indices[size_t(ravel(ii, ind.dims()))] * strides[size_t(axis)];
                   for (size_t d = size_t(axis) + 1; d < strides.size(); ++d) s += idx[d + q - 1] * strides[d];
                   return s;
                 }));
}

void gather_elements_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  if (ind.rank() != x.rank()) ctx.fail("indices should have the data's rank " + std::to_string(x.rank()));
  int64_t axis = tensor_axis(ctx, ctx.attr_int("axis", 0), x.rank());
  for (int d = 0; d < x.rank(); ++d)
    if (d != axis && ind.dim(d) > x.dim(d))
      ctx.fail("indices shape " + ir::dims_to_string(ind.dims()) + " exceeds data shape " + ir::dims_to_string(x.dims()) +
               " on axis " + std::to_string(d));
  std::vector<int64_t> indices = ind.to_int64_vector();
  int64_t o = 0;
  ctx.set_output(0, remap(x, ind.dims(), [&](const std::vector<int64_t>& idx) {
                   std::vector<int64_t> i = idx;
                   i[size_t(axis)] = checked_index(ctx, indices[size_t(o++)], x.dim(int(axis)), "gather");
                   return ravel(i, x.dims());
                 }));
}

// Shared by GatherND and ScatterND: for each index tuple (the last axis of
// `ind`) the flat offset of the addressed slice within data, plus the slice size.
struct NdIndex {
  std::vector<int64_t> offsets;
  int64_t slice = 1;
};

NdIndex nd_offsets(const KernelContext& ctx, const Tensor& data, const Tensor& ind, int64_t batch_dims) {
  if (ind.rank() < 1) ctx.fail("indices should have rank >= 1");
  int64_t k = ind.dim(-1);
  if (batch_dims < 0 || batch_dims >= std::min<int64_t>(data.rank(), ind.rank()) || batch_dims + k > data.rank())
    ctx.fail("indices of shape " + ir::dims_to_string(ind.dims()) + " with batch_dims " + std::to_string(batch_dims) +
             " do not fit data of shape " + ir::dims_to_string(data.dims()));
  for (int64_t d = 0; d < batch_dims; ++d)
    if (ind.dim(int(d)) != data.dim(int(d))) ctx.fail("batch dimensions of data and indices differ");
  std::vector<int64_t> strides = strides_of(data.dims());
  NdIndex r;
  for (int64_t d = batch_dims + k; d < data.rank(); ++d) r.slice *= data.dim(int(d));
  std::vector<int64_t> v = ind.to_int64_vector();
  int64_t tuples = ir::checked_numel(Dims(ind.dims().begin(), ind.dims().end() - 1));
  int64_t per_batch = 1;
  for (int64_t d = batch_dims; d < ind.rank() - 1; ++d) per_batch *= ind.dim(int(d));
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t batch = per_batch ? t / per_batch : 0;
    std::vector<int64_t> bidx = unravel(batch, Dims(data.dims().begin(), data.dims().begin() + batch_dims));
    int64_t off = 0;
    for (int64_t d = 0; d < batch_dims; ++d) off += bidx[size_t(d)] * strides[size_t(d)];
    for (int64_t j = 0; j < k; ++j)
      off += checked_index(ctx, v[size_t(t * k + j)], data.dim(int(batch_dims + j)), "indices") * strides[size_t(batch_dims + j)];
    r.offsets.push_back(off);
  }
  return r;
}

void gather_nd_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  int64_t batch_dims = ctx.attr_int("batch_dims", 0);
  NdIndex nd = nd_offsets(ctx, x, ind, batch_dims);
  Dims out(ind.dims().begin(), ind.dims().end() - 1);
  out.insert(out.end(), x.dims().begin() + batch_dims + ind.dim(-1), x.dims().end());
  Tensor result(x.dtype(), out);
  for (size_t t = 0; t < nd.offsets.size(); ++t)
    for (int64_t e = 0; e < nd.slice; ++e) copy_elem(result, int64_t(t) * nd.slice + e, x, nd.offsets[t] + e);
  ctx.set_output(0, result);
}

// ----------------------------------------------------------------- scatters

// Combines an update into out[o] with the given reduction ("none" replaces).
void reduce_into(const KernelContext& ctx, Tensor& out, int64_t o, const Tensor& upd, int64_t u, const std::string& reduction) {
  if (reduction == "none") return copy_elem(out, o, upd, u);
  ir::dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = Compute<T>;
    T* p = out.data<T>();
    C a = C(p[o]), b = C(upd.data<T>()[u]);
    C r;
    if (reduction == "add")
      r = C(a + b);
    else if (reduction == "mul")
      r = C(a * b);
    else if (reduction == "max")
      r = std::max(a, b);
    else if (reduction == "min")
      r = std::min(a, b);
    else
      ctx.fail("reduction '" + reduction + "' should be one of none, add, mul, max, min");
    p[o] = T(r);
  });
}

void scatter_elements_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  const Tensor& upd = ctx.input(2);
  if (ind.rank() != x.rank() || upd.dims() != ind.dims() || upd.dtype() != x.dtype())
    ctx.fail("indices and updates should have the same shape and the data's rank; got data " + ir::dims_to_string(x.dims()) +
             ", indices " + ir::dims_to_string(ind.dims()) + ", updates " + ir::dims_to_string(upd.dims()));
  int64_t axis = tensor_axis(ctx, ctx.attr_int("axis", 0), x.rank());
  for (int d = 0; d < x.rank(); ++d)
    if (d != axis && ind.dim(d) > x.dim(d))
      ctx.fail("indices shape " + ir::dims_to_string(ind.dims()) + " exceeds data shape " + ir::dims_to_string(x.dims()) +
               " on axis " + std::to_string(d));
  std::string reduction = ctx.attr_string("reduction", "none");
  Tensor out = x.clone();
  std::vector<int64_t> indices = ind.to_int64_vector();
  std::vector<int64_t> idx(size_t(ind.rank()), 0);
  for (int64_t u = 0; u < ind.numel(); ++u, next_index(idx, ind.dims())) {
    std::vector<int64_t> i = idx;
    i[size_t(axis)] = checked_index(ctx, indices[size_t(u)], x.dim(int(axis)), "scatter");
    reduce_into(ctx, out, ravel(i, x.dims()), upd, u, reduction);
  }
  ctx.set_output(0, out);
}

void scatter_nd_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  const Tensor& upd = ctx.input(2);
  NdIndex nd = nd_offsets(ctx, x, ind, 0);
  Dims expect(ind.dims().begin(), ind.dims().end() - 1);
  expect.insert(expect.end(), x.dims().begin() + ind.dim(-1), x.dims().end());
  if (upd.dims() != expect || upd.dtype() != x.dtype())
    ctx.fail("updates should have shape " + ir::dims_to_string(expect) + " and the data's type, has " +
             ir::dims_to_string(upd.dims()));
  std::string reduction = ctx.attr_string("reduction", "none");
  Tensor out = x.clone();
  for (size_t t = 0; t < nd.offsets.size(); ++t)
    for (int64_t e = 0; e < nd.slice; ++e) reduce_into(ctx, out, nd.offsets[t] + e, upd, int64_t(t) * nd.slice + e, reduction);
  ctx.set_output(0, out);
}

}  // namespace

void register_gather_scatter_ops(KernelRegistry& r) {
  r.add("Gather", &gather_kernel);
  r.add("GatherElements", &gather_elements_kernel);
  r.add("GatherND", &gather_nd_kernel);
  r.add("Scatter", &scatter_elements_kernel);
  r.add("ScatterElements", &scatter_elements_kernel);
  r.add("ScatterND", &scatter_nd_kernel);
}

}  // namespace kiln::ref
