// Reference kernels for convolution, pooling and normalisation operators.
//
// Every kernel converts its inputs to double, computes in double and converts
// the result back to the output's element type: this keeps one code path for
// float16/bfloat16/float/double (and the small integer types MaxPool allows)
// and is exact for the integer arithmetic of ConvInteger.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/reference/kernel_registry.hpp"
#include "backends/reference/ops/op_util.hpp"
#include "backends/reference/ops/tensor_common.hpp"

namespace kiln::ref {

using tensor_detail::ints_to_string;
namespace {

// Maximum that propagates NaN, like numpy.
double max_nan(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }

int64_t numel_of(const Dims& d) { return ir::checked_numel(d); }

// ---------------------------------------------------------------------------
// Sliding-window geometry shared by Conv, ConvTranspose, pooling and Col2Im.
// All vectors hold the spatial axes only.

constexpr int64_t kPadding = -1;  // window tap on a padding element
constexpr int64_t kBeyond = -2;   // tap past the end padding (only with ceil_mode)

// For every output position (row-major) and kernel tap (row-major), the flat
// spatial index of the input element it touches, or kPadding / kBeyond.
std::vector<int64_t> window_table(const Geometry& g) {
  const size_t nsp = g.in.size();
  const int64_t out_n = numel_of(g.out), k_n = numel_of(g.kernel);
  std::vector<std::vector<int64_t>> taps(static_cast<size_t>(k_n), std::vector<int64_t>(nsp));
  for (int64_t k = 0; k < k_n; ++k)
    for (int64_t d = int64_t(nsp) - 1, r = k; d >= 0; --d) {
      taps[size_t(k)][size_t(d)] = r % g.kernel[size_t(d)];
      r /= g.kernel[size_t(d)];
    }
  std::vector<int64_t> table(size_t(out_n * k_n));
  std::vector<int64_t> oc(nsp);
  for (int64_t o = 0; o < out_n; ++o) {
    for (int64_t d = int64_t(nsp) - 1, r = o; d >= 0; --d) {
      oc[size_t(d)] = r % g.out[size_t(d)];
      r /= g.out[size_t(d)];
    }
    for (int64_t k = 0; k < k_n; ++k) {
      int64_t flat = 0, status = 0;
      for (size_t d = 0; d < nsp; ++d) {
        const int64_t pos = oc[d] * g.strides[d] - g.pad_begin[d] + taps[size_t(k)][d] * g.dilations[d];
        if (pos < 0 || pos >= g.in[d]) {
          const bool in_pads = pos >= -g.pad_begin[d] && pos < g.in[d] + g.pad_end[d];
          status = (!in_pads || status == kBeyond) ? kBeyond : kPadding;
        }
        flat = flat * g.in[d] + pos;
      }
      table[size_t(o * k_n + k)] = status ? status : flat;
    }
  }
  return table;
}

Dims spatial_dims(const Dims& d) { return Dims(d.begin() + 2, d.end()); }

void require_rank_at_least(const KernelContext& ctx, const Tensor& t, const char* what, int rank) {
  if (t.rank() < rank)
    ctx.fail(std::string(what) + " has shape " + ir::dims_to_string(t.dims()) + ", expected rank >= " + std::to_string(rank) +
             " (N x C x spatial...)");
}

// ---------------------------------------------------------------------------
// Convolutions

struct ConvArgs {
  Dims x_dims, w_dims;
  std::vector<double> x, w, bias;  // bias may be empty
};

// Y[n, m] = bias[m] + sum over the group's channels c and taps k of X * W.
Tensor conv_forward(const KernelContext& ctx, const ConvArgs& a, DType out_type) {
  const int64_t N = a.x_dims[0], C = a.x_dims[1], M = a.w_dims[0];
  const int64_t group = ctx.attr_int("group", 1);
  if (a.w_dims.size() != a.x_dims.size())
    ctx.fail("weights have shape " + ir::dims_to_string(a.w_dims) + ", expected rank " + std::to_string(a.x_dims.size()) +
             " like the input");
  if (group < 1 || C % group != 0 || M % group != 0 || a.w_dims[1] * group != C)
    ctx.fail("group = " + std::to_string(group) + " with input channels " + std::to_string(C) + " and weights " +
             ir::dims_to_string(a.w_dims) + ": expected channels divisible by group and W of shape M x C/group x kernel");
  if (!a.bias.empty() && int64_t(a.bias.size()) != M)
    ctx.fail("bias has " + std::to_string(a.bias.size()) + " values, expected " + std::to_string(M));

  Geometry g = forward_geometry(ctx, spatial_dims(a.x_dims), kernel_shape_of(ctx, spatial_dims(a.w_dims)), false);
  const std::vector<int64_t> table = window_table(g);
  const int64_t in_n = numel_of(g.in), out_n = numel_of(g.out), k_n = numel_of(g.kernel);
  const int64_t Cg = C / group, Mg = M / group;

  Dims y_dims = {N, M};
  y_dims.insert(y_dims.end(), g.out.begin(), g.out.end());
  std::vector<double> y(size_t(numel_of(y_dims)));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) {
      const int64_t first_c = (m / Mg) * Cg;
      // data() + offset: an empty output (out_n 0) has no element to refer to.
      double* yp = y.data() + (n * M + m) * out_n;
      for (int64_t o = 0; o < out_n; ++o) {
        double acc = a.bias.empty() ? 0.0 : a.bias[size_t(m)];
        for (int64_t c = 0; c < Cg; ++c) {
          const double* xp = &a.x[size_t((n * C + first_c + c) * in_n)];
          const double* wp = &a.w[size_t((m * Cg + c) * k_n)];
          const int64_t* tp = table.data() + (o * k_n);
          for (int64_t k = 0; k < k_n; ++k)
            if (tp[k] >= 0) acc += xp[tp[k]] * wp[k];
        }
        yp[o] = acc;
      }
    }
  return from_doubles(out_type, y_dims, y);
}

void check_conv_inputs(const KernelContext& ctx, const Tensor& x, const Tensor& w) {
  require_rank_at_least(ctx, x, "input X", 3);
  require_rank_at_least(ctx, w, "weights W", 3);
}

void conv_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  check_conv_inputs(ctx, x, w);
  require_float(ctx, x, "input X");
  ConvArgs a{x.dims(), w.dims(), to_doubles(x), to_doubles(w), {}};
  if (ctx.has_input(2)) a.bias = to_doubles(ctx.input(2));
  ctx.set_output(0, conv_forward(ctx, a, x.dtype()));
}

