// Reference kernels for image operators: Resize/Upsample, GridSample,
// RoiAlign and NonMaxSuppression.
//
// Values are computed in double and converted back to the input's element
// type (rounded to nearest for integer images).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backends/reference/kernel_registry.hpp"
#include "backends/reference/ops/op_util.hpp"
#include "backends/reference/resize_plan.hpp"

namespace kiln::ref {
namespace {

void require_shape(const KernelContext& ctx, const Tensor& t, const char* what, const Dims& expected, const char* description) {
  if (t.dims() != expected)
    ctx.fail(std::string(what) + " has shape " + ir::dims_to_string(t.dims()) + ", expected " + description + " = " +
             ir::dims_to_string(expected));
}

// Optional inputs given as empty tensors count as absent (Resize's scales/roi).
bool present(const KernelContext& ctx, size_t i) { return ctx.has_input(i) && ctx.input(i).numel() > 0; }

double cubic_kernel(double x, double a) {
  x = std::fabs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

// ---------------------------------------------------------------------------
// Resize / Upsample

struct ResizeParams {
  std::string mode = "nearest";
  std::string coord = "half_pixel";
  std::string nearest_mode = "round_prefer_floor";
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0;
  bool antialias = false;
};

using Tap = ResizeTap;

// Source coordinate of output coordinate x along one axis.
double source_coordinate(const KernelContext& ctx, const ResizeParams& p, int64_t x, double scale, int64_t in_len,
                         int64_t out_len, double roi_start, double roi_end) {
  // The conformance data (the ONNX reference implementation) uses the
  // unrounded output length scale * in_len in the align_corners and
  // tf_crop_and_resize formulas.
  double out_len_f = scale * double(in_len);
  const std::string& c = p.coord;
  if (c == "half_pixel") return (x + 0.5) / scale - 0.5;
  if (c == "half_pixel_symmetric") {
    double adjustment = double(out_len) / out_len_f;
    double offset = double(in_len) / 2 * (1 - adjustment);
    return offset + (x + 0.5) / scale - 0.5;
  }
  if (c == "pytorch_half_pixel") return out_len > 1 ? (x + 0.5) / scale - 0.5 : 0;
  if (c == "align_corners") return out_len == 1 ? 0 : x * double(in_len - 1) / (out_len_f - 1);
  if (c == "asymmetric") return x / scale;
  if (c == "tf_half_pixel_for_nn") return (x + 0.5) / scale;
  if (c == "tf_crop_and_resize")
    return out_len > 1 ? roi_start * double(in_len - 1) + x * (roi_end - roi_start) * double(in_len - 1) / (out_len_f - 1)
                       : 0.5 * (roi_start + roi_end) * double(in_len - 1);
  ctx.fail("coordinate_transformation_mode is '" + c +
           "', expected half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric, "
           "tf_half_pixel_for_nn or tf_crop_and_resize");
}

int64_t nearest_index(const KernelContext& ctx, const std::string& mode, double x, double scale) {
  if (mode == "round_prefer_floor") return x - std::floor(x) == 0.5 ? int64_t(std::floor(x)) : int64_t(std::round(x));
  if (mode == "round_prefer_ceil") return int64_t(std::floor(x + 0.5));
  if (mode == "floor") return int64_t(std::floor(x));
  if (mode == "ceil") return int64_t(std::ceil(x));
  // Resize-10 and Upsample have no nearest_mode; like onnxruntime they take
  // floor when upsampling and ceil when downsampling.
  if (mode == "simple") return scale < 1 ? int64_t(std::ceil(x)) : int64_t(std::floor(x));
  ctx.fail("nearest_mode is '" + mode + "', expected round_prefer_floor, round_prefer_ceil, floor or ceil");
}

// The taps of every output coordinate along one axis; an empty list marks a
// coordinate outside the crop (tf_crop_and_resize), which gets the
// extrapolation value.
std::vector<std::vector<Tap>> axis_taps(const KernelContext& ctx, const ResizeParams& p, double scale, int64_t in_len,
                                        int64_t out_len, double roi_start, double roi_end) {
  std::vector<std::vector<Tap>> taps(static_cast<size_t>(out_len));
  auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i, 0, in_len - 1); };
  for (int64_t o = 0; o < out_len; ++o) {
    double x = source_coordinate(ctx, p, o, scale, in_len, out_len, roi_start, roi_end);
    if (!std::isfinite(x) || (p.coord == "tf_crop_and_resize" && (x < 0 || x > double(in_len - 1)))) continue;
    std::vector<Tap>& t = taps[size_t(o)];
    if (p.mode == "nearest") {
      t.push_back({clamp(nearest_index(ctx, p.nearest_mode, x, scale)), 1.0});
      continue;
    }
    // Linear and cubic filters; with antialias a downscaling filter is
    // stretched by 1/scale so that every input sample contributes.
    bool cubic = p.mode == "cubic";
    double radius = cubic ? 2 : 1;
    double s = p.antialias && scale < 1 ? scale : 1;
    int64_t start = int64_t(std::floor(-radius / s)) + 1;
    int64_t base = int64_t(std::ceil(x)) - 1;
    double sum = 0;
    for (int64_t i = base + start; i <= base + 1 - start; ++i) {
      double arg = s * (double(i) - x);
      double w = cubic ? cubic_kernel(arg, p.cubic_a) : std::max(0.0, 1 - std::fabs(arg));
      if (p.exclude_outside && (i < 0 || i >= in_len)) w = 0;
      sum += w;
      t.push_back({i, w});
    }
    for (Tap& tap : t) tap.weight = sum != 0 ? tap.weight / sum : 0, tap.index = clamp(tap.index);
  }
  return taps;
}

// A resized axis's size, which scales (up to infinity) may put beyond any int64.
int64_t resized_size(const KernelContext& ctx, double size, const char* from) {
  if (!(size <= double(int64_t(1) << 62))) ctx.fail(std::string(from) + " would make a resized axis larger than 2^62");
  return int64_t(size);
}

ResizePlan plan(const KernelContext& ctx, const ResizeParams& p, const std::vector<double>& scales_in,
                const std::vector<int64_t>& sizes_in, std::vector<int64_t> axes, const std::vector<double>& roi_in) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  if (p.mode != "nearest" && p.mode != "linear" && p.mode != "cubic")
    ctx.fail("mode is '" + p.mode + "', expected nearest, linear or cubic");
  if (axes.empty())
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  std::vector<bool> seen(size_t(rank), false);
  for (int64_t& a : axes) {
    a = normalize_axis(ctx, a, rank);
    if (a >= rank || seen[size_t(a)]) ctx.fail("axes lists axis " + std::to_string(a) + " twice or out of range");
    seen[size_t(a)] = true;
  }
  const size_t k = axes.size();
  if (!scales_in.empty() && !sizes_in.empty()) ctx.fail("both scales and sizes are given, expected only one");
  if (scales_in.empty() && sizes_in.empty()) ctx.fail("neither scales nor sizes is given, expected one of them");
  if (!roi_in.empty() && roi_in.size() != 2 * k)
    ctx.fail("roi has " + std::to_string(roi_in.size()) + " values, expected " + std::to_string(2 * k));

