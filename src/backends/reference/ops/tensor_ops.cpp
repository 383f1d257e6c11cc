// Reference kernels for shape manipulation, indexing and data movement.
// Kernels that only move elements copy raw bytes, so they serve every dtype.
#include <algorithm>
#include <cstring>

#include "backends/reference/kernel_registry.hpp"
#include "backends/reference/ops/op_util.hpp"
#include "backends/reference/ops/tensor_common.hpp"

namespace kiln::ref {

namespace tensor_detail {

std::string ints_to_string(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s + "]";
}

std::vector<int64_t> unravel(int64_t flat, const Dims& dims) {
  std::vector<int64_t> idx(dims.size());
  for (size_t d = dims.size(); d-- > 0;) {
    idx[d] = dims[d] ? flat % dims[d] : 0;
    flat = dims[d] ? flat / dims[d] : 0;
  }
  return idx;
}

int64_t ravel(const std::vector<int64_t>& idx, const Dims& dims) {
  int64_t flat = 0;
  for (size_t d = 0; d < dims.size(); ++d) flat = flat * dims[d] + idx[d];
  return flat;
}

bool next_index(std::vector<int64_t>& idx, const Dims& dims) {
  for (size_t d = dims.size(); d-- > 0;) {
    if (++idx[d] < dims[d]) return true;
    idx[d] = 0;
  }
  return false;
}

void copy_elem(Tensor& out, int64_t oi, const Tensor& in, int64_t ii) {
  size_t es = ir::dtype_size(in.dtype());
  std::memcpy(static_cast<uint8_t*>(out.raw()) + size_t(oi) * es, static_cast<const uint8_t*>(in.raw()) + size_t(ii) * es, es);
}

int64_t checked_index(const KernelContext& ctx, int64_t i, int64_t dim, const char* what) {
  if (i < -dim || i >= dim)
    ctx.fail(std::string(what) + " index " + std::to_string(i) + " is out of range for a dimension of size " +
             std::to_string(dim) + " (expected [-" + std::to_string(dim) + ", " + std::to_string(dim - 1) + "])");
  return i < 0 ? i + dim : i;
}

int64_t tensor_axis(const KernelContext& ctx, int64_t axis, int64_t rank) {
  if (rank == 0) ctx.fail("input is a scalar, expected rank >= 1 to index axis " + std::to_string(axis));
  return normalize_axis(ctx, axis, rank);
}

static const Tensor& single(const KernelContext& ctx, const Tensor& t, const char* what) {
  if (t.numel() != 1) ctx.fail(std::string(what) + " should hold exactly one value, has shape " + ir::dims_to_string(t.dims()));
  return t;
}

int64_t scalar_int(const KernelContext& ctx, const Tensor& t, const char* what) { return single(ctx, t, what).as_int64(0); }

double scalar_double(const KernelContext& ctx, const Tensor& t, const char* what) { return single(ctx, t, what).as_double(0); }

std::vector<int64_t> normalize_axes(const KernelContext& ctx, const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<int64_t> out;
  for (int64_t a : axes) {
    if (a < -rank || a >= rank) ctx.fail("axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
    int64_t n = a < 0 ? a + rank : a;
    if (std::find(out.begin(), out.end(), n) != out.end())
      ctx.fail("axis " + std::to_string(a) + " appears more than once in " + ints_to_string(axes));
    out.push_back(n);
  }
  return out;
}

std::vector<int64_t> ints_from_attr_or_input(const KernelContext& ctx, const std::string& attr, size_t input, int input_since,
                                             bool* present) {
  if (ctx.opset() < input_since) {
    if (present) *present = ctx.has_attr(attr);
    return ctx.attr_ints(attr);
  }
  if (present) *present = ctx.has_input(input);
  return ctx.has_input(input) ? ctx.input(input).to_int64_vector() : std::vector<int64_t>{};
}

}  // namespace tensor_detail

using namespace tensor_detail;

namespace {

// ---------------------------------------------------------------- shape-only

void reshape_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> shape = ctx.opset() < 5 ? ctx.attr_ints("shape") : ctx.input(1).to_int64_vector();
  bool allowzero = ctx.attr_int("allowzero", 0) != 0;
  Dims out(shape.size());
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t s = shape[i];
    if (s == -1) {
      if (infer >= 0) ctx.fail("shape " + ints_to_string(shape) + " has more than one -1");
      infer = int(i);
      continue;
    }
    if (s == 0 && !allowzero) {
      if (int(i) >= x.rank())
        ctx.fail("shape " + ints_to_string(shape) + " copies dimension " + std::to_string(i) + " (0) but the input has rank " +
                 std::to_string(x.rank()));
      s = x.dim(int(i));
    }
    if (s < 0) ctx.fail("shape " + ints_to_string(shape) + " has a negative dimension other than -1");
    out[i] = s;
    // A product past int64 cannot be the input's element count.
    if (__builtin_mul_overflow(known, s, &known))
      ctx.fail("shape " + ints_to_string(shape) + " has more elements than an int64 counts");
  }
  if (infer >= 0) {
    if (known == 0 || x.numel() % known != 0)
      ctx.fail("cannot infer the -1 in shape " + ints_to_string(shape) + " for an input of shape " +
               ir::dims_to_string(x.dims()));
    out[size_t(infer)] = x.numel() / known;
  }
  if (ir::checked_numel(out) != x.numel())
    ctx.fail("cannot reshape " + ir::dims_to_string(x.dims()) + " into " + ints_to_string(shape) + ": element counts differ");
  ctx.set_output(0, x.reshaped(out));
}

void flatten_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t axis = ctx.attr_int("axis", 1);
  if (axis < -x.rank() || axis > x.rank())
    ctx.fail("axis " + std::to_string(axis) + " is out of range [-rank, rank] for rank " + std::to_string(x.rank()));
  if (axis < 0) axis += x.rank();
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.dim(int(d));
  int64_t inner = 1;
  for (int64_t d = axis; d < x.rank(); ++d) inner *= x.dim(int(d));
  ctx.set_output(0, x.reshaped({outer, inner}));
}