// Zero point of a ConvInteger operand: a scalar, or (for W) one per output channel.
std::vector<double> zero_points(const KernelContext& ctx, size_t index, int64_t allowed_per_channel) {
  if (!ctx.has_input(index)) return {0.0};
  const Tensor& z = ctx.input(index);
  if (z.numel() != 1 && z.numel() != allowed_per_channel)
    ctx.fail("zero point input " + std::to_string(index) + " has shape " + ir::dims_to_string(z.dims()) + ", expected a scalar" +
             (allowed_per_channel > 1 ? " or one value per output channel" : ""));
  return to_doubles(z);
}

void conv_integer_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  check_conv_inputs(ctx, x, w);
  for (const Tensor* t : {&x, &w})
    if (t->dtype() != DType::UInt8 && t->dtype() != DType::Int8)
      ctx.fail(std::string("ConvInteger operand has element type ") + ir::dtype_name(t->dtype()) + ", expected uint8 or int8");
  const std::vector<double> xz = zero_points(ctx, 2, 1);
  const std::vector<double> wz = zero_points(ctx, 3, w.dim(0));
  // Shifting by the zero points first makes padding contribute zero.
  ConvArgs a{x.dims(), w.dims(), to_doubles(x), to_doubles(w), {}};
  for (double& v : a.x) v -= xz[0];
  const int64_t per_channel = numel_of(w.dims()) / std::max<int64_t>(1, w.dim(0));
  for (size_t i = 0; i < a.w.size(); ++i) a.w[i] -= wz.size() == 1 ? wz[0] : wz[i / size_t(per_channel)];
  ctx.set_output(0, conv_forward(ctx, a, DType::Int32));
}