  const Dims& in_dims = x.dims();
  Dims out_dims = in_dims;
  std::vector<double> scale(size_t(rank), 1.0), roi_start(size_t(rank), 0.0), roi_end(size_t(rank), 1.0);
  if (!sizes_in.empty()) {
    if (sizes_in.size() != k) ctx.fail("sizes has " + std::to_string(sizes_in.size()) + " values, expected " + std::to_string(k));
    std::string policy = ctx.attr_string("keep_aspect_ratio_policy", "stretch");
    if (policy != "stretch" && policy != "not_larger" && policy != "not_smaller")
      ctx.fail("keep_aspect_ratio_policy is '" + policy + "', expected stretch, not_larger or not_smaller");
    double common = policy == "not_larger" ? std::numeric_limits<double>::infinity() : 0;
    for (size_t i = 0; i < k; ++i) {
      size_t a = size_t(axes[i]);
      if (sizes_in[i] < 0) ctx.fail("sizes holds negative size " + std::to_string(sizes_in[i]));
      if (in_dims[a] == 0 && sizes_in[i] != 0) ctx.fail("cannot resize an axis of length 0 to a non-zero length");
      scale[a] = in_dims[a] == 0 ? 1.0 : double(sizes_in[i]) / double(in_dims[a]);
      out_dims[a] = sizes_in[i];
      common = policy == "not_larger" ? std::min(common, scale[a]) : std::max(common, scale[a]);
    }
    if (policy != "stretch")
      for (int64_t a : axes) {
        scale[size_t(a)] = common;
        out_dims[size_t(a)] = resized_size(ctx, std::floor(common * double(in_dims[size_t(a)]) + 0.5), "sizes");
      }
  } else {
    if (scales_in.size() != k)
      ctx.fail("scales has " + std::to_string(scales_in.size()) + " values, expected " + std::to_string(k));
    for (size_t i = 0; i < k; ++i) {
      size_t a = size_t(axes[i]);
      if (!(scales_in[i] > 0)) ctx.fail("scales holds " + std::to_string(scales_in[i]) + ", expected positive values");
      scale[a] = scales_in[i];
      out_dims[a] = resized_size(ctx, std::floor(double(in_dims[a]) * scales_in[i]), "scales");
    }
  }
  if (!roi_in.empty())
    for (size_t i = 0; i < k; ++i) {
      roi_start[size_t(axes[i])] = roi_in[i];
      roi_end[size_t(axes[i])] = roi_in[k + i];
    }