void squeeze_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  bool present = false;
  std::vector<int64_t> axes = normalize_axes(ctx, ints_from_attr_or_input(ctx, "axes", 1, 13, &present), x.rank());
  Dims out;
  for (int d = 0; d < x.rank(); ++d) {
    bool listed = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (listed && x.dim(d) != 1)
      ctx.fail("cannot squeeze axis " + std::to_string(d) + " of size " + std::to_string(x.dim(d)) + " (expected size 1)");
    if (listed || (axes.empty() && x.dim(d) == 1)) continue;
    out.push_back(x.dim(d));
  }
  ctx.set_output(0, x.reshaped(out));
}

void unsqueeze_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> raw = ints_from_attr_or_input(ctx, "axes", 1, 13, nullptr);
  int64_t rank = x.rank() + int64_t(raw.size());
  std::vector<int64_t> axes = normalize_axes(ctx, raw, rank);
  Dims out;
  size_t src = 0;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(axes.begin(), axes.end(), d) != axes.end())
      out.push_back(1);
    else
      out.push_back(x.dims()[src++]);
  }
  ctx.set_output(0, x.reshaped(out));
}

// Any value: a tensor, a sequence or an optional.
void identity_kernel(KernelContext& ctx) { ctx.set_output_value(0, ctx.input_value(0)); }

void shape_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t r = x.rank();
  auto clampi = [&](int64_t v) { return std::clamp(v < 0 ? v + r : v, int64_t(0), r); };
  int64_t start = clampi(ctx.attr_int("start", 0));
  int64_t end = ctx.has_attr("end") ? clampi(ctx.attr_int("end")) : r;
  std::vector<int64_t> dims;
  for (int64_t d = start; d < end; ++d) dims.push_back(x.dims()[size_t(d)]);
  ctx.set_output(0, Tensor::from_vector<int64_t>({int64_t(dims.size())}, dims));
}

void size_kernel(KernelContext& ctx) { ctx.set_output(0, Tensor::scalar<int64_t>(ctx.input(0).numel())); }

// A 1-element tensor holding `v` converted to dtype (ONNX Cast semantics).
Tensor scalar_as(double v, DType dtype) { return Tensor::scalar<double>(v).cast(dtype); }

