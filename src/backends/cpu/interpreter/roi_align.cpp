// RoiAlign of float maps, its sampling worked out once per roi.
#include "backends/cpu/interpreter/families.hpp"

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/cpu/interpreter/kernel_common.hpp"
#include "backends/reference/ops/op_util.hpp"

namespace kiln::cpu::interpreter {

using ir::Dims;
using ir::DType;
using ir::Tensor;

namespace {

// Where RoiAlign samples along one axis of one roi: for each output cell and
// each of its `grid` samples, the two neighbours and their bilinear weights.
// A sample outside the map contributes nothing (valid false).
struct AxisSample {
  int64_t lo, hi;
  float w_lo, w_hi;
  bool valid;
};

std::vector<AxisSample> axis_samples(double start, double bin, int64_t cells, int64_t grid, int64_t size) {
  std::vector<AxisSample> out;
  if (grid <= 0) return out;  // a flipped box: no samples, the cells are 0
  out.reserve(size_t(cells * grid));
  for (int64_t p = 0; p < cells; ++p)
    for (int64_t i = 0; i < grid; ++i) {
      double v = start + double(p) * bin + (double(i) + 0.5) * bin / double(grid);
      if (!(v >= -1.0 && v <= double(size))) {  // NaN too
        out.push_back({0, 0, 0, 0, false});
        continue;
      }
      v = std::max(v, 0.0);
      int64_t lo = int64_t(v), hi = lo + 1;
      if (lo >= size - 1) hi = lo = size - 1, v = double(lo);
      const double l = v - double(lo);
      out.push_back({lo, hi, float(1 - l), float(l), true});
    }
  return out;
}

}  // namespace

// RoiAlign over float NCHW maps, as the reference kernel computes it (ONNX
// Runtime's rules, max mode included) but in float: the sampling positions
// and weights depend on the roi only, so they are worked out once per roi
// and the channels run in parallel on the budget's threads. Other dtypes and
// malformed inputs are the reference kernel's (which names what is wrong).
void roi_align_kernel(ref::KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& rois = ctx.input(1);
  const Tensor& batch = ctx.input(2);
  const std::string mode = ctx.attr_string("mode", "avg");
  const std::string coord =
      ctx.attr_string("coordinate_transformation_mode", ctx.opset() >= 16 ? "half_pixel" : "output_half_pixel");
  const int64_t oh = ctx.attr_int("output_height", 1), ow = ctx.attr_int("output_width", 1);
  const int64_t sampling_ratio = ctx.attr_int("sampling_ratio", 0);
  if (x.dtype() != DType::Float32 || rois.dtype() != DType::Float32 || x.rank() != 4 || rois.rank() != 2 || rois.dim(1) != 4 ||
      batch.dims() != Dims{rois.dim(0)} || (mode != "avg" && mode != "max") ||
      (coord != "half_pixel" && coord != "output_half_pixel") || oh <= 0 || ow <= 0)
    return run_reference(ctx);
  const int64_t R = rois.dim(0), N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  std::vector<int64_t> image(static_cast<size_t>(R));
  for (int64_t n = 0; n < R; ++n) {
    image[size_t(n)] = batch.as_int64(n);
    if (image[size_t(n)] < 0 || image[size_t(n)] >= N) return run_reference(ctx);
  }
  const bool half_pixel = coord == "half_pixel", avg = mode == "avg";
  const double spatial_scale = ctx.attr_float("spatial_scale", 1.0f);
  struct Roi {
    std::vector<AxisSample> ys, xs;
    int64_t grid_h, grid_w;
    float scale;  // 1 / samples per cell, for avg
  };
  std::vector<Roi> plan(static_cast<size_t>(R));
  const float* r = rois.data<float>();
  struct Box {
    double x0, y0, rw, rh;
  };
  std::vector<Box> boxes;
  std::vector<std::pair<int64_t, int64_t>> grids;
  for (int64_t n = 0; n < R; ++n) {
    const double offset = half_pixel ? 0.5 : 0;
    const double x0 = r[n * 4] * spatial_scale - offset, y0 = r[n * 4 + 1] * spatial_scale - offset;
    double rw = r[n * 4 + 2] * spatial_scale - offset - x0, rh = r[n * 4 + 3] * spatial_scale - offset - y0;
    if (!half_pixel) rw = std::max(rw, 1.0), rh = std::max(rh, 1.0);
    boxes.push_back({x0, y0, rw, rh});
    grids.emplace_back(ref::roi_align_grid(ctx, sampling_ratio, rh, oh), ref::roi_align_grid(ctx, sampling_ratio, rw, ow));
  }
  // Before the sample lists, which grow with the grids.
  ref::check_roi_align_work(ctx, grids, C, oh, ow);
  for (int64_t n = 0; n < R; ++n) {
    const Box& box = boxes[size_t(n)];
    Roi& roi = plan[size_t(n)];
    std::tie(roi.grid_h, roi.grid_w) = grids[size_t(n)];
    roi.scale = float(1.0 / std::max(double(roi.grid_h) * double(roi.grid_w), 1.0));
    roi.ys = axis_samples(box.y0, box.rh / double(oh), oh, roi.grid_h, H);
    roi.xs = axis_samples(box.x0, box.rw / double(ow), ow, roi.grid_w, W);
  }
  Tensor out(DType::Float32, {R, C, oh, ow});
  const float* in = x.data<float>();
  float* dst = out.data<float>();
  auto cell = [&](const Roi& roi, const float* plane, int64_t ph, int64_t pw) {
    float acc = 0;
    for (int64_t iy = 0; iy < roi.grid_h; ++iy) {
      const AxisSample& y = roi.ys[size_t(ph * roi.grid_h + iy)];
      for (int64_t ix = 0; ix < roi.grid_w; ++ix) {
        const AxisSample& xs = roi.xs[size_t(pw * roi.grid_w + ix)];
        if (!y.valid || !xs.valid) {
          if (!avg) acc = (iy | ix) ? std::max(acc, 0.0f) : 0.0f;
          continue;
        }
        const float* lo = plane + y.lo * W;
        const float* hi = plane + y.hi * W;
        const float v00 = y.w_lo * xs.w_lo * lo[xs.lo], v01 = y.w_lo * xs.w_hi * lo[xs.hi];
        const float v10 = y.w_hi * xs.w_lo * hi[xs.lo], v11 = y.w_hi * xs.w_hi * hi[xs.hi];
        if (avg) {
          acc += v00 + v01 + v10 + v11;
        } else {
          const float m = std::max(std::max(v00, v01), std::max(v10, v11));
          acc = (iy | ix) ? std::max(acc, m) : m;
        }
      }
    }
    return avg ? acc * roi.scale : acc;
  };
  if (!avg) {
    on_budget(R * C, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        const int64_t n = k / C, c = k % C;
        const float* plane = in + (image[size_t(n)] * C + c) * H * W;
        float* o = dst + k * oh * ow;
        for (int64_t ph = 0; ph < oh; ++ph)
          for (int64_t pw = 0; pw < ow; ++pw) o[ph * ow + pw] = cell(plan[size_t(n)], plane, ph, pw);
      }
    });
    return ctx.set_output(0, std::move(out));
  }
  // avg, channels last: the maps transposed once, then every tap of a roi
  // (four per sample, the weight with the cell's 1 / count folded in) adds
  // one weighted row of channels, vectorised. Faster R-CNN's box head (150
  // rois x 256 channels of a 10x10 map) took 12 ms sampling each channel's
  // plane apart, 9 with the taps made once per roi and applied per channel,
  // 3.6-4 this way.
  std::vector<float> last(size_t(N * H * W * C));
  on_budget(N * H * W, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t img = p / (H * W), pixel = p % (H * W);
      for (int64_t c = 0; c < C; ++c) last[size_t(p * C + c)] = in[(img * C + c) * H * W + pixel];
    }
  });
  on_budget(R, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(size_t(oh * ow * C));
    for (int64_t n = begin; n < end; ++n) {
      const Roi& roi = plan[size_t(n)];
      const float* map = last.data() + image[size_t(n)] * H * W * C;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t ph = 0; ph < oh; ++ph)
        for (int64_t pw = 0; pw < ow; ++pw) {
          float* a = acc.data() + (ph * ow + pw) * C;
          for (int64_t iy = 0; iy < roi.grid_h; ++iy) {
            const AxisSample& y = roi.ys[size_t(ph * roi.grid_h + iy)];
            for (int64_t ix = 0; ix < roi.grid_w; ++ix) {
              const AxisSample& xs = roi.xs[size_t(pw * roi.grid_w + ix)];
              if (!y.valid || !xs.valid) continue;
              const float s = roi.scale;
              add_scaled(a, map + (y.lo * W + xs.lo) * C, y.w_lo * xs.w_lo * s, C);
              add_scaled(a, map + (y.lo * W + xs.hi) * C, y.w_lo * xs.w_hi * s, C);
              add_scaled(a, map + (y.hi * W + xs.lo) * C, y.w_hi * xs.w_lo * s, C);
              add_scaled(a, map + (y.hi * W + xs.hi) * C, y.w_hi * xs.w_hi * s, C);
            }
          }
        }
      float* o = dst + n * C * oh * ow;
      for (int64_t c = 0; c < C; ++c)
        for (int64_t bin = 0; bin < oh * ow; ++bin) o[c * oh * ow + bin] = acc[size_t(bin * C + c)];
    }
  });
  ctx.set_output(0, std::move(out));
}

}  // namespace kiln::cpu::interpreter