  int64_t out_numel = ir::checked_numel(out_dims);
  if (out_numel > 0 && x.numel() == 0) ctx.fail("cannot resize an empty input to a non-empty output");
  // Before the taps, which grow with the output's sizes (and the compiled
  // backends plan here, before any output exists).
  if (__int128(out_numel) * __int128(ir::dtype_size(x.dtype())) > __int128(1) << 62)
    ctx.fail("the resized output of shape " + ir::dims_to_string(out_dims) + " would take more than 2^62 bytes");

  ResizePlan result;
  result.out_dims = out_dims;
  result.extrapolation = p.extrapolation;
  result.taps.resize(static_cast<size_t>(rank));
  for (size_t d = 0; d < size_t(rank); ++d)
    result.taps[d] = axis_taps(ctx, p, scale[d], in_dims[d], out_dims[d], roi_start[d], roi_end[d]);
  return result;
}

// Sums the tensor product of the plan's taps, in double.
void apply(KernelContext& ctx, const ResizePlan& plan) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  const Dims& in_dims = x.dims();
  const Dims& out_dims = plan.out_dims;
  const auto& taps = plan.taps;
  const int64_t out_numel = ir::checked_numel(out_dims);
  std::vector<double> in = to_doubles(x), out(static_cast<size_t>(out_numel));
  std::vector<int64_t> in_strides = strides_of(in_dims);
  std::vector<int64_t> idx(size_t(rank), 0);
  // Sum over the tensor product of the per-axis taps.
  auto accumulate = [&](auto& self, size_t d, int64_t offset, double weight) -> double {
    if (d == size_t(rank)) return weight * in[size_t(offset)];
    double acc = 0;
    for (const Tap& t : taps[d][size_t(idx[d])])
      if (t.weight != 0) acc += self(self, d + 1, offset + t.index * in_strides[d], weight * t.weight);
    return acc;
  };
  for (int64_t o = 0; o < out_numel; ++o) {
    bool outside = false;
    for (size_t d = 0; d < size_t(rank); ++d) outside = outside || taps[d][size_t(idx[d])].empty();
    out[size_t(o)] = outside ? plan.extrapolation : accumulate(accumulate, 0, 0, 1.0);
    for (size_t d = size_t(rank); d-- > 0;) {
      if (++idx[d] < out_dims[d]) break;
      idx[d] = 0;
    }
  }
  ctx.set_output(0, from_doubles_rounded(x.dtype(), out_dims, out));
}