Tensor filled(DType dtype, const Dims& dims, const Tensor& value) {
  Tensor out(dtype, dims);
  for (int64_t i = 0; i < out.numel(); ++i) copy_elem(out, i, value, 0);
  return out;
}

void constant_of_shape_kernel(KernelContext& ctx) {
  std::vector<int64_t> dims = ctx.input(0).to_int64_vector();
  for (int64_t d : dims)
    if (d < 0) ctx.fail("shape " + ints_to_string(dims) + " has a negative dimension");
  const Tensor* value = ctx.attr_tensor("value");
  if (value && value->numel() != 1)
    ctx.fail("attribute 'value' should hold exactly one element, has " + std::to_string(value->numel()));
  Tensor v = value ? *value : scalar_as(0.0, DType::Float32);
  ctx.set_output(0, filled(v.dtype(), dims, v));
}

void constant_kernel(KernelContext& ctx) {
  if (const Tensor* t = ctx.attr_tensor("value")) {
    ctx.set_output(0, *t);
  } else if (ctx.has_attr("value_float")) {
    ctx.set_output(0, Tensor::scalar<float>(ctx.attr_float("value_float", 0)));
  } else if (ctx.has_attr("value_floats")) {
    auto v = ctx.attr_floats("value_floats");
    ctx.set_output(0, Tensor::from_vector<float>({int64_t(v.size())}, v));
  } else if (ctx.has_attr("value_int")) {
    ctx.set_output(0, Tensor::scalar<int64_t>(ctx.attr_int("value_int", 0)));
  } else if (ctx.has_attr("value_ints")) {
    auto v = ctx.attr_ints("value_ints");
    ctx.set_output(0, Tensor::from_vector<int64_t>({int64_t(v.size())}, v));
  } else {
    ctx.unsupported("only the value, value_float(s) and value_int(s) attributes are supported");
  }
}

void dropout_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  bool training = false;
  float ratio = ctx.attr_float("ratio", 0.5f);
  if (ctx.opset() >= 12) {
    if (ctx.has_input(1)) ratio = float(scalar_double(ctx, ctx.input(1), "ratio"));
    if (ctx.has_input(2)) training = scalar_int(ctx, ctx.input(2), "training_mode") != 0;
  } else if (ctx.opset() < 7) {
    training = ctx.attr_int("is_test", 0) == 0;
  }
  if (training && ratio > 0) ctx.unsupported("Dropout in training mode with ratio > 0 is random");
  ctx.set_output(0, x);
  if (ctx.output_wanted(1)) {
    // Before opset 10 the mask had the input's type.
    DType mt = ctx.opset() < 10 ? x.dtype() : DType::Bool;
    ctx.set_output(1, filled(mt, x.dims(), scalar_as(1.0, mt)));
  }
}

// -------------------------------------------------------------- data moving

void transpose_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int r = x.rank();
  std::vector<int64_t> perm = ctx.attr_ints("perm");
  if (perm.empty())
    for (int d = r - 1; d >= 0; --d) perm.push_back(d);
  if (int(perm.size()) != r) ctx.fail("perm " + ints_to_string(perm) + " should have " + std::to_string(r) + " entries");
  perm = normalize_axes(ctx, perm, r);
  Dims out(static_cast<size_t>(r));
  for (int d = 0; d < r; ++d) out[size_t(d)] = x.dims()[size_t(perm[size_t(d)])];
  std::vector<int64_t> in_strides = strides_of(x.dims());
  ctx.set_output(0, remap(x, out, [&](const std::vector<int64_t>& idx) {
                   int64_t s = 0;
                   for (int d = 0; d < r; ++d) s += idx[size_t(d)] * in_strides[size_t(perm[size_t(d)])];
                   return s;
                 }));
}