// Scatters each input element through the kernel into the output: the adjoint
// of Conv. The window table is built with the roles of input and output swapped.
void conv_transpose_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  check_conv_inputs(ctx, x, w);
  require_float(ctx, x, "input X");
  const size_t nsp = size_t(x.rank() - 2);
  const int64_t N = x.dim(0), C = x.dim(1);
  const int64_t group = ctx.attr_int("group", 1);
  if (w.rank() != x.rank() || group < 1 || C % group != 0 || w.dim(0) != C)
    ctx.fail("weights have shape " + ir::dims_to_string(w.dims()) + " with group " + std::to_string(group) +
             ", expected C x M/group x kernel with C = " + std::to_string(C) + " divisible by group");
  const int64_t Mg = w.dim(1), M = Mg * group, Cg = C / group;

  // Each input position is one "window" over Y: the forward geometry with
  // the roles of input and output swapped; taps past Y's end are dropped.
  Geometry g = transposed_geometry(ctx, spatial_dims(x.dims()), kernel_shape_of(ctx, spatial_dims(w.dims())));
  std::swap(g.in, g.out);
  g.pad_end.assign(nsp, 0);
  const std::vector<int64_t> table = window_table(g);
  const int64_t in_n = numel_of(g.out), out_n = numel_of(g.in), k_n = numel_of(g.kernel);

  const std::vector<double> xv = to_doubles(x), wv = to_doubles(w);
  std::vector<double> bias;
  if (ctx.has_input(2)) {
    bias = to_doubles(ctx.input(2));
    if (int64_t(bias.size()) != M) ctx.fail("bias has " + std::to_string(bias.size()) + " values, expected " + std::to_string(M));
  }
  Dims y_dims = {N, M};
  y_dims.insert(y_dims.end(), g.in.begin(), g.in.end());
  std::vector<double> y(size_t(numel_of(y_dims)));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) {
      double* yp = y.data() + ((n * M + m) * out_n);
      if (!bias.empty()) std::fill(yp, yp + out_n, bias[size_t(m)]);
      const int64_t grp = m / Mg, ml = m % Mg;
      for (int64_t c = grp * Cg; c < (grp + 1) * Cg; ++c) {
        const double* xp = xv.data() + (n * C + c) * in_n;
        const double* wp = wv.data() + (c * Mg + ml) * k_n;
        for (int64_t i = 0; i < in_n; ++i)
          for (int64_t k = 0; k < k_n; ++k) {
            const int64_t idx = table[size_t(i * k_n + k)];
            if (idx >= 0) yp[idx] += xp[i] * wp[k];
          }
      }
    }
  ctx.set_output(0, from_doubles(x.dtype(), y_dims, y));
}

// Col2Im: sums the columns of an im2col matrix back into an image.
void col2im_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Dims image = ctx.input(1).to_int64_vector();
  const Dims block = ctx.input(2).to_int64_vector();
  if (x.rank() != 3 || image.size() != block.size() || image.empty())
    ctx.fail("input has shape " + ir::dims_to_string(x.dims()) + " with image_shape " + ints_to_string(image) +
             " and block_shape " + ints_to_string(block) +
             ", expected N x (C*prod(block)) x L and equally long image/block shapes");
  for (int64_t v : image)
    if (v < 1) ctx.fail("image_shape " + ints_to_string(image) + " has a non-positive size");
  Geometry g = forward_geometry(ctx, image, block, false);
  const int64_t k_n = numel_of(block), out_n = numel_of(g.out), img_n = numel_of(image);
  if (x.dim(1) % k_n != 0 || x.dim(2) != out_n)
    ctx.fail("input has shape " + ir::dims_to_string(x.dims()) + ", expected N x (C*" + std::to_string(k_n) + ") x " +
             std::to_string(out_n) + " for these blocks");
  const int64_t N = x.dim(0), C = x.dim(1) / k_n;
  const std::vector<int64_t> table = window_table(g);
  const std::vector<double> xv = to_doubles(x);
  Dims y_dims = {N, C};
  y_dims.insert(y_dims.end(), image.begin(), image.end());
  std::vector<double> y(size_t(numel_of(y_dims)));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t k = 0; k < k_n; ++k)
        for (int64_t l = 0; l < out_n; ++l) {
          const int64_t idx = table[size_t(l * k_n + k)];
          if (idx >= 0) y[size_t((n * C + c) * img_n + idx)] += xv[size_t(((n * C + c) * k_n + k) * out_n + l)];
        }
  ctx.set_output(0, from_doubles(x.dtype(), y_dims, y));
}

// ---------------------------------------------------------------------------
// Pooling

enum class PoolKind { Max, Average, Lp };