std::vector<double> doubles_of_input(const KernelContext& ctx, size_t i) {
  return present(ctx, i) ? to_doubles(ctx.input(i)) : std::vector<double>{};
}

// Resize-10 and Upsample: asymmetric coordinates, no nearest_mode.
ResizeParams legacy_params(const KernelContext& ctx) {
  ResizeParams p;
  p.mode = ctx.attr_string("mode", "nearest");
  if (p.mode == "bilinear" || p.mode == "trilinear") p.mode = "linear";
  p.coord = "asymmetric";
  p.nearest_mode = "simple";
  return p;
}

void resize_kernel(KernelContext& ctx) { apply(ctx, resize_plan(ctx)); }

}  // namespace

ResizePlan resize_plan(const KernelContext& ctx) {
  if (ctx.node().op_type == "Upsample") {
    std::vector<double> scales;
    if (ctx.opset() >= 9) {
      scales = doubles_of_input(ctx, 1);
    } else {
      for (float s : ctx.attr_floats("scales")) scales.push_back(s);
      // Upsample-1 had width_scale/height_scale for NCHW input instead.
      if (scales.empty() && ctx.has_attr("width_scale"))
        scales = {1, 1, ctx.attr_float("height_scale", 1), ctx.attr_float("width_scale", 1)};
    }
    return plan(ctx, legacy_params(ctx), scales, {}, {}, {});
  }
  if (ctx.opset() < 11) return plan(ctx, legacy_params(ctx), doubles_of_input(ctx, 1), {}, {}, {});
  ResizeParams p;
  p.mode = ctx.attr_string("mode", "nearest");
  p.coord = ctx.attr_string("coordinate_transformation_mode", "half_pixel");
  p.nearest_mode = ctx.attr_string("nearest_mode", "round_prefer_floor");
  p.cubic_a = ctx.attr_float("cubic_coeff_a", -0.75f);
  p.exclude_outside = ctx.attr_int("exclude_outside", 0) != 0;
  p.extrapolation = ctx.attr_float("extrapolation_value", 0.0f);
  p.antialias = ctx.attr_int("antialias", 0) != 0;
  std::vector<int64_t> sizes = present(ctx, 3) ? ctx.input(3).to_int64_vector() : std::vector<int64_t>{};
  std::vector<double> roi = p.coord == "tf_crop_and_resize" ? doubles_of_input(ctx, 1) : std::vector<double>{};
  return plan(ctx, p, doubles_of_input(ctx, 2), sizes, ctx.attr_ints("axes"), roi);
}