void concat_kernel(KernelContext& ctx) {
  if (ctx.num_inputs() == 0) ctx.fail("needs at least one input");
  const Tensor& first = ctx.input(0);
  int64_t r = first.rank();
  int64_t axis = ctx.opset() < 4 ? ctx.attr_int("axis", 1) : ctx.attr_int("axis");
  axis = tensor_axis(ctx, axis, r);
  Dims out = first.dims();
  out[size_t(axis)] = 0;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& t = ctx.input(i);
    bool ok = t.rank() == r && t.dtype() == first.dtype();
    for (int64_t d = 0; ok && d < r; ++d) ok = d == axis || t.dims()[size_t(d)] == first.dims()[size_t(d)];
    if (!ok)
      ctx.fail("input " + std::to_string(i) + " (" + ir::dtype_name(t.dtype()) + " " + ir::dims_to_string(t.dims()) +
               ") does not match input 0 (" + ir::dtype_name(first.dtype()) + " " + ir::dims_to_string(first.dims()) +
               ") outside axis " + std::to_string(axis));
    out[size_t(axis)] += t.dims()[size_t(axis)];
  }
  Tensor result(first.dtype(), out);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= out[size_t(d)];
  for (int64_t d = axis + 1; d < r; ++d) inner *= out[size_t(d)];
  size_t es = ir::dtype_size(first.dtype());
  int64_t offset = 0;  // along the axis, in elements of one outer row
  int64_t row = out[size_t(axis)] * inner;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& t = ctx.input(i);
    int64_t chunk = t.dims()[size_t(axis)] * inner;
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(static_cast<uint8_t*>(result.raw()) + size_t(o * row + offset) * es,
                  static_cast<const uint8_t*>(t.raw()) + size_t(o * chunk) * es, size_t(chunk) * es);
    offset += chunk;
  }
  ctx.set_output(0, result);
}

// Copies x[..., begin:begin+len, ...] along `axis`.
Tensor slice_axis(const Tensor& x, int64_t axis, int64_t begin, int64_t len) {
  Dims out = x.dims();
  out[size_t(axis)] = len;
  std::vector<int64_t> strides = strides_of(x.dims());
  return remap(x, out, [&](const std::vector<int64_t>& idx) {
    int64_t s = 0;
    for (size_t d = 0; d < idx.size(); ++d) s += (idx[d] + (int64_t(d) == axis ? begin : 0)) * strides[d];
    return s;
  });
}

void split_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t axis = tensor_axis(ctx, ctx.attr_int("axis", 0), x.rank());
  int64_t dim = x.dims()[size_t(axis)];
  std::vector<int64_t> split;
  // Opset 1 accepted the sizes as an input too; 2-12 only as an attribute.
  if ((ctx.opset() >= 13 || ctx.opset() < 2) && ctx.has_input(1))
    split = ctx.input(1).to_int64_vector();
  else if (ctx.opset() < 13)
    split = ctx.attr_ints("split");
  int64_t n = int64_t(ctx.num_outputs());
  if (split.empty()) {
    if (ctx.opset() >= 18 && ctx.has_attr("num_outputs")) {
      n = ctx.attr_int("num_outputs");
      if (n <= 0) ctx.fail("num_outputs should be positive, is " + std::to_string(n));
      int64_t chunk = (dim + n - 1) / n;  // the last chunk may be smaller
      for (int64_t i = 0; i < n; ++i) split.push_back(std::max<int64_t>(0, std::min(chunk, dim - i * chunk)));
    } else {
      if (n <= 0 || dim % n != 0)
        ctx.fail("axis of size " + std::to_string(dim) + " cannot be split evenly into " + std::to_string(n) + " outputs");
      split.assign(size_t(n), dim / n);
    }
  }
  if (int64_t(split.size()) != n)
    ctx.fail("split " + ints_to_string(split) + " should have one entry per output (" + std::to_string(n) + ")");
  int64_t total = 0;
  for (int64_t s : split) {
    if (s < 0) ctx.fail("split " + ints_to_string(split) + " has a negative size");
    // Compared before adding, so that huge sizes cannot overflow the total.
    if (s > dim - total) ctx.fail("split " + ints_to_string(split) + " sums to more than the axis size " + std::to_string(dim));
    total += s;
  }
  if (total != dim)
    ctx.fail("split " + ints_to_string(split) + " sums to " + std::to_string(total) + ", expected the axis size " +
             std::to_string(dim));
  int64_t begin = 0;
  for (size_t i = 0; i < split.size(); ++i) {
    if (ctx.output_wanted(i)) ctx.set_output(i, slice_axis(x, axis, begin, split[i]));
    begin += split[i];
  }
}

}  // namespace