// LpPool/GlobalLpPool's p was a float attribute in opset 1 and an int since.
double lp_order(const KernelContext& ctx) {
  const double p = ctx.opset() < 2 ? ctx.attr_float("p", 2.0f) : double(ctx.attr_int("p", 2));
  if (!(p > 0)) ctx.fail("attribute p = " + std::to_string(p) + ", expected a positive order");
  return p;
}

void pool_kernel(KernelContext& ctx, PoolKind kind) {
  const Tensor& x = ctx.input(0);
  require_rank_at_least(ctx, x, "input X", 3);
  if (kind != PoolKind::Max) require_float(ctx, x, "input X");
  const size_t nsp = size_t(x.rank() - 2);
  Dims kernel = ctx.attr_ints("kernel_shape");
  if (kernel.size() != nsp)
    ctx.fail("attribute kernel_shape = " + ints_to_string(kernel) + ", expected " + std::to_string(nsp) + " sizes for input " +
             ir::dims_to_string(x.dims()));
  const Geometry g = forward_geometry(ctx, spatial_dims(x.dims()), kernel, ctx.attr_int("ceil_mode", 0) != 0);
  const std::vector<int64_t> table = window_table(g);
  const int64_t in_n = numel_of(g.in), out_n = numel_of(g.out), k_n = numel_of(g.kernel);
  const int64_t planes = x.dim(0) * x.dim(1);
  const bool include_pad = ctx.attr_int("count_include_pad", 0) != 0;
  const double p = lp_order(ctx);
  const int64_t storage_order = ctx.attr_int("storage_order", 0);

  // Indices count in column-major order over the spatial axes when storage_order = 1.
  std::vector<int64_t> col_major(static_cast<size_t>(in_n));
  std::vector<int64_t> coords(nsp);
  for (int64_t i = 0; i < in_n; ++i) {
    for (int64_t d = int64_t(nsp) - 1, r = i; d >= 0; --d) {
      coords[size_t(d)] = r % g.in[size_t(d)];
      r /= g.in[size_t(d)];
    }
    for (int64_t d = int64_t(nsp) - 1; d >= 0; --d)
      col_major[size_t(i)] = col_major[size_t(i)] * g.in[size_t(d)] + coords[size_t(d)];
  }

  const std::vector<double> xv = to_doubles(x);
  Dims y_dims = {x.dim(0), x.dim(1)};
  y_dims.insert(y_dims.end(), g.out.begin(), g.out.end());
  std::vector<double> y(size_t(numel_of(y_dims)));
  std::vector<int64_t> indices(kind == PoolKind::Max ? y.size() : 0);
  for (int64_t pl = 0; pl < planes; ++pl) {
    const double* xp = xv.data() + (pl * in_n);
    for (int64_t o = 0; o < out_n; ++o) {
      const int64_t* tp = table.data() + (o * k_n);
      const size_t yi = size_t(pl * out_n + o);
      if (kind == PoolKind::Max) {
        double best = 0;
        int64_t arg = -1;  // the first maximum wins; NaN beats everything
        for (int64_t k = 0; k < k_n; ++k) {
          if (tp[k] < 0) continue;
          const double v = xp[tp[k]];
          if (arg < 0 || (!std::isnan(best) && (v > best || std::isnan(v)))) {
            best = v;
            arg = tp[k];
          }
        }
        if (arg < 0) ctx.fail("a pooling window covers only padding; pads must be smaller than the kernel");
        y[yi] = best;
        indices[yi] = pl * in_n + (storage_order ? col_major[size_t(arg)] : arg);
      } else if (kind == PoolKind::Average) {
        double sum = 0;
        int64_t count = 0;
        for (int64_t k = 0; k < k_n; ++k) {
          if (tp[k] >= 0) sum += xp[tp[k]];
          if (tp[k] >= 0 || (include_pad && tp[k] == kPadding)) ++count;
        }
        y[yi] = count ? sum / double(count) : 0.0;
      } else {
        double sum = 0;
        for (int64_t k = 0; k < k_n; ++k)
          if (tp[k] >= 0) sum += std::pow(std::fabs(xp[tp[k]]), p);
        y[yi] = std::pow(sum, 1.0 / p);
      }
    }
  }
  ctx.set_output(0, from_doubles(x.dtype(), y_dims, y));
  if (kind == PoolKind::Max && ctx.output_wanted(1)) ctx.set_output(1, Tensor::from_vector<int64_t>(y_dims, indices));
}