namespace {

// ---------------------------------------------------------------------------
// GridSample (PyTorch's grid_sample semantics, generalised to N spatial dims)

// Folds a coordinate back into [low/2, high/2] by reflection at the borders.
double reflect(double x, double twice_low, double twice_high) {
  if (twice_low == twice_high) return 0;
  double lo = twice_low / 2, span = (twice_high - twice_low) / 2;
  x = std::fabs(x - lo);
  double extra = std::fmod(x, span);
  int64_t flips = int64_t(std::floor(x / span));
  return flips % 2 == 0 ? extra + lo : span - extra + lo;
}

struct GridPadding {
  std::string mode;
  bool align;
  // Applies border clamping or reflection to a coordinate along an axis of length len.
  double apply(double x, int64_t len) const {
    if (mode == "border") return std::clamp(x, 0.0, double(len - 1));
    if (mode == "reflection") {
      x = align ? reflect(x, 0, 2.0 * double(len - 1)) : reflect(x, -1, 2.0 * double(len) - 1);
      return std::clamp(x, 0.0, double(len - 1));
    }
    return x;
  }
};

void grid_sample_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& grid = ctx.input(1);
  require_float(ctx, grid, "grid");
  const int64_t k = x.rank() - 2;
  if (k < 1) ctx.fail("input has shape " + ir::dims_to_string(x.dims()) + ", expected (N, C, D1, ..., Dk)");
  if (grid.rank() != k + 2 || grid.dim(0) != x.dim(0) || grid.dim(-1) != k)
    ctx.fail("grid has shape " + ir::dims_to_string(grid.dims()) + ", expected (N, out_1, ..., out_" + std::to_string(k) + ", " +
             std::to_string(k) + ") for input " + ir::dims_to_string(x.dims()));
  std::string mode = ctx.attr_string("mode", ctx.opset() >= 20 ? "linear" : "bilinear");
  if (mode == "bilinear") mode = "linear";
  if (mode == "bicubic") mode = "cubic";
  if (mode != "linear" && mode != "nearest" && mode != "cubic")
    ctx.fail("mode is '" + mode + "', expected bilinear/linear, nearest or bicubic/cubic");
  GridPadding pad{ctx.attr_string("padding_mode", "zeros"), ctx.attr_int("align_corners", 0) != 0};
  if (pad.mode != "zeros" && pad.mode != "border" && pad.mode != "reflection")
    ctx.fail("padding_mode is '" + pad.mode + "', expected zeros, border or reflection");

  const int64_t N = x.dim(0), C = x.dim(1);
  Dims in_sp(x.dims().begin() + 2, x.dims().end());
  Dims out_sp(grid.dims().begin() + 1, grid.dims().end() - 1);
  Dims out_dims{N, C};
  out_dims.insert(out_dims.end(), out_sp.begin(), out_sp.end());
  const int64_t in_plane = ir::checked_numel(in_sp), out_plane = ir::checked_numel(out_sp);
  std::vector<int64_t> in_strides = strides_of(in_sp);
  std::vector<double> in = to_doubles(x), g = to_doubles(grid), out(size_t(ir::checked_numel(out_dims)));

  std::vector<std::vector<Tap>> taps(static_cast<size_t>(k));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < out_plane; ++o) {
      // Spatial axis d (0 = outermost) is addressed by grid component k-1-d.
      for (int64_t d = 0; d < k; ++d) {
        int64_t len = in_sp[size_t(d)];
        double gc = g[size_t((n * out_plane + o) * k + (k - 1 - d))];
        double c = pad.align ? (gc + 1) / 2 * double(len - 1) : ((gc + 1) * double(len) - 1) / 2;
        std::vector<Tap>& t = taps[size_t(d)];
        t.clear();
        if (!std::isfinite(c)) continue;  // samples nothing: zero
        // Far outside the image only zeros are sampled; bounding c keeps the
        // tap indices representable.
        if (pad.mode == "zeros") c = std::clamp(c, -4.0, double(len) + 4);
        if (mode == "nearest") {
          t.push_back({int64_t(std::nearbyint(pad.apply(c, len))), 1.0});
        } else if (mode == "linear") {
          c = pad.apply(c, len);
          double f = std::floor(c);
          t.push_back({int64_t(f), 1 - (c - f)});
          t.push_back({int64_t(f) + 1, c - f});
        } else {
          // Bicubic pads each of the four taps, not the sampling point.
          double f = std::floor(c);
          for (int64_t i = -1; i <= 2; ++i)
            t.push_back({int64_t(pad.apply(f + double(i), len)), cubic_kernel(c - (f + double(i)), -0.75)});
        }
      }
      for (int64_t ch = 0; ch < C; ++ch) {
        const double* plane = in.data() + ((n * C + ch) * in_plane);
        auto accumulate = [&](auto& self, int64_t d, int64_t offset, double weight) -> double {
          if (d == k) return weight * plane[offset];
          double acc = 0;
          for (const Tap& t : taps[size_t(d)])
            if (t.index >= 0 && t.index < in_sp[size_t(d)] && t.weight != 0)  // zeros outside the image
              acc += self(self, d + 1, offset + t.index * in_strides[size_t(d)], weight * t.weight);
          return acc;
        };
        out[size_t((n * C + ch) * out_plane + o)] = accumulate(accumulate, 0, 0, 1.0);
      }
    }
  ctx.set_output(0, from_doubles_rounded(x.dtype(), out_dims, out));
}