SliceWindow slice_window(const KernelContext& ctx, const Dims& in, const std::vector<int64_t>& starts,
                         const std::vector<int64_t>& ends, std::vector<int64_t> axes, std::vector<int64_t> steps) {
  const int64_t r = int64_t(in.size());
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    ctx.fail("starts " + ints_to_string(starts) + ", ends " + ints_to_string(ends) + ", axes " + ints_to_string(axes) +
             " and steps " + ints_to_string(steps) + " should have the same length");
  axes = normalize_axes(ctx, axes, r);
  SliceWindow w;
  w.first.assign(size_t(r), 0);
  w.step.assign(size_t(r), 1);
  w.out = in;
  for (size_t i = 0; i < axes.size(); ++i) {
    size_t a = size_t(axes[i]);
    int64_t dim = in[a], st = steps[i], s = starts[i], e = ends[i];
    if (st == 0) ctx.fail("slice step for axis " + std::to_string(a) + " is 0 (expected nonzero)");
    w.step[a] = st;
    if (dim == 0) continue;
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    int64_t count;
    if (st > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      count = e > s ? int64_t((__int128(e) - s + st - 1) / st) : 0;  // 128 bits: a step may be INT64_MAX
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      count = s > e ? int64_t((__int128(s) - e - st - 1) / -__int128(st)) : 0;  // and INT64_MIN
    }
    w.first[a] = s;
    w.out[a] = count;
  }
  return w;
}

namespace {

void slice_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (ctx.opset() < 10) {
    starts = ctx.attr_ints("starts");
    ends = ctx.attr_ints("ends");
    axes = ctx.attr_ints("axes");
  } else {
    starts = ctx.input(1).to_int64_vector();
    ends = ctx.input(2).to_int64_vector();
    if (ctx.has_input(3)) axes = ctx.input(3).to_int64_vector();
    if (ctx.has_input(4)) steps = ctx.input(4).to_int64_vector();
  }
  const SliceWindow w = slice_window(ctx, x.dims(), starts, ends, axes, steps);
  std::vector<int64_t> strides = strides_of(x.dims());
  ctx.set_output(0, remap(x, w.out, [&](const std::vector<int64_t>& idx) {
                   int64_t s = 0;
                   for (size_t d = 0; d < idx.size(); ++d) s += (w.first[d] + idx[d] * w.step[d]) * strides[d];
                   return s;
                 }));
}

void expand_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> shape = ctx.input(1).to_int64_vector();
  for (int64_t d : shape)
    if (d < 0) ctx.fail("shape " + ints_to_string(shape) + " has a negative dimension");
  Dims out = broadcast_shapes(ctx, x.dims(), shape);
  Tensor result(x.dtype(), out);
  int64_t o = 0;
  for (BroadcastIterator it(out, {broadcast_strides(x.dims(), out)}); !it.done(); it.next())
    copy_elem(result, o++, x, it.offset(0));
  ctx.set_output(0, result);
}

void tile_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> repeats = ctx.input(1).to_int64_vector();
  if (int64_t(repeats.size()) != x.rank())
    ctx.fail("repeats " + ints_to_string(repeats) + " should have one entry per input axis (" + std::to_string(x.rank()) + ")");
  Dims out = x.dims();
  for (size_t d = 0; d < out.size(); ++d) {
    if (repeats[d] < 0) ctx.fail("repeats " + ints_to_string(repeats) + " has a negative entry");
    out[d] = ir::checked_numel({out[d], repeats[d]});
  }
  std::vector<int64_t> strides = strides_of(x.dims());
  ctx.set_output(0, remap(x, out, [&](const std::vector<int64_t>& idx) {
                   int64_t s = 0;
                   for (size_t d = 0; d < idx.size(); ++d) s += (idx[d] % x.dims()[d]) * strides[d];
                   return s;
                 }));
}