void max_pool_kernel(KernelContext& ctx) { pool_kernel(ctx, PoolKind::Max); }
void average_pool_kernel(KernelContext& ctx) { pool_kernel(ctx, PoolKind::Average); }
void lp_pool_kernel(KernelContext& ctx) { pool_kernel(ctx, PoolKind::Lp); }

void max_unpool_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  require_rank_at_least(ctx, x, "input X", 3);
  if (ind.dims() != x.dims())
    ctx.fail("indices have shape " + ir::dims_to_string(ind.dims()) + ", expected " + ir::dims_to_string(x.dims()) + " like X");
  const size_t nsp = size_t(x.rank() - 2);
  Dims y_dims;
  if (ctx.has_input(2)) {
    y_dims = ctx.input(2).to_int64_vector();
    if (y_dims.size() != size_t(x.rank()) || y_dims[0] != x.dim(0) || y_dims[1] != x.dim(1))
      ctx.fail("output_shape " + ints_to_string(y_dims) + " must have rank " + std::to_string(x.rank()) +
               " and the batch and channel sizes of X " + ir::dims_to_string(x.dims()));
  } else {
    const Dims kernel = ctx.attr_ints("kernel_shape");
    if (kernel.size() != nsp)
      ctx.fail("attribute kernel_shape = " + ints_to_string(kernel) + ", expected " + std::to_string(nsp) + " sizes");
    const std::vector<int64_t> strides = spatial_attr(ctx, "strides", nsp, 1, 1);
    const std::vector<int64_t> pads = ctx.attr_ints("pads", std::vector<int64_t>(2 * nsp, 0));
    if (pads.size() != 2 * nsp)
      ctx.fail("attribute pads has " + std::to_string(pads.size()) + " values, expected " + std::to_string(2 * nsp));
    y_dims = {x.dim(0), x.dim(1)};
    for (size_t d = 0; d < nsp; ++d) {
      // Attributes are the model's: sizes past int64 are an error, not wraparound.
      int64_t size = 0;
      if (__builtin_mul_overflow(x.dim(int(d) + 2) - 1, strides[d], &size) || __builtin_add_overflow(size, kernel[d], &size) ||
          __builtin_sub_overflow(size, pads[d], &size) || __builtin_sub_overflow(size, pads[d + nsp], &size))
        ctx.fail("the output size of axis " + std::to_string(d + 2) + " (from kernel_shape " + ints_to_string(kernel) +
                 ", strides " + ints_to_string(strides) + " and pads " + ints_to_string(pads) + ") does not fit in int64");
      y_dims.push_back(size);
    }
  }
  for (int64_t v : y_dims)
    if (v < 0) ctx.fail("output shape " + ints_to_string(y_dims) + " has a negative size");
  const std::vector<double> xv = to_doubles(x);
  std::vector<double> y(size_t(numel_of(y_dims)));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t idx = ind.as_int64(i);
    if (idx < 0 || idx >= int64_t(y.size()))
      ctx.fail("index " + std::to_string(idx) + " is out of range for output shape " + ints_to_string(y_dims));
    y[size_t(idx)] = xv[size_t(i)];
  }
  ctx.set_output(0, from_doubles(x.dtype(), y_dims, y));
}

// ---------------------------------------------------------------------------
// Reductions over a subset of axes: global pooling and the normalisations.

// For every element of a tensor of shape `dims`, the flat index of its group:
// the position over the axes with keep[axis] true (others are reduced over).
struct Groups {
  std::vector<int64_t> of;
  int64_t count = 1;
  Dims kept_shape;  // dims with reduced axes set to 1
};

Groups group_by(const Dims& dims, const std::vector<bool>& keep) {
  Groups g;
  g.kept_shape = dims;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (!keep[d]) g.kept_shape[d] = 1;
    g.count *= g.kept_shape[d];
  }
  const int64_t n = numel_of(dims);
  g.of.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t r = i, flat = 0, mult = 1;
    for (int64_t d = int64_t(dims.size()) - 1; d >= 0; --d) {
      const int64_t coord = r % dims[size_t(d)];
      r /= dims[size_t(d)];
      if (keep[size_t(d)]) {
        flat += coord * mult;
        mult *= dims[size_t(d)];
      }
    }
    g.of[size_t(i)] = flat;
  }
  return g;
}