// ---------------------------------------------------------------------------
// RoiAlign (follows onnxruntime, which the ONNX reference implementation mirrors)

void roi_align_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& rois = ctx.input(1);
  const Tensor& batch = ctx.input(2);
  require_float(ctx, x, "X");
  if (x.rank() != 4) ctx.fail("X has shape " + ir::dims_to_string(x.dims()) + ", expected (N, C, H, W)");
  if (rois.rank() != 2 || rois.dim(1) != 4)
    ctx.fail("rois has shape " + ir::dims_to_string(rois.dims()) + ", expected (num_rois, 4)");
  const int64_t R = rois.dim(0);
  require_shape(ctx, batch, "batch_indices", {R}, "(num_rois)");
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t oh = ctx.attr_int("output_height", 1), ow = ctx.attr_int("output_width", 1);
  if (oh <= 0 || ow <= 0) ctx.fail("output_height and output_width must be positive");
  const int64_t sampling_ratio = ctx.attr_int("sampling_ratio", 0);
  const double spatial_scale = ctx.attr_float("spatial_scale", 1.0f);
  const std::string mode = ctx.attr_string("mode", "avg");
  if (mode != "avg" && mode != "max") ctx.fail("mode is '" + mode + "', expected avg or max");
  // RoiAlign-10 had no attribute and behaved as output_half_pixel.
  const std::string coord =
      ctx.attr_string("coordinate_transformation_mode", ctx.opset() >= 16 ? "half_pixel" : "output_half_pixel");
  if (coord != "half_pixel" && coord != "output_half_pixel")
    ctx.fail("coordinate_transformation_mode is '" + coord + "', expected half_pixel or output_half_pixel");
  const bool half_pixel = coord == "half_pixel";

  // Every roi's box and sampling grid first: the work they ask for is checked before any of it.
  const std::vector<double> r = to_doubles(rois);
  struct RoiBox {
    double x0, y0, rw, rh;
    int64_t grid_h, grid_w;
  };
  std::vector<RoiBox> boxes;
  std::vector<std::pair<int64_t, int64_t>> grids;
  for (int64_t n = 0; n < R; ++n) {
    const double offset = half_pixel ? 0.5 : 0;
    const double x0 = r[size_t(n * 4)] * spatial_scale - offset, y0 = r[size_t(n * 4 + 1)] * spatial_scale - offset;
    double rw = r[size_t(n * 4 + 2)] * spatial_scale - offset - x0, rh = r[size_t(n * 4 + 3)] * spatial_scale - offset - y0;
    if (!half_pixel) rw = std::max(rw, 1.0), rh = std::max(rh, 1.0);
    boxes.push_back({x0, y0, rw, rh, roi_align_grid(ctx, sampling_ratio, rh, oh), roi_align_grid(ctx, sampling_ratio, rw, ow)});
    grids.emplace_back(boxes.back().grid_h, boxes.back().grid_w);
  }
  check_roi_align_work(ctx, grids, C, oh, ow);

  std::vector<double> in = to_doubles(x), out(size_t(ir::checked_numel({R, C, oh, ow})));
  for (int64_t n = 0; n < R; ++n) {
    int64_t b = batch.as_int64(n);
    if (b < 0 || b >= N)
      ctx.fail("batch_indices holds " + std::to_string(b) + ", expected a value in [0, " + std::to_string(N) + ")");
    const auto [x0, y0, rw, rh, grid_h, grid_w] = boxes[size_t(n)];
    double bin_h = rh / double(oh), bin_w = rw / double(ow);
    double count = std::max(double(grid_h) * double(grid_w), 1.0);
    for (int64_t c = 0; c < C; ++c) {
      const double* plane = in.data() + ((b * C + c) * H * W);
      for (int64_t ph = 0; ph < oh; ++ph)
        for (int64_t pw = 0; pw < ow; ++pw) {
          double acc = 0;
          bool have_max = false;
          for (int64_t iy = 0; iy < grid_h; ++iy)
            for (int64_t ix = 0; ix < grid_w; ++ix) {
              double y = y0 + double(ph) * bin_h + (double(iy) + 0.5) * bin_h / double(grid_h);
              double xx = x0 + double(pw) * bin_w + (double(ix) + 0.5) * bin_w / double(grid_w);
              double w[4] = {0, 0, 0, 0}, v[4] = {0, 0, 0, 0};
              if (y >= -1.0 && y <= double(H) && xx >= -1.0 && xx <= double(W)) {
                y = std::max(y, 0.0), xx = std::max(xx, 0.0);
                int64_t yl = int64_t(y), xl = int64_t(xx), yh, xh;
                if (yl >= H - 1)
                  yh = yl = H - 1, y = double(yl);
                else
                  yh = yl + 1;
                if (xl >= W - 1)
                  xh = xl = W - 1, xx = double(xl);
                else
                  xh = xl + 1;
                double ly = y - double(yl), lx = xx - double(xl), hy = 1 - ly, hx = 1 - lx;
                w[0] = hy * hx, w[1] = hy * lx, w[2] = ly * hx, w[3] = ly * lx;
                v[0] = plane[yl * W + xl], v[1] = plane[yl * W + xh], v[2] = plane[yh * W + xl], v[3] = plane[yh * W + xh];
              }
              if (mode == "avg") {
                for (int i = 0; i < 4; ++i) acc += w[i] * v[i];
              } else {
                double m = std::max(std::max(w[0] * v[0], w[1] * v[1]), std::max(w[2] * v[2], w[3] * v[3]));
                acc = have_max ? std::max(acc, m) : m;
                have_max = true;
              }
            }
          out[size_t(((n * C + c) * oh + ph) * ow + pw)] = mode == "avg" ? acc / count : acc;
        }
    }
  }
  ctx.set_output(0, from_doubles_rounded(x.dtype(), {R, C, oh, ow}, out));
}