void pad_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t r = x.rank();
  std::string mode = ctx.attr_string("mode", "constant");
  std::vector<int64_t> pads;
  Tensor value = scalar_as(0.0, x.dtype());
  std::vector<int64_t> axes;
  if (ctx.opset() < 11) {
    pads = ctx.opset() < 2 ? ctx.attr_ints("paddings") : ctx.attr_ints("pads");
    value = scalar_as(ctx.attr_float("value", 0.0f), x.dtype());
  } else {
    pads = ctx.input(1).to_int64_vector();
    if (ctx.has_input(2) && ctx.input(2).numel() > 0) {
      if (ctx.input(2).dtype() != x.dtype())
        ctx.fail(std::string("constant_value should have the input's type ") + ir::dtype_name(x.dtype()));
      value = ctx.input(2);
    }
    if (ctx.has_input(3)) axes = normalize_axes(ctx, ctx.input(3).to_int64_vector(), r);
  }
  if (axes.empty())
    for (int64_t d = 0; d < r; ++d) axes.push_back(d);
  if (pads.size() != 2 * axes.size())
    ctx.fail("pads " + ints_to_string(pads) + " should have " + std::to_string(2 * axes.size()) + " entries");
  std::vector<int64_t> begin(size_t(r), 0);
  Dims out = x.dims();
  for (size_t i = 0; i < axes.size(); ++i) {
    size_t a = size_t(axes[i]);
    begin[a] = pads[i];
    // In 128 bits: pads may hold anything up to the int64 extremes. Pads and
    // sizes within 2^62 keep every shifted coordinate within int64.
    const __int128 size = __int128(out[a]) + pads[i] + pads[i + axes.size()], limit = __int128(1) << 62;
    if (size < 0) ctx.fail("pads " + ints_to_string(pads) + " crop axis " + std::to_string(a) + " below size 0");
    if (size > limit || pads[i] > limit || pads[i] < -limit || pads[i + axes.size()] > limit || pads[i + axes.size()] < -limit)
      ctx.fail("pads " + ints_to_string(pads) + " hold or make a size beyond 2^62 on axis " + std::to_string(a));
    out[a] = int64_t(size);
  }
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    ctx.fail("mode '" + mode + "' should be one of constant, reflect, edge, wrap");
  if (mode != "constant")
    for (size_t d = 0; d < size_t(r); ++d)
      if (x.dims()[d] == 0 && out[d] > 0) ctx.fail("mode '" + mode + "' cannot pad axis " + std::to_string(d) + " of size 0");
  std::vector<int64_t> strides = strides_of(x.dims());
  ctx.set_output(0, remap(
                        x, out,
                        [&](const std::vector<int64_t>& idx) {
                          int64_t s = 0;
                          for (size_t d = 0; d < idx.size(); ++d) {
                            const int64_t n = x.dims()[d], i = idx[d] - begin[d];
                            if ((i < 0 || i >= n) && mode == "constant") return int64_t(-1);
                            s += pad_source(mode, i, n) * strides[d];
                          }
                          return s;
                        },
                        &value));
}

void center_crop_pad_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> shape = ctx.input(1).to_int64_vector();
  std::vector<int64_t> axes = ctx.attr_ints("axes");
  if (axes.empty())
    for (int64_t d = 0; d < x.rank(); ++d) axes.push_back(d);
  axes = normalize_axes(ctx, axes, x.rank());
  if (shape.size() != axes.size())
    ctx.fail("shape " + ints_to_string(shape) + " should have one entry per axis (" + std::to_string(axes.size()) + ")");
  Dims out = x.dims();
  std::vector<int64_t> shift(out.size(), 0);  // output index - input index
  for (size_t i = 0; i < axes.size(); ++i) {
    size_t a = size_t(axes[i]);
    if (shape[i] < 0) ctx.fail("shape " + ints_to_string(shape) + " has a negative entry");
    int64_t n = x.dims()[a];
    shift[a] = shape[i] >= n ? (shape[i] - n) / 2 : -((n - shape[i]) / 2);
    out[a] = shape[i];
  }
  std::vector<int64_t> strides = strides_of(x.dims());
  ctx.set_output(0, remap(x, out, [&](const std::vector<int64_t>& idx) {
                   int64_t s = 0;
                   for (size_t d = 0; d < idx.size(); ++d) {
                     int64_t i = idx[d] - shift[d];
                     if (i < 0 || i >= x.dims()[d]) return int64_t(-1);
                     s += i * strides[d];
                   }
                   return s;
                 }));
}