struct Moments {
  std::vector<double> mean, var;  // population variance
};

Moments moments(const std::vector<double>& x, const Groups& g) {
  Moments m{std::vector<double>(size_t(g.count)), std::vector<double>(size_t(g.count))};
  std::vector<int64_t> n(size_t(g.count));
  for (size_t i = 0; i < x.size(); ++i) {
    m.mean[size_t(g.of[i])] += x[i];
    ++n[size_t(g.of[i])];
  }
  for (size_t j = 0; j < m.mean.size(); ++j) m.mean[j] /= double(std::max<int64_t>(1, n[j]));
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = x[i] - m.mean[size_t(g.of[i])];
    m.var[size_t(g.of[i])] += d * d;
  }
  for (size_t j = 0; j < m.var.size(); ++j) m.var[j] /= double(std::max<int64_t>(1, n[j]));
  return m;
}

std::vector<bool> keep_first(size_t rank, size_t count) {
  std::vector<bool> keep(rank, false);
  for (size_t d = 0; d < count && d < rank; ++d) keep[d] = true;
  return keep;
}

void global_pool_kernel(KernelContext& ctx, PoolKind kind) {
  const Tensor& x = ctx.input(0);
  require_rank_at_least(ctx, x, "input X", 3);
  require_float(ctx, x, "input X");
  const Groups g = group_by(x.dims(), keep_first(size_t(x.rank()), 2));
  const std::vector<double> xv = to_doubles(x);
  const double p = lp_order(ctx);
  std::vector<double> y(size_t(g.count), kind == PoolKind::Max ? -std::numeric_limits<double>::infinity() : 0.0);
  for (size_t i = 0; i < xv.size(); ++i) {
    double& acc = y[size_t(g.of[i])];
    if (kind == PoolKind::Max)
      acc = max_nan(acc, xv[i]);
    else if (kind == PoolKind::Average)
      acc += xv[i];
    else
      acc += std::pow(std::fabs(xv[i]), p);
  }
  const double per_group = double(x.numel()) / double(std::max<int64_t>(1, g.count));
  for (double& v : y) {
    if (kind == PoolKind::Average) v /= per_group;
    if (kind == PoolKind::Lp) v = std::pow(v, 1.0 / p);
  }
  ctx.set_output(0, from_doubles(x.dtype(), g.kept_shape, y));
}

void global_max_pool_kernel(KernelContext& ctx) { global_pool_kernel(ctx, PoolKind::Max); }
void global_average_pool_kernel(KernelContext& ctx) { global_pool_kernel(ctx, PoolKind::Average); }
void global_lp_pool_kernel(KernelContext& ctx) { global_pool_kernel(ctx, PoolKind::Lp); }

// Values of a per-group parameter (scale, bias, mean, ...), checked for size.
std::vector<double> per_group_param(const KernelContext& ctx, size_t index, const char* what, int64_t expected) {
  const Tensor& t = ctx.input(index);
  if (t.numel() != expected)
    ctx.fail(std::string(what) + " has shape " + ir::dims_to_string(t.dims()) + ", expected " + std::to_string(expected) +
             " values");
  return to_doubles(t);
}

