#include "backends/reference/ops/op_util.hpp"
#include "backends/reference/ops/tensor_common.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace kiln::ref {

using tensor_detail::ints_to_string;

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

int64_t pad_source(const std::string& mode, int64_t i, int64_t n) {
  if (i >= 0 && i < n) return i;
  if (mode == "edge") return std::clamp<int64_t>(i, 0, n - 1);
  if (mode == "wrap") return ((i % n) + n) % n;
  if (n == 1) return 0;
  const int64_t period = 2 * (n - 1);
  i = ((i % period) + period) % period;
  return i >= n ? period - i : i;
}

std::vector<int64_t> broadcast_strides(const Dims& in, const Dims& out) {
  std::vector<int64_t> s(out.size(), 0);
  std::vector<int64_t> own = strides_of(in);
  size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) s[lead + i] = in[i] == 1 ? 0 : own[i];
  return s;
}

int64_t normalize_axis(const KernelContext& ctx, int64_t axis, int64_t rank) {
  if (rank == 0) ctx.fail("input is a scalar (rank 0): it has no axis " + std::to_string(axis) + ", expected rank 1 or more");
  if (axis < -rank || axis >= rank)
    ctx.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank) + ", expected [" +
             std::to_string(-rank) + ", " + std::to_string(rank - 1) + "]");
  return axis < 0 ? axis + rank : axis;
}

void require_float(const KernelContext& ctx, const Tensor& t, const char* what) {
  if (!ir::dtype_is_float(t.dtype()))
    ctx.fail(std::string(what) + " has element type " + ir::dtype_name(t.dtype()) + ", expected a floating-point type");
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

// Reads an optional per-spatial-axis attribute, checking its length and sign.
std::vector<int64_t> spatial_attr(const KernelContext& ctx, const char* name, size_t nsp, int64_t fallback, int64_t min_value) {
  std::vector<int64_t> v = ctx.attr_ints(name, std::vector<int64_t>(nsp, fallback));
  if (v.size() != nsp)
    ctx.fail(std::string("attribute ") + name + " has " + std::to_string(v.size()) + " values, expected " + std::to_string(nsp) +
             " (one per spatial axis)");
  for (int64_t x : v)
    if (x < min_value)
      ctx.fail(std::string("attribute ") + name + " = " + ints_to_string(v) + " has a value below " + std::to_string(min_value));
  return v;
}

namespace {

// Window arithmetic on attributes that may hold anything up to the int64
// extremes is done in 128 bits, where it cannot overflow, and every size or
// padding it yields is checked to be one a tensor could have (|v| <= 2^62)
// before it is used: then whatever a kernel computes from them fits too.
using Wide = __int128;
constexpr Wide kMaxSize = Wide(1) << 62;

int64_t checked_size(const KernelContext& ctx, Wide v, const std::string& what, bool may_be_negative = false) {
  if (v > kMaxSize || v < (may_be_negative ? -kMaxSize : 0))
    ctx.fail(what + " would be " + (v < 0 ? (may_be_negative ? "below -2^62" : "negative") : "above 2^62") +
             ": the attributes are out of range");
  return int64_t(v);
}

// The extent of each window, (kernel - 1) * dilation + 1, checked.
void check_extents(const KernelContext& ctx, const Geometry& g) {
  for (size_t d = 0; d < g.kernel.size(); ++d)
    checked_size(ctx, Wide(g.kernel[d] - 1) * g.dilations[d] + 1, "the kernel extent on spatial axis " + std::to_string(d));
}

}  // namespace

// Fills strides/dilations/pads from the attributes (auto_pad included) and
// computes the output size of a forward sliding window (Conv, pooling, Col2Im).
Geometry forward_geometry(const KernelContext& ctx, const Dims& in, const Dims& kernel, bool ceil_mode) {
  const size_t nsp = in.size();
  Geometry g;
  g.in = in;
  g.kernel = kernel;
  for (int64_t k : kernel)
    if (k < 1) ctx.fail("kernel shape " + ints_to_string(kernel) + " has a non-positive size");
  g.strides = spatial_attr(ctx, "strides", nsp, 1, 1);
  g.dilations = spatial_attr(ctx, "dilations", nsp, 1, 1);
  check_extents(ctx, g);
  g.pad_begin.assign(nsp, 0);
  g.pad_end.assign(nsp, 0);
  g.out.assign(nsp, 0);

  const std::string auto_pad = ctx.attr_string("auto_pad", "NOTSET");
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t d = 0; d < nsp; ++d) {
      g.out[d] = int64_t((Wide(in[d]) + g.strides[d] - 1) / g.strides[d]);
      const int64_t total =
          checked_size(ctx, std::max<Wide>(0, Wide(g.out[d] - 1) * g.strides[d] + g.extent(d) - in[d]), "the padding");
      // The odd pixel of padding goes to the end for SAME_UPPER, the start for SAME_LOWER.
      g.pad_begin[d] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      g.pad_end[d] = total - g.pad_begin[d];
    }
    return g;
  }
  if (auto_pad == "NOTSET") {
    std::vector<int64_t> pads = ctx.attr_ints("pads", std::vector<int64_t>(2 * nsp, 0));
    if (pads.size() != 2 * nsp)
      ctx.fail("attribute pads has " + std::to_string(pads.size()) + " values, expected " + std::to_string(2 * nsp) +
               " (begin and end per spatial axis)");
    for (size_t d = 0; d < nsp; ++d) {
      if (pads[d] < 0 || pads[d + nsp] < 0) ctx.fail("attribute pads = " + ints_to_string(pads) + " has a negative value");
      g.pad_begin[d] = pads[d];
      g.pad_end[d] = pads[d + nsp];
    }
  } else if (auto_pad != "VALID") {
    ctx.fail("auto_pad is '" + auto_pad + "', expected NOTSET, SAME_UPPER, SAME_LOWER or VALID");
  }
  for (size_t d = 0; d < nsp; ++d) {
    const int64_t padded = checked_size(ctx, Wide(in[d]) + g.pad_begin[d] + g.pad_end[d],
                                        "the padded input size on spatial axis " + std::to_string(d));
    const int64_t span = padded - g.extent(d);
    if (span < 0)
      ctx.fail("kernel extent " + std::to_string(g.extent(d)) + " on spatial axis " + std::to_string(d) +
               " exceeds the padded input size " + std::to_string(padded));
    const Wide stride = g.strides[d];
    g.out[d] = int64_t((ceil_mode ? (span + stride - 1) / stride : span / stride) + 1);
    // ceil_mode must not add a window that starts inside the end padding.
    if (ceil_mode && Wide(g.out[d] - 1) * stride >= Wide(in[d]) + g.pad_begin[d]) --g.out[d];
  }
  return g;
}