void depth_to_space_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t b = ctx.attr_int("blocksize");
  bool crd = ctx.attr_string("mode", "DCR") == "CRD";
  // b * b is compared with the channels before it is computed: it cannot overflow.
  if (x.rank() != 4 || b <= 0 || (x.dim(1) > 0 && (b > x.dim(1) / b || x.dim(1) % (b * b) != 0)))
    ctx.fail("expected a 4-D input whose channels (" + ir::dims_to_string(x.dims()) + ") divide by blocksize^2 with blocksize " +
             std::to_string(b) + " > 0");
  int64_t C = x.dim(1) ? x.dim(1) / (b * b) : 0, H = x.dim(2), W = x.dim(3);
  Dims out{x.dim(0), C, ir::checked_numel({H, b}), ir::checked_numel({W, b})};
  ctx.set_output(0, remap(x, out, [&](const std::vector<int64_t>& i) {
                   int64_t h = i[2] / b, bi = i[2] % b, w = i[3] / b, bj = i[3] % b;
                   int64_t c = crd ? i[1] * b * b + bi * b + bj : (bi * b + bj) * C + i[1];
                   return ((i[0] * x.dim(1) + c) * H + h) * W + w;
                 }));
}

void space_to_depth_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t b = ctx.attr_int("blocksize");
  if (x.rank() != 4 || b <= 0 || x.dim(2) % b != 0 || x.dim(3) % b != 0)
    ctx.fail("expected a 4-D input whose height and width (" + ir::dims_to_string(x.dims()) + ") divide by blocksize " +
             std::to_string(b) + " > 0");
  int64_t C = x.dim(1), H = x.dim(2), W = x.dim(3);
  Dims out{x.dim(0), ir::checked_numel({C, b, b}), H / b, W / b};
  ctx.set_output(0, remap(x, out, [&](const std::vector<int64_t>& i) {
                   int64_t c = i[1] % C, blk = i[1] / C, bi = blk / b, bj = blk % b;
                   return ((i[0] * C + c) * H + i[2] * b + bi) * W + i[3] * b + bj;
                 }));
}

void reverse_sequence_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> lens = ctx.input(1).to_int64_vector();
  int64_t batch_axis = ctx.attr_int("batch_axis", 1), time_axis = ctx.attr_int("time_axis", 0);
  if (x.rank() < 2 || (batch_axis != 0 && batch_axis != 1) || time_axis != 1 - batch_axis)
    ctx.fail("expected rank >= 2 and batch_axis/time_axis to be 0 and 1 in some order");
  if (int64_t(lens.size()) != x.dim(int(batch_axis)))
    ctx.fail("sequence_lens has " + std::to_string(lens.size()) + " entries, expected the batch size " +
             std::to_string(x.dim(int(batch_axis))));
  for (int64_t l : lens)
    if (l < 0 || l > x.dim(int(time_axis)))
      ctx.fail("sequence length " + std::to_string(l) + " is outside [0, " + std::to_string(x.dim(int(time_axis))) + "]");
  std::vector<int64_t> strides = strides_of(x.dims());
  ctx.set_output(0, remap(x, x.dims(), [&](const std::vector<int64_t>& idx) {
                   std::vector<int64_t> i = idx;
                   int64_t len = lens[size_t(idx[size_t(batch_axis)])];
                   int64_t& t = i[size_t(time_axis)];
                   if (t < len) t = len - 1 - t;
                   return ravel(i, x.dims());
                 }));
}

void trilu_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.rank() < 2) ctx.fail("expected rank >= 2, got " + std::to_string(x.rank()));
  int64_t k = ctx.has_input(1) ? scalar_int(ctx, ctx.input(1), "k") : 0;
  bool upper = ctx.attr_int("upper", 1) != 0;
  int r = x.rank();
  ctx.set_output(0, remap(x, x.dims(), [&](const std::vector<int64_t>& idx) {
                   int64_t diff = idx[size_t(r - 1)] - idx[size_t(r - 2)];
                   bool keep = upper ? diff >= k : diff <= k;
                   return keep ? ravel(idx, x.dims()) : int64_t(-1);
                 }));
}