void batch_norm_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  require_rank_at_least(ctx, x, "input X", 2);
  require_float(ctx, x, "input X");
  const double eps = ctx.attr_float("epsilon", 1e-5f);
  const double momentum = ctx.attr_float("momentum", 0.9f);
  // Before opset 9, spatial = 0 keeps separate statistics per channel *and*
  // spatial position; parameters then have shape C x D1 x ... x Dn.
  const bool per_element = ctx.opset() < 9 && ctx.attr_int("spatial", 1) == 0 && ctx.input(1).numel() != x.dim(1);
  std::vector<bool> keep(size_t(x.rank()), per_element);
  keep[0] = false;
  keep[1] = true;
  const Groups g = group_by(x.dims(), keep);  // group = parameter index
  const int64_t params = g.count;
  const std::vector<double> scale = per_group_param(ctx, 1, "scale", params);
  const std::vector<double> bias = per_group_param(ctx, 2, "B", params);
  std::vector<double> mean = per_group_param(ctx, 3, "input_mean", params);
  std::vector<double> var = per_group_param(ctx, 4, "input_var", params);

  const bool training =
      ctx.opset() >= 14 ? ctx.attr_int("training_mode", 0) != 0 : ctx.output_wanted(1) && ctx.attr_int("is_test", 0) == 0;
  const std::vector<double> xv = to_doubles(x);
  std::vector<double> saved_mean, saved_var;
  if (training) {
    const Moments mo = moments(xv, g);
    saved_mean = mo.mean;
    saved_var = mo.var;
    for (size_t j = 0; j < mean.size(); ++j) {
      mean[j] = mean[j] * momentum + mo.mean[j] * (1 - momentum);
      var[j] = var[j] * momentum + mo.var[j] * (1 - momentum);
    }
  }
  const std::vector<double>& use_mean = training ? saved_mean : mean;
  const std::vector<double>& use_var = training ? saved_var : var;
  std::vector<double> y(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    const size_t j = size_t(g.of[i]);
    y[i] = (xv[i] - use_mean[j]) / std::sqrt(use_var[j] + eps) * scale[j] + bias[j];
  }
  ctx.set_output(0, from_doubles(x.dtype(), x.dims(), y));
  if (!training) return;
  const Dims p_dims = ctx.input(3).dims();
  const DType p_type = ctx.input(3).dtype();
  const std::vector<const std::vector<double>*> extra = {&mean, &var, &saved_mean, &saved_var};
  for (size_t k = 0; k < extra.size(); ++k)
    if (ctx.output_wanted(k + 1)) ctx.set_output(k + 1, from_doubles(p_type, p_dims, *extra[k]));
}

void instance_norm_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  require_rank_at_least(ctx, x, "input X", 3);
  require_float(ctx, x, "input X");
  const double eps = ctx.attr_float("epsilon", 1e-5f);
  const int64_t C = x.dim(1);
  const std::vector<double> scale = per_group_param(ctx, 1, "scale", C);
  const std::vector<double> bias = per_group_param(ctx, 2, "B", C);
  const Groups g = group_by(x.dims(), keep_first(size_t(x.rank()), 2));
  const std::vector<double> xv = to_doubles(x);
  const Moments mo = moments(xv, g);
  std::vector<double> y(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    const size_t j = size_t(g.of[i]), c = j % size_t(C);
    y[i] = (xv[i] - mo.mean[j]) / std::sqrt(mo.var[j] + eps) * scale[c] + bias[c];
  }
  ctx.set_output(0, from_doubles(x.dtype(), x.dims(), y));
}

// Values of `t` broadcast (unidirectionally) to `dims`.
std::vector<double> broadcast_to(const KernelContext& ctx, const Tensor& t, const Dims& dims, const char* what) {
  if (broadcast_shapes(ctx, t.dims(), dims) != dims)
    ctx.fail(std::string(what) + " has shape " + ir::dims_to_string(t.dims()) + ", expected a shape broadcastable to " +
             ir::dims_to_string(dims));
  const std::vector<double> v = to_doubles(t);
  std::vector<double> out;
  out.reserve(size_t(numel_of(dims)));
  for (BroadcastIterator it(dims, {broadcast_strides(t.dims(), dims)}); !it.done(); it.next())
    out.push_back(v[size_t(it.offset(0))]);
  return out;
}