Geometry transposed_geometry(const KernelContext& ctx, const Dims& in, const Dims& kernel) {
  const size_t nsp = in.size();
  Geometry g;
  g.in = in;
  g.kernel = kernel;
  for (int64_t k : kernel)
    if (k < 1) ctx.fail("kernel shape " + ints_to_string(kernel) + " has a non-positive size");
  g.strides = spatial_attr(ctx, "strides", nsp, 1, 1);
  g.dilations = spatial_attr(ctx, "dilations", nsp, 1, 1);
  check_extents(ctx, g);
  const std::vector<int64_t> out_pad = spatial_attr(ctx, "output_padding", nsp, 0, 0);
  const std::string auto_pad = ctx.attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER")
    ctx.fail("auto_pad is '" + auto_pad + "', expected NOTSET, SAME_UPPER, SAME_LOWER or VALID");
  std::vector<int64_t> pads = ctx.attr_ints("pads", std::vector<int64_t>(2 * nsp, 0));
  if (auto_pad == "VALID") pads.assign(2 * nsp, 0);
  if (pads.size() != 2 * nsp)
    ctx.fail("attribute pads has " + std::to_string(pads.size()) + " values, expected " + std::to_string(2 * nsp));
  std::vector<int64_t> out_shape = ctx.attr_ints("output_shape");
  if (out_shape.size() == nsp + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
  if (!out_shape.empty() && out_shape.size() != nsp)
    ctx.fail("attribute output_shape = " + ints_to_string(out_shape) + ", expected " + std::to_string(nsp) + " spatial sizes");
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  // Python-style floor division: output_shape may exceed the full size.
  auto half = [](Wide total) { return total >= 0 || total % 2 == 0 ? total / 2 : total / 2 - 1; };
  g.out.resize(nsp);
  g.pad_begin.resize(nsp);
  g.pad_end.resize(nsp);
  for (size_t d = 0; d < nsp; ++d) {
    const std::string axis = " on spatial axis " + std::to_string(d);
    const Wide full = checked_size(ctx, Wide(g.strides[d]) * (in[d] - 1) + g.extent(d), "the full output size" + axis);
    Wide pad_begin;
    if (!out_shape.empty() || same) {
      const Wide out = !out_shape.empty() ? Wide(out_shape[d]) : Wide(in[d]) * g.strides[d];
      g.out[d] = checked_size(ctx, out, "the output size" + axis);
      const Wide total = full + out_pad[d] - g.out[d];
      // The odd pixel of padding goes to the end for SAME_UPPER, the start otherwise.
      pad_begin = auto_pad == "SAME_UPPER" ? half(total) : total - half(total);
    } else {
      if (pads[d] < 0 || pads[d + nsp] < 0) ctx.fail("attribute pads = " + ints_to_string(pads) + " has a negative value");
      pad_begin = pads[d];
      g.out[d] = checked_size(ctx, full + out_pad[d] - pads[d] - pads[d + nsp],
                              "the output size" + axis + " (check pads and output_padding)");
    }
    g.pad_begin[d] = checked_size(ctx, pad_begin, "the padding at the start" + axis, true);
    g.pad_end[d] = checked_size(ctx, full - g.out[d] - pad_begin, "the padding at the end" + axis, true);
  }
  return g;
}

int64_t roi_align_grid(const KernelContext& ctx, int64_t sampling_ratio, double roi_extent, int64_t cells) {
  if (!std::isfinite(roi_extent)) ctx.fail("a roi (times spatial_scale) is not finite");
  if (sampling_ratio > 0) return sampling_ratio;
  const double grid = std::ceil(roi_extent / double(cells));
  // Beyond this the work check refuses it anyway; here it must still fit an int64.
  return int64_t(std::clamp(grid, -1.0, double(kMaxRoiAlignSamples) + 1));
}

void check_roi_align_work(const KernelContext& ctx, const std::vector<std::pair<int64_t, int64_t>>& grids, int64_t channels,
                          int64_t oh, int64_t ow) {
  double samples = 0;  // in double: a product of four hostile int64s overflows even 128 bits
  for (const auto& [gh, gw] : grids) {
    samples += double(std::max<int64_t>(gh, 0)) * double(std::max<int64_t>(gw, 0)) * double(oh) * double(ow);
    if (samples * double(std::max<int64_t>(channels, 1)) > double(kMaxRoiAlignSamples))
      ctx.fail("sampling_ratio " + std::to_string(ctx.attr_int("sampling_ratio", 0)) + " with " + std::to_string(grids.size()) +
               " rois, " + std::to_string(channels) + " channels and " + std::to_string(oh) + "x" + std::to_string(ow) +
               " cells asks for more than 2^36 samples, Kiln's limit (a grid of " + std::to_string(gh) + "x" +
               std::to_string(gw) + " samples per cell)");
  }
}

Dims kernel_shape_of(const KernelContext& ctx, const Dims& from_weights) {
  if (!ctx.has_attr("kernel_shape")) return from_weights;
  Dims k = ctx.attr_ints("kernel_shape");
  if (k != from_weights)
    ctx.fail("attribute kernel_shape = " + ints_to_string(k) + " does not match the weights' " + ints_to_string(from_weights));
  return k;
}

namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

double RecurrentActivation::operator()(double x) const {
  if (name == "sigmoid") return 1 / (1 + std::exp(-x));
  if (name == "tanh") return std::tanh(x);
  if (name == "relu") return std::max(x, 0.0);
  if (name == "affine") return alpha * x + beta;
  if (name == "leakyrelu") return x >= 0 ? x : alpha * x;
  if (name == "thresholdedrelu") return x > alpha ? x : 0;
  if (name == "scaledtanh") return alpha * std::tanh(beta * x);
  if (name == "hardsigmoid") return std::clamp(alpha * x + beta, 0.0, 1.0);
  if (name == "elu") return x >= 0 ? x : alpha * (std::exp(x) - 1);
  if (name == "softsign") return x / (1 + std::abs(x));
  if (name == "softplus") return std::log1p(std::exp(-std::abs(x))) + std::max(x, 0.0);
  return x;  // unreachable: names are validated when parsed
}

// Parses activations/activation_alpha/activation_beta. Alphas and betas are
// consumed in order by the functions that take them (as onnxruntime does);
// when the lists run out, the defaults of the corresponding ONNX operator apply.
std::vector<RecurrentActivation> recurrent_activations(const KernelContext& ctx, const std::vector<std::string>& defaults,
                                                       int64_t num_directions) {
  std::vector<std::string> names;
  if (ctx.has_attr("activations")) names = ctx.attr_strings("activations");
  size_t per_dir = defaults.size();
  if (names.empty())
    for (int64_t d = 0; d < num_directions; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  else if (names.size() == per_dir && num_directions == 2)
    names.insert(names.end(), names.begin(), names.end());
  if (names.size() != per_dir * size_t(num_directions))
    ctx.fail("activations lists " + std::to_string(names.size()) + " functions, expected " +
             std::to_string(per_dir * size_t(num_directions)));

  std::vector<float> alphas = ctx.attr_floats("activation_alpha"), betas = ctx.attr_floats("activation_beta");
  size_t ai = 0, bi = 0;
  std::vector<RecurrentActivation> out;
  for (const auto& n : names) {
    RecurrentActivation a{lower(n)};
    double default_alpha = 0, default_beta = 0;
    bool uses_alpha = true, uses_beta = false;
    if (a.name == "affine")
      default_alpha = 1, uses_beta = true;
    else if (a.name == "leakyrelu")
      default_alpha = 0.01;
    else if (a.name == "thresholdedrelu" || a.name == "elu")
      default_alpha = 1.0;
    else if (a.name == "scaledtanh")
      default_alpha = 1, default_beta = 1, uses_beta = true;
    else if (a.name == "hardsigmoid")
      default_alpha = 0.2, default_beta = 0.5, uses_beta = true;
    else if (a.name == "sigmoid" || a.name == "tanh" || a.name == "relu" || a.name == "softsign" || a.name == "softplus")
      uses_alpha = false;
    else
      ctx.fail("unknown activation function '" + n +
               "', expected one of Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, "
               "HardSigmoid, Elu, Softsign, Softplus");
    a.alpha = uses_alpha && ai < alphas.size() ? alphas[ai++] : default_alpha;
    a.beta = uses_beta && bi < betas.size() ? betas[bi++] : default_beta;
    out.push_back(a);
  }
  return out;
}

}  // namespace kiln::ref