void where_kernel(KernelContext& ctx) {
  const Tensor& c = ctx.input(0);
  const Tensor& a = ctx.input(1);
  const Tensor& b = ctx.input(2);
  if (c.dtype() != DType::Bool) ctx.fail("condition should be bool");
  if (a.dtype() != b.dtype()) ctx.fail("X and Y should have the same type");
  Dims out = broadcast_shapes(ctx, broadcast_shapes(ctx, c.dims(), a.dims()), b.dims());
  Tensor result(a.dtype(), out);
  const bool* cond = c.data<bool>();
  int64_t o = 0;
  for (BroadcastIterator it(
           out, {broadcast_strides(c.dims(), out), broadcast_strides(a.dims(), out), broadcast_strides(b.dims(), out)});
       !it.done(); it.next(), ++o) {
    if (cond[it.offset(0)])
      copy_elem(result, o, a, it.offset(1));
    else
      copy_elem(result, o, b, it.offset(2));
  }
  ctx.set_output(0, result);
}

void compress_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& cond = ctx.input(1);
  if (cond.rank() != 1) ctx.fail("condition should be 1-D, is " + ir::dims_to_string(cond.dims()));
  Tensor src = x;
  int64_t axis = 0;
  if (ctx.has_attr("axis"))
    axis = tensor_axis(ctx, ctx.attr_int("axis"), x.rank());
  else
    src = x.reshaped({x.numel()});
  int64_t dim = src.dims()[size_t(axis)];
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < cond.numel(); ++i) {
    if (cond.as_double(i) == 0) continue;
    if (i >= dim) ctx.fail("condition selects index " + std::to_string(i) + " beyond the axis size " + std::to_string(dim));
    keep.push_back(i);
  }
  Dims out = src.dims();
  out[size_t(axis)] = int64_t(keep.size());
  std::vector<int64_t> strides = strides_of(src.dims());
  ctx.set_output(0, remap(src, out, [&](const std::vector<int64_t>& idx) {
                   int64_t s = 0;
                   for (size_t d = 0; d < idx.size(); ++d) s += (int64_t(d) == axis ? keep[size_t(idx[d])] : idx[d]) * strides[d];
                   return s;
                 }));
}

void nonzero_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Dims dims = x.rank() == 0 ? Dims{1} : x.dims();
  std::vector<int64_t> hits;
  for (int64_t i = 0; i < x.numel(); ++i)
    if (x.as_double(i) != 0) hits.push_back(i);
  int64_t n = int64_t(hits.size());
  Tensor out(DType::Int64, {int64_t(dims.size()), n});
  int64_t* o = out.data<int64_t>();
  for (int64_t j = 0; j < n; ++j) {
    std::vector<int64_t> idx = unravel(hits[size_t(j)], dims);
    for (size_t d = 0; d < dims.size(); ++d) o[int64_t(d) * n + j] = idx[d];
  }
  ctx.set_output(0, out);
}

}  // namespace

void register_tensor_ops(KernelRegistry& r) {
  r.add("Reshape", &reshape_kernel);
  r.add("Flatten", &flatten_kernel);
  r.add("Squeeze", &squeeze_kernel);
  r.add("Unsqueeze", &unsqueeze_kernel);
  r.add("Identity", &identity_kernel);
  r.add("Shape", &shape_kernel);
  r.add("Size", &size_kernel);
  r.add("ConstantOfShape", &constant_of_shape_kernel);
  r.add("Constant", &constant_kernel);
  r.add("Dropout", &dropout_kernel);
  r.add("Transpose", &transpose_kernel);
  r.add("Concat", &concat_kernel);
  r.add("Split", &split_kernel);
  r.add("Slice", &slice_kernel);
  r.add("Expand", &expand_kernel);
  r.add("Tile", &tile_kernel);
  r.add("Pad", &pad_kernel);
  r.add("CenterCropPad", &center_crop_pad_kernel);
  r.add("DepthToSpace", &depth_to_space_kernel);
  r.add("SpaceToDepth", &space_to_depth_kernel);
  r.add("ReverseSequence", &reverse_sequence_kernel);
  r.add("Trilu", &trilu_kernel);
  r.add("Where", &where_kernel);
  r.add("Compress", &compress_kernel);
  r.add("NonZero", &nonzero_kernel);
  register_tensor_value_ops(r);
}

}  // namespace kiln::ref