void layer_norm_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  require_float(ctx, x, "input X");
  const int64_t rank = x.rank();
  const int64_t axis = normalize_axis(ctx, ctx.attr_int("axis", -1), rank);
  const double eps = ctx.attr_float("epsilon", 1e-5f);
  const DType stash = DType(ctx.attr_int("stash_type", 1));
  if (!ir::dtype_supported(stash) || !ir::dtype_is_float(stash))
    ctx.fail("stash_type " + std::to_string(int(stash)) + " is not a floating-point type");
  const Dims norm_dims(x.dims().begin() + axis, x.dims().end());
  const std::vector<double> scale = broadcast_to(ctx, ctx.input(1), norm_dims, "Scale");
  const std::vector<double> bias = ctx.has_input(2) ? broadcast_to(ctx, ctx.input(2), norm_dims, "B") : std::vector<double>();
  const Groups g = group_by(x.dims(), keep_first(size_t(rank), size_t(axis)));
  const std::vector<double> xv = to_doubles(x);
  const Moments mo = moments(xv, g);
  const size_t inner = size_t(numel_of(norm_dims));
  std::vector<double> y(xv.size()), inv_std(mo.var.size());
  for (size_t j = 0; j < inv_std.size(); ++j) inv_std[j] = 1.0 / std::sqrt(mo.var[j] + eps);
  for (size_t i = 0; i < xv.size(); ++i) {
    const size_t j = size_t(g.of[i]);
    y[i] = (xv[i] - mo.mean[j]) * inv_std[j] * scale[i % inner] + (bias.empty() ? 0.0 : bias[i % inner]);
  }
  ctx.set_output(0, from_doubles(x.dtype(), x.dims(), y));
  if (ctx.output_wanted(1)) ctx.set_output(1, from_doubles(stash, g.kept_shape, mo.mean));
  if (ctx.output_wanted(2)) ctx.set_output(2, from_doubles(stash, g.kept_shape, inv_std));
}

void mvn_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  require_float(ctx, x, "input X");
  std::vector<bool> keep(size_t(x.rank()), true);
  for (int64_t a : ctx.attr_ints("axes", {0, 2, 3})) keep[size_t(normalize_axis(ctx, a, x.rank()))] = false;
  const Groups g = group_by(x.dims(), keep);
  const std::vector<double> xv = to_doubles(x);
  const Moments mo = moments(xv, g);
  std::vector<double> y(xv.size());
  // The ONNX function body adds its epsilon (1e-9) to the standard deviation.
  for (size_t i = 0; i < xv.size(); ++i) {
    const size_t j = size_t(g.of[i]);
    y[i] = (xv[i] - mo.mean[j]) / (std::sqrt(mo.var[j]) + 1e-9);
  }
  ctx.set_output(0, from_doubles(x.dtype(), x.dims(), y));
}

// Local response normalisation across channels.
void lrn_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  require_rank_at_least(ctx, x, "input X", 2);
  require_float(ctx, x, "input X");
  const int64_t size = ctx.attr_int("size");
  if (size < 1) ctx.fail("attribute size = " + std::to_string(size) + ", expected >= 1");
  const double alpha = ctx.attr_float("alpha", 1e-4f), beta = ctx.attr_float("beta", 0.75f);
  const double bias = ctx.attr_float("bias", 1.0f);
  const int64_t C = x.dim(1), inner = numel_of(spatial_dims(x.dims()));
  const int64_t lo = (size - 1) / 2, hi = size - 1 - lo;  // channels before / after
  const std::vector<double> xv = to_doubles(x);
  std::vector<double> y(xv.size());
  for (int64_t n = 0; n < x.dim(0); ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < inner; ++s) {
        double sq = 0;
        for (int64_t cc = std::max<int64_t>(0, c - lo); cc <= std::min(C - 1, c + hi); ++cc) {
          const double v = xv[size_t((n * C + cc) * inner + s)];
          sq += v * v;
        }
        const size_t i = size_t((n * C + c) * inner + s);
        y[i] = xv[i] / std::pow(bias + alpha / double(size) * sq, beta);
      }
  ctx.set_output(0, from_doubles(x.dtype(), x.dims(), y));
}

}  // namespace

void register_nn_ops(KernelRegistry& r) {
  r.add("Conv", &conv_kernel);
  r.add("ConvInteger", &conv_integer_kernel);
  r.add("ConvTranspose", &conv_transpose_kernel);
  r.add("Col2Im", &col2im_kernel);
  r.add("MaxPool", &max_pool_kernel);
  r.add("AveragePool", &average_pool_kernel);
  r.add("LpPool", &lp_pool_kernel);
  r.add("MaxUnpool", &max_unpool_kernel);
  r.add("GlobalMaxPool", &global_max_pool_kernel);
  r.add("GlobalAveragePool", &global_average_pool_kernel);
  r.add("GlobalLpPool", &global_lp_pool_kernel);
  r.add("BatchNormalization", &batch_norm_kernel);
  r.add("InstanceNormalization", &instance_norm_kernel);
  r.add("LayerNormalization", &layer_norm_kernel);
  r.add("MeanVarianceNormalization", &mvn_kernel);
  r.add("LRN", &lrn_kernel);
}

}  // namespace kiln::ref
