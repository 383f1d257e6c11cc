#include "backends/reference/ops/op_util.hpp"

namespace kiln::ref {

Dims broadcast_shapes(const KernelContext& ctx, const Dims& a, const Dims& b) {
  size_t rank = std::max(a.size(), b.size());
  Dims out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      ctx.fail("shapes " + ir::dims_to_string(a) + " and " + ir::dims_to_string(b) + " cannot be broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> strides_of(const Dims& dims) {
  std::vector<int64_t> s(dims.size());
  int64_t acc = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    s[i] = acc;
    acc *= dims[i];
  }
  return s;
}

std::vector<int64_t> broadcast_strides(const Dims& in, const Dims& out) {
  std::vector<int64_t> s(out.size(), 0);
  std::vector<int64_t> own = strides_of(in);
  size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) s[lead + i] = in[i] == 1 ? 0 : own[i];
  return s;
}

int64_t normalize_axis(const KernelContext& ctx, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1))
    ctx.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

void require_float(const KernelContext& ctx, const Tensor& t, const char* what) {
  if (!ir::dtype_is_float(t.dtype()))
    ctx.fail(std::string(what) + " has element type " + ir::dtype_name(t.dtype()) +
             ", expected a floating-point type");
}

std::vector<double> to_doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  ir::dispatch_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = t.data<T>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(p[i]);
  });
  return v;
}

static Tensor convert(DType dtype, const Dims& dims, const std::vector<double>& v, bool round) {
  Tensor t(dtype, dims);
  ir::dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    const bool r = round && std::is_integral_v<T> && !std::is_same_v<T, bool>;
    for (size_t i = 0; i < v.size(); ++i) p[i] = saturate_cast<T>(r ? std::round(v[i]) : v[i]);
  });
  return t;
}

Tensor from_doubles(DType dtype, const Dims& dims, const std::vector<double>& v) { return convert(dtype, dims, v, false); }
Tensor from_doubles_rounded(DType dtype, const Dims& dims, const std::vector<double>& v) { return convert(dtype, dims, v, true); }

MatMulShape matmul_shape(const KernelContext& ctx, const Dims& a, const Dims& b) {
  if (a.empty() || b.empty()) ctx.fail("operands must have rank 1 or more");
  Dims ad = a, bd = b;
  if (a.size() == 1) ad.insert(ad.begin(), 1);
  if (b.size() == 1) bd.push_back(1);
  MatMulShape s;
  s.m = ad[ad.size() - 2];
  s.k = ad.back();
  s.n = bd.back();
  if (bd[bd.size() - 2] != s.k)
    ctx.fail("inner dimensions differ: A is " + ir::dims_to_string(a) + ", B is " + ir::dims_to_string(b));
  Dims a_batch(ad.begin(), ad.end() - 2), b_batch(bd.begin(), bd.end() - 2);
  s.batch = broadcast_shapes(ctx, a_batch, b_batch);
  s.a_batch_strides = broadcast_strides(a_batch, s.batch);
  s.b_batch_strides = broadcast_strides(b_batch, s.batch);
  s.out = s.batch;
  if (a.size() != 1) s.out.push_back(s.m);
  if (b.size() != 1) s.out.push_back(s.n);
  return s;
}

BroadcastIterator::BroadcastIterator(const Dims& out, std::vector<std::vector<int64_t>> strides)
    : dims_(out), strides_(std::move(strides)), index_(out.size(), 0), offsets_(strides_.size(), 0) {
  done_ = ir::checked_numel(out) == 0;
}

void BroadcastIterator::next() {
  for (size_t d = dims_.size(); d-- > 0;) {
    if (++index_[d] < dims_[d]) {
      for (size_t k = 0; k < strides_.size(); ++k) offsets_[k] += strides_[k][d];
      return;
    }
    for (size_t k = 0; k < strides_.size(); ++k) offsets_[k] -= strides_[k][d] * (dims_[d] - 1);
    index_[d] = 0;
  }
  done_ = true;
}

}  // namespace kiln::ref