// ---------------------------------------------------------------------------
// NonMaxSuppression

struct Box {
  double y0, x0, y1, x1;
};

// Boxes whose intersection-over-union exceeds the threshold suppress each
// other; degenerate boxes never do (as in onnxruntime).
bool suppresses(const Box& a, const Box& b, double iou_threshold) {
  double iy0 = std::max(a.y0, b.y0), iy1 = std::min(a.y1, b.y1);
  double ix0 = std::max(a.x0, b.x0), ix1 = std::min(a.x1, b.x1);
  if (iy1 <= iy0 || ix1 <= ix0) return false;
  double inter = (iy1 - iy0) * (ix1 - ix0);
  double area_a = (a.y1 - a.y0) * (a.x1 - a.x0), area_b = (b.y1 - b.y0) * (b.x1 - b.x0);
  if (area_a <= 0 || area_b <= 0) return false;
  double uni = area_a + area_b - inter;
  if (uni <= 0) return false;
  return inter / uni > iou_threshold;
}

void non_max_suppression_kernel(KernelContext& ctx) {
  const Tensor& boxes = ctx.input(0);
  const Tensor& scores = ctx.input(1);
  if (boxes.rank() != 3 || boxes.dim(2) != 4)
    ctx.fail("boxes has shape " + ir::dims_to_string(boxes.dims()) + ", expected (batches, spatial_dimension, 4)");
  const int64_t B = boxes.dim(0), S = boxes.dim(1);
  if (scores.rank() != 3 || scores.dim(0) != B || scores.dim(2) != S)
    ctx.fail("scores has shape " + ir::dims_to_string(scores.dims()) + ", expected (" + std::to_string(B) + ", classes, " +
             std::to_string(S) + ")");
  const int64_t C = scores.dim(1);
  int64_t max_out = present(ctx, 2) ? ctx.input(2).as_int64(0) : 0;
  double iou_threshold = present(ctx, 3) ? ctx.input(3).as_double(0) : 0;
  bool has_score_threshold = present(ctx, 4);
  double score_threshold = has_score_threshold ? ctx.input(4).as_double(0) : 0;
  int64_t center = ctx.attr_int("center_point_box", 0);
  if (center != 0 && center != 1) ctx.fail("center_point_box is " + std::to_string(center) + ", expected 0 or 1");

  std::vector<double> bv = to_doubles(boxes), sv = to_doubles(scores);
  std::vector<Box> all(size_t(B * S));
  for (size_t i = 0; i < all.size(); ++i) {
    const double* q = &bv[i * 4];
    if (center) {  // [x_center, y_center, width, height]
      all[i] = {q[1] - q[3] / 2, q[0] - q[2] / 2, q[1] + q[3] / 2, q[0] + q[2] / 2};
    } else {  // [y1, x1, y2, x2] with the corners in either order
      all[i] = {std::min(q[0], q[2]), std::min(q[1], q[3]), std::max(q[0], q[2]), std::max(q[1], q[3])};
    }
  }
  std::vector<int64_t> selected;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      const double* sc = sv.data() + ((b * C + c) * S);
      std::vector<int64_t> order;
      for (int64_t i = 0; i < S; ++i)
        if (!has_score_threshold || sc[i] > score_threshold) order.push_back(i);
      std::stable_sort(order.begin(), order.end(), [&](int64_t l, int64_t r) { return sc[l] > sc[r]; });
      // Only a kept box that overlaps the candidate can suppress it, so kept
      // boxes are indexed by their top edge: those that can reach the
      // candidate start above its bottom and within the tallest kept height
      // above its top (twice that, against rounding). A box of no height
      // (or NaN) neither suppresses nor is suppressed. Exporters of per-class
      // NMS shift each class's boxes apart and make one call with thousands.
      std::multimap<double, int64_t> kept_by_top;
      double tallest = 0;
      int64_t kept = 0;
      for (int64_t i : order) {
        if (kept >= max_out) break;
        const Box& box = all[size_t(b * S + i)];
        if (box.y1 > box.y0) {
          bool suppressed = false;
          for (auto it = kept_by_top.upper_bound(box.y0 - 2 * tallest), end = kept_by_top.lower_bound(box.y1);
               it != end && !suppressed; ++it)
            suppressed = suppresses(box, all[size_t(b * S + it->second)], iou_threshold);
          if (suppressed) continue;
          kept_by_top.emplace(box.y0, i);
          tallest = std::max(tallest, box.y1 - box.y0);
        }
        ++kept;
        selected.insert(selected.end(), {b, c, i});
      }
    }
  ctx.set_output(0, Tensor::from_vector<int64_t>({int64_t(selected.size() / 3), 3}, selected));
}

}  // namespace

void register_image_ops(KernelRegistry& r) {
  r.add("Resize", &resize_kernel);
  r.add("Upsample", &resize_kernel);
  r.add("GridSample", &grid_sample_kernel);
  r.add("RoiAlign", &roi_align_kernel);
  r.add("NonMaxSuppression", &non_max_suppression_kernel);
}

}  // namespace kiln::ref
