// The interpreter's own kernels: where a reference kernel would be slow on
// a detector's post-processing, the same operator done faster. Each one
// handles its common case and hands everything else (other dtypes, odd
// attributes, bad inputs) to the reference kernel, which also names what is
// wrong. tests/unit/interpreter_test.cpp holds each against the reference.
#include "backends/cpu/interpreter_kernels.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <tuple>
#include <type_traits>
#include <unordered_map>

#include "backends/cpu/onednn_kernel.hpp"
#include "backends/reference/ops/op_util.hpp"
#include "backends/reference/resize_plan.hpp"

namespace kiln::cpu {

thread_local ThreadBudget* t_budget = nullptr;

namespace {

using dnnl::memory;
using ir::Dims;
using ir::DType;
using ir::Tensor;

// The reference kernel of the node at hand, for the cases a kernel here leaves.
void run_reference(ref::KernelContext& ctx) { ref::KernelRegistry::instance().find(ctx.node().op_type)(ctx); }

// body(begin, end) over [0, n): split over the budget's threads (holding it,
// as a run does), or in one call without a budget or with one thread. A
// compiled run's step on these kernels is already inside its budget's hold:
// the loop goes straight to the arena.
template <typename Body>
void on_budget(int64_t n, const Body& body) {
  const ThreadBudget* held = ThreadBudget::held();
  const ThreadBudget* budget = t_budget ? t_budget : held;
  if (!budget || budget->threads == 1 || n <= 1) return body(0, n);
  auto loop = [&] {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, n), [&](const tbb::blocked_range<int64_t>& r) { body(r.begin(), r.end()); });
  };
  if (held == budget) return loop();
  t_budget->hold(loop);
}

// dst = alpha * src x weights (+ addend), every operand described with its
// own strides (transposes are strides), run on the calling thread's OpenMP
// team. The addend is a post-op, not a bias: oneDNN scales the bias with alpha.
void product(const memory::desc& src, const void* a, const memory::desc& weights, const void* b, const memory::desc* addend,
             const void* c, const memory::desc& dst, void* out, float alpha) {
  const dnnl::engine& engine = cpu_engine();
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (addend) {
    dnnl::post_ops ops;
    ops.append_binary(dnnl::algorithm::binary_add, *addend);
    attr.set_post_ops(ops);
  }
  // oneDNN keeps made primitives in its own cache, keyed by shapes and
  // attributes: a product seen before costs a look-up.
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights, dst), attr, engine);
  dnnl::stream stream(engine);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(src, engine, const_cast<void*>(a))},
                                       {DNNL_ARG_WEIGHTS, memory(weights, engine, const_cast<void*>(b))},
                                       {DNNL_ARG_DST, memory(dst, engine, out)}};
  if (addend) args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, memory(*addend, engine, const_cast<void*>(c)));
  dnnl::matmul(pd).execute(stream, args);
  stream.wait();
}

// The product on the budget's threads.
void matmul(const memory::desc& src, const void* a, const memory::desc& weights, const void* b, const memory::desc* addend,
            const void* c, const memory::desc& dst, void* out, float alpha) {
  if (!t_budget) return product(src, a, weights, b, addend, c, dst, out, alpha);
  t_budget->hold([&] { product(src, a, weights, b, addend, c, dst, out, alpha); });
}

memory::desc desc(const Dims& dims, const Dims& strides) {
  return memory::desc(memory::dims(dims.begin(), dims.end()), memory::data_type::f32,
                      memory::dims(strides.begin(), strides.end()));
}

bool all_f32(const ref::KernelContext& ctx) {
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i) && ctx.input(i).dtype() != DType::Float32) return false;
  return true;
}

// Y = alpha * A' B' + C, with C broadcast along rows, columns or both. Other
// cases (beta other than 1, other dtypes, empty products) are the
// reference kernel's.
void gemm_kernel(ref::KernelContext& ctx) {
  const bool has_c = ctx.has_input(2);
  if (!all_f32(ctx) || ctx.input(0).rank() != 2 || ctx.input(1).rank() != 2 ||
      (has_c && (ctx.attr_float("beta", 1.0f) != 1.0f || ctx.input(2).rank() > 2)))
    return run_reference(ctx);
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const bool ta = ctx.attr_int("transA", 0) != 0, tb = ctx.attr_int("transB", 0) != 0;
  const int64_t m = a.dim(ta ? 1 : 0), k = a.dim(ta ? 0 : 1), n = b.dim(tb ? 0 : 1);
  if (b.dim(tb ? 1 : 0) != k || m == 0 || n == 0 || k == 0) return run_reference(ctx);
  Dims c_dims;
  if (has_c) {
    const Tensor& c = ctx.input(2);
    const int64_t cm = c.rank() == 2 ? c.dim(0) : 1, cn = c.rank() >= 1 ? c.dim(-1) : 1;
    if ((cm != 1 && cm != m) || (cn != 1 && cn != n)) return run_reference(ctx);  // names the mismatch
    c_dims = {cm, cn};
  }
  Tensor out(DType::Float32, {m, n});
  const memory::desc src = desc({m, k}, ta ? Dims{1, m} : Dims{k, 1});
  const memory::desc weights = desc({k, n}, tb ? Dims{1, k} : Dims{n, 1});
  const memory::desc addend = has_c ? desc(c_dims, {c_dims[1], 1}) : memory::desc();
  matmul(src, a.raw(), weights, b.raw(), has_c ? &addend : nullptr, has_c ? ctx.input(2).raw() : nullptr, desc({m, n}, {n, 1}),
         out.raw(), ctx.attr_float("alpha", 1.0f));
  ctx.set_output(0, std::move(out));
}

// [..., m, k] x [k, n], and stacks of equal batch shape. Broadcasting
// batches and vectors are the reference kernel's.
void matmul_kernel(ref::KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (!all_f32(ctx) || a.rank() < 2 || b.rank() < 2 || a.dim(-1) != b.dim(-2)) return run_reference(ctx);
  const int64_t m = a.dim(-2), k = a.dim(-1), n = b.dim(-1);
  const Dims batch_a(a.dims().begin(), a.dims().end() - 2), batch_b(b.dims().begin(), b.dims().end() - 2);
  if (!batch_b.empty() && batch_b != batch_a) return run_reference(ctx);
  const int64_t batch = ir::checked_numel(batch_a);
  if (m == 0 || n == 0 || k == 0 || batch == 0) return run_reference(ctx);
  Dims out_dims = batch_a;
  out_dims.insert(out_dims.end(), {m, n});
  Tensor out(DType::Float32, out_dims);
  if (batch_b.empty()) {  // one weight matrix: the stack is one taller product
    matmul(desc({batch * m, k}, {k, 1}), a.raw(), desc({k, n}, {n, 1}), b.raw(), nullptr, nullptr, desc({batch * m, n}, {n, 1}),
           out.raw(), 1.0f);
  } else {
    matmul(desc({batch, m, k}, {m * k, k, 1}), a.raw(), desc({batch, k, n}, {k * n, n, 1}), b.raw(), nullptr, nullptr,
           desc({batch, m, n}, {m * n, n, 1}), out.raw(), 1.0f);
  }
  ctx.set_output(0, std::move(out));
}

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

// a[i] += w * x[i]: cloned for AVX-512 and AVX2 with FMA (this library is
// built for the baseline x86-64), the clone picked when the library loads.
// Not under ThreadSanitizer, as KILN_VECTOR_CLONES (vector_clones.hpp).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_THREAD__)
__attribute__((target_clones("arch=skylake-avx512", "arch=haswell", "default")))
#endif
void add_scaled(float* __restrict a, const float* __restrict x, float w, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] += w * x[i];
}

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

// Fills n blocks from the first one, doubling what is copied each time.
void replicate(char* dst, size_t block, int64_t n) {
  for (size_t done = 1; done < size_t(n);) {
    const size_t k = std::min(done, size_t(n) - done);
    std::memcpy(dst + done * block, dst, k * block);
    done += k;
  }
}

// Fills `out` with copies of the `esize`-byte value (zero: a memset).
void fill_with(Tensor& out, const void* value, size_t esize) {
  const char* v = static_cast<const char*>(value);
  if (out.numel() == 0) return;
  if (std::all_of(v, v + esize, [](char c) { return c == 0; })) return void(std::memset(out.raw(), 0, out.nbytes()));
  std::memcpy(out.raw(), v, esize);
  replicate(static_cast<char*>(out.raw()), esize, out.numel());
}

// Expand as whole-block copies: the trailing axes where the input is not
// broadcast are one memcpy, each broadcast axis a replication of the block
// already written.
void expand_kernel(ref::KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& shape = ctx.input(1);
  if (shape.dtype() != DType::Int64 || shape.rank() != 1) return run_reference(ctx);
  const std::vector<int64_t> want = shape.to_int64_vector();
  const size_t rank = std::max(size_t(x.rank()), want.size());
  Dims in(rank, 1), out(rank);
  for (size_t d = 0; d < rank; ++d) {
    if (d + x.rank() >= rank) in[d] = x.dim(int(d + x.rank() - rank));
    const int64_t w = d + want.size() >= rank ? want[d + want.size() - rank] : 1;
    if (w < 0 || (in[d] != w && in[d] != 1 && w != 1)) return run_reference(ctx);  // names the mismatch
    out[d] = in[d] == 1 ? w : in[d];
  }
  Tensor result = Tensor::uninitialized(x.dtype(), out);
  const size_t esize = ir::dtype_size(x.dtype());
  if (result.numel() == 0) return ctx.set_output(0, std::move(result));
  // Strides in bytes; `whole`: the first axis from which the input is copied as is.
  std::vector<size_t> in_stride(rank + 1, esize), out_stride(rank + 1, esize);
  size_t whole = rank;
  for (size_t d = rank; d-- > 0;) {
    in_stride[d] = in_stride[d + 1] * size_t(in[d]);
    out_stride[d] = out_stride[d + 1] * size_t(out[d]);
  }
  while (whole > 0 && in[whole - 1] == out[whole - 1]) --whole;
  std::function<void(size_t, const char*, char*)> fill = [&](size_t d, const char* src, char* dst) {
    if (d == whole) return void(std::memcpy(dst, src, out_stride[d]));
    if (in[d] == out[d]) {
      for (int64_t i = 0; i < out[d]; ++i) fill(d + 1, src + size_t(i) * in_stride[d + 1], dst + size_t(i) * out_stride[d + 1]);
    } else {
      fill(d + 1, src, dst);
      replicate(dst, out_stride[d + 1], out[d]);
    }
  };
  fill(0, static_cast<const char*>(x.raw()), static_cast<char*>(result.raw()));
  ctx.set_output(0, std::move(result));
}

// ConstantOfShape without a loop over elements.
void constant_of_shape_kernel(ref::KernelContext& ctx) {
  const Tensor& shape = ctx.input(0);
  const Tensor* value = ctx.attr_tensor("value");
  if (shape.dtype() != DType::Int64 || (value && value->numel() != 1)) return run_reference(ctx);
  const Dims dims = shape.to_int64_vector();
  if (std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d < 0; })) return run_reference(ctx);
  const DType dtype = value ? value->dtype() : DType::Float32;
  const float zero = 0;
  Tensor out = Tensor::uninitialized(dtype, dims);
  fill_with(out, value ? value->raw() : &zero, ir::dtype_size(dtype));
  ctx.set_output(0, std::move(out));
}

// x's dims with pads (begins, then ends) added, in 128 bits since pads may
// hold anything; false unless each pad is within +-2^62 and each size in
// [0, 2^62] (then coordinates shifted by a pad cannot overflow).
bool padded_dims(const Tensor& x, const int64_t* pads, Dims& out) {
  const int64_t rank = x.rank(), limit = int64_t(1) << 62;
  for (int64_t d = 0; d < rank; ++d) {
    const __int128 size = __int128(x.dim(int(d))) + pads[d] + pads[d + rank];
    for (const int64_t pad : {pads[d], pads[d + rank]})
      if (pad > limit || pad < -limit) return false;
    if (size < 0 || size > limit) return false;
    out[size_t(d)] = int64_t(size);
  }
  return true;
}

// Pad in edge, wrap or reflect mode: per axis, the input coordinate each
// output coordinate reads (ref::pad_source, as the reference kernel), then each output
// row in parallel, its stretch that is the input row as is in one copy.
// Style-transfer and super-resolution networks pad every convolution this way.
void pad_from_input(ref::KernelContext& ctx, const std::string& mode) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  const int64_t* pads = ctx.input(1).data<int64_t>();
  Dims out_dims(static_cast<size_t>(rank));
  if (!padded_dims(x, pads, out_dims) || std::find(x.dims().begin(), x.dims().end(), 0) != x.dims().end())
    return run_reference(ctx);  // names the problem
  // The output first: its size is checked before the tables below grow with it.
  Tensor out = Tensor::uninitialized(x.dtype(), out_dims);
  std::vector<std::vector<int64_t>> from(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d)
    for (int64_t o = 0; o < out_dims[size_t(d)]; ++o)
      from[size_t(d)].push_back(ref::pad_source(mode, o - pads[d], x.dim(int(d))));
  const size_t esize = ir::dtype_size(x.dtype());
  const int64_t width = out_dims.back(), rows = width ? out.numel() / width : 0, n_last = x.dim(-1);
  // Where the last axis reads the input row unshifted: one copy.
  const int64_t copy_lo = std::clamp<int64_t>(pads[rank - 1], 0, width),
                copy_hi = std::clamp<int64_t>(pads[rank - 1] + n_last, copy_lo, width);
  const std::vector<int64_t>& last = from.back();
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(out.raw());
  on_budget(rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t in_row = 0, stride = n_last;
      for (int64_t d = rank - 2, rest = r; d >= 0; --d) {
        in_row += from[size_t(d)][size_t(rest % out_dims[size_t(d)])] * stride;
        rest /= out_dims[size_t(d)];
        stride *= x.dim(int(d));
      }
      const char* s = src + in_row * int64_t(esize);
      char* o = dst + r * width * int64_t(esize);
      for (int64_t c = 0; c < copy_lo; ++c) std::memcpy(o + c * int64_t(esize), s + last[size_t(c)] * int64_t(esize), esize);
      if (copy_hi > copy_lo)
        std::memcpy(o + copy_lo * int64_t(esize), s + last[size_t(copy_lo)] * int64_t(esize), size_t(copy_hi - copy_lo) * esize);
      for (int64_t c = copy_hi; c < width; ++c) std::memcpy(o + c * int64_t(esize), s + last[size_t(c)] * int64_t(esize), esize);
    }
  });
  ctx.set_output(0, std::move(out));
}

// Pad (opset 11 on, pads for every axis). With a constant: the output is
// filled with the value, then the input's overlap with it is copied in
// rows. Cropping pads are handled the same way.
void pad_kernel(ref::KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  const std::string mode = ctx.attr_string("mode", "constant");
  if (ctx.opset() < 11 || rank == 0 || ctx.has_input(3) || ctx.input(1).dtype() != DType::Int64 ||
      ctx.input(1).numel() != 2 * rank || (mode != "constant" && mode != "edge" && mode != "wrap" && mode != "reflect"))
    return run_reference(ctx);
  if (mode != "constant") return pad_from_input(ctx, mode);
  const bool has_value = ctx.has_input(2) && ctx.input(2).numel() > 0;
  if (has_value && ctx.input(2).dtype() != x.dtype()) return run_reference(ctx);  // names the type
  const int64_t* pads = ctx.input(1).data<int64_t>();
  Dims out_dims(static_cast<size_t>(rank));
  if (!padded_dims(x, pads, out_dims)) return run_reference(ctx);
  const size_t esize = ir::dtype_size(x.dtype());
  Tensor out = Tensor::uninitialized(x.dtype(), out_dims);
  const uint64_t zero = 0;
  fill_with(out, has_value ? ctx.input(2).raw() : &zero, esize);
  // Per axis, the input coordinates that land in the output.
  std::vector<int64_t> lo(static_cast<size_t>(rank)), hi(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d) {
    lo[size_t(d)] = std::max<int64_t>(0, -pads[d]);
    hi[size_t(d)] = std::min(x.dim(int(d)), out_dims[size_t(d)] - pads[d]);
    if (lo[size_t(d)] >= hi[size_t(d)]) return ctx.set_output(0, std::move(out));  // nothing of the input is kept
  }
  const std::vector<int64_t> in_stride = ref::strides_of(x.dims()), out_stride = ref::strides_of(out_dims);
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(out.raw());
  std::function<void(int64_t, int64_t, int64_t)> copy = [&](int64_t d, int64_t from, int64_t to) {
    const size_t a = size_t(d);
    if (d == rank - 1) {
      std::memcpy(dst + (to + lo[a] + pads[d]) * int64_t(esize), src + (from + lo[a]) * int64_t(esize),
                  size_t(hi[a] - lo[a]) * esize);
      return;
    }
    for (int64_t i = lo[a]; i < hi[a]; ++i) copy(d + 1, from + i * in_stride[a], to + (i + pads[d]) * out_stride[a]);
  };
  copy(0, 0, 0);
  ctx.set_output(0, std::move(out));
}

template <typename T>
void scatter_rows(const int64_t* index, const T* upd, T* out, int64_t rows, int64_t len, const std::vector<int64_t>& row_base,
                  int64_t axis_stride, bool last_axis) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = row_base[size_t(r)];
    for (int64_t j = 0; j < len; ++j) {
      const int64_t u = r * len + j;
      out[base + (last_axis ? index[u] : j + index[u] * axis_stride)] = upd[u];
    }
  }
}

// ScatterElements that replaces (no reduction): the output starts as a copy
// of the data, then each row of updates goes to the place its indices say,
// in order, as the reference does.
void scatter_elements_kernel(ref::KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  const Tensor& upd = ctx.input(2);
  const int64_t rank = x.rank();
  int64_t axis = ctx.attr_int("axis", 0);
  if (axis < 0) axis += rank;
  if (ctx.attr_string("reduction", "none") != "none" || rank == 0 || axis < 0 || axis >= rank || ind.rank() != rank ||
      upd.dims() != ind.dims() || upd.dtype() != x.dtype() || (ind.dtype() != DType::Int64 && ind.dtype() != DType::Int32))
    return run_reference(ctx);
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis && ind.dim(int(d)) > x.dim(int(d))) return run_reference(ctx);
  // Indices checked before anything is written; read in place unless some
  // must be converted or made non-negative.
  const int64_t extent = x.dim(int(axis));
  std::vector<int64_t> converted;
  const int64_t* index = ind.dtype() == DType::Int64 ? ind.data<int64_t>() : nullptr;
  bool negative = false;
  for (int64_t u = 0; u < ind.numel() && index; ++u) {
    if (index[u] < -extent || index[u] >= extent) return run_reference(ctx);  // names the index
    negative |= index[u] < 0;
  }
  if (!index || negative) {
    converted = ind.to_int64_vector();
    for (int64_t& i : converted) {
      if (i < 0) i += extent;
      if (i < 0 || i >= extent) return run_reference(ctx);
    }
    index = converted.data();
  }
  Tensor out = x.clone();
  const int64_t len = ind.dim(-1), rows = len ? ind.numel() / len : 0;
  const std::vector<int64_t> stride = ref::strides_of(x.dims());
  // Where each row of updates starts in the output, but for the axis.
  std::vector<int64_t> row_base(static_cast<size_t>(rows)), at(static_cast<size_t>(rank), 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t base = 0;
    for (int64_t d = 0; d + 1 < rank; ++d)
      if (d != axis) base += at[size_t(d)] * stride[size_t(d)];
    row_base[size_t(r)] = base;
    for (int64_t d = rank - 2; d >= 0; --d) {
      if (++at[size_t(d)] < ind.dim(int(d))) break;
      at[size_t(d)] = 0;
    }
  }
  const bool last = axis == rank - 1;
  const int64_t axis_stride = stride[size_t(axis)];
  // Elements are moved as they are: only their size matters.
  auto scatter = [&](auto element) {
    using T = decltype(element);
    scatter_rows(index, static_cast<const T*>(upd.raw()), static_cast<T*>(out.raw()), rows, len, row_base, axis_stride, last);
  };
  switch (ir::dtype_size(x.dtype())) {
    case 1: scatter(uint8_t{}); break;
    case 2: scatter(uint16_t{}); break;
    case 4: scatter(uint32_t{}); break;
    case 8: scatter(uint64_t{}); break;
    default: return run_reference(ctx);
  }
  ctx.set_output(0, std::move(out));
}

// One axis of a resize plan as flat arrays: output coordinate o takes the
// samples first[o] .. first[o + 1] - 1.
struct AxisTaps {
  std::vector<int64_t> first, index;
  std::vector<float> weight;
};

AxisTaps flatten(const std::vector<std::vector<ref::ResizeTap>>& taps) {
  AxisTaps a;
  a.first.push_back(0);
  for (const auto& list : taps) {
    for (const auto& t : list) {
      if (t.weight == 0) continue;
      a.index.push_back(t.index);
      a.weight.push_back(float(t.weight));
    }
    a.first.push_back(int64_t(a.index.size()));
  }
  return a;
}

// Whether the axis keeps its length and each output coordinate is its input
// coordinate (a linear filter at scale 1 lists a neighbour with weight 0
// too; a coordinate outside a crop lists none).
bool keeps_axis(const std::vector<std::vector<ref::ResizeTap>>& taps, int64_t length) {
  if (int64_t(taps.size()) != length) return false;
  for (size_t i = 0; i < taps.size(); ++i) {
    if (taps[i].empty()) return false;
    for (const auto& t : taps[i])
      if (t.weight != 0 && (t.index != int64_t(i) || t.weight != 1.0)) return false;
  }
  return true;
}

// Resize and Upsample of float maps that change only their last two axes
// (images, feature maps): the reference's plan of taps, applied in float
// one axis after the other (along rows into a scratch plane, then down the
// columns), the planes in parallel on the budget's threads.
void resize_kernel(ref::KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() != DType::Float32 || x.rank() < 2 || x.numel() == 0) return run_reference(ctx);
  const ref::ResizePlan plan = ref::resize_plan(ctx);
  const int64_t rank = x.rank();
  for (int64_t d = 0; d + 2 < rank; ++d)
    if (!keeps_axis(plan.taps[size_t(d)], x.dim(d))) return run_reference(ctx);
  for (int64_t d = rank - 2; d < rank; ++d)
    for (const auto& list : plan.taps[size_t(d)])
      if (list.empty()) return run_reference(ctx);  // outside a crop: the extrapolation value
  const AxisTaps rows = flatten(plan.taps[size_t(rank - 2)]), cols = flatten(plan.taps[size_t(rank - 1)]);
  const int64_t H = x.dim(-2), W = x.dim(-1), OH = plan.out_dims[size_t(rank - 2)], OW = plan.out_dims[size_t(rank - 1)];
  const int64_t planes = x.numel() / (H * W);
  Tensor out = Tensor::uninitialized(DType::Float32, plan.out_dims);
  const float* in = x.data<float>();
  float* dst = out.data<float>();
  // Two passes, each in parallel over every row it makes (a detector's
  // input is 3 planes, which split badly over threads as whole planes):
  // along each input row some output row reads, into `across`, then down,
  // into the output. A single tap of weight 1 (nearest) is a copy.
  std::vector<char> needed(static_cast<size_t>(H), 0);
  for (int64_t i : rows.index) needed[size_t(i)] = 1;
  auto single = [](const AxisTaps& a, int64_t o) {
    return a.first[size_t(o + 1)] - a.first[size_t(o)] == 1 && a.weight[size_t(a.first[size_t(o)])] == 1.0f;
  };
  bool cols_copy = true;
  for (int64_t o = 0; o < OW && cols_copy; ++o) cols_copy = single(cols, o);
  std::vector<float> across(size_t(planes * H * OW));
  on_budget(planes * H, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      if (!needed[size_t(r % H)]) continue;
      const float* row = in + r * W;
      float* t = across.data() + r * OW;
      if (cols_copy) {
        for (int64_t o = 0; o < OW; ++o) t[o] = row[cols.index[size_t(o)]];
        continue;
      }
      for (int64_t o = 0; o < OW; ++o) {
        float acc = 0;
        for (int64_t k = cols.first[size_t(o)]; k < cols.first[size_t(o + 1)]; ++k)
          acc += cols.weight[size_t(k)] * row[cols.index[size_t(k)]];
        t[o] = acc;
      }
    }
  });
  on_budget(planes * OH, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t p = r / OH, o = r % OH;
      float* line = dst + r * OW;
      const float* plane = across.data() + p * H * OW;
      if (single(rows, o)) {
        std::memcpy(line, plane + rows.index[size_t(rows.first[size_t(o)])] * OW, size_t(OW) * sizeof(float));
        continue;
      }
      std::fill(line, line + OW, 0.0f);
      for (int64_t k = rows.first[size_t(o)]; k < rows.first[size_t(o + 1)]; ++k)
        add_scaled(line, plane + rows.index[size_t(k)] * OW, rows.weight[size_t(k)], OW);
    }
  });
  ctx.set_output(0, std::move(out));
}

// A comparison of float32 or int64 tensors of one shape, or of a tensor and
// a single value (a detector's score threshold over every anchor), in
// parallel chunks; the reference kernel works out a broadcast index for
// every element. Anything else goes to the reference kernel.
template <typename Cmp>
void comparison_kernel(ref::KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const bool same = a.dims() == b.dims(), a_one = a.numel() == 1 && a.rank() <= b.rank(),
             b_one = b.numel() == 1 && b.rank() <= a.rank();
  if (a.dtype() != b.dtype() || (a.dtype() != DType::Float32 && a.dtype() != DType::Int64) || !(same || a_one || b_one))
    return run_reference(ctx);
  Tensor out = Tensor::uninitialized(DType::Bool, same || b_one ? a.dims() : b.dims());
  auto run = [&](auto type) {
    using T = decltype(type);
    const T* x = a.data<T>();
    const T* y = b.data<T>();
    bool* o = out.data<bool>();
    const Cmp cmp;
    // Chunks of 64 Ki elements: a task per element range, not per element.
    constexpr int64_t kChunk = 1 << 16;
    const int64_t n = out.numel();
    on_budget((n + kChunk - 1) / kChunk, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin * kChunk, stop = std::min(n, end * kChunk); i < stop; ++i)
        o[i] = cmp(x[a_one && !same ? 0 : i], y[b_one && !same ? 0 : i]);
    });
  };
  if (a.dtype() == DType::Float32)
    run(float{});
  else
    run(int64_t{});
  ctx.set_output(0, std::move(out));
}

// NonZero of a bool, float32, int64 or int32 tensor in chunks: each chunk's
// count in parallel, then each chunk writes its coordinates from where the
// counts before it end, stepping its multi-index along (a division per
// element cost more than the scan: retinanet's scores are 8 million).
void nonzero_kernel(ref::KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.rank() == 0 ||
      (x.dtype() != DType::Bool && x.dtype() != DType::Float32 && x.dtype() != DType::Int64 && x.dtype() != DType::Int32))
    return run_reference(ctx);
  constexpr int64_t kChunk = 1 << 16;
  const int64_t n = x.numel(), chunks = (n + kChunk - 1) / kChunk, rank = x.rank();
  std::vector<int64_t> first(size_t(chunks) + 1, 0);
  Tensor out;
  ir::dispatch_dtype(x.dtype(), [&](auto type) {
    using T = decltype(type);
    if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, float> || std::is_same_v<T, int64_t> ||
                  std::is_same_v<T, int32_t>) {
      const T* v = x.data<T>();
      on_budget(chunks, [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) {
          int64_t hits = 0;
          for (int64_t i = c * kChunk, stop = std::min(n, i + kChunk); i < stop; ++i) hits += v[i] != T(0);
          first[size_t(c) + 1] = hits;
        }
      });
      for (int64_t c = 0; c < chunks; ++c) first[size_t(c) + 1] += first[size_t(c)];
      const int64_t total = first.back();
      out = Tensor::uninitialized(DType::Int64, {rank, total});
      int64_t* o = out.data<int64_t>();
      on_budget(chunks, [&](int64_t begin, int64_t end) {
        Dims at(size_t(rank), 0);
        for (int64_t c = begin; c < end; ++c) {
          int64_t flat = c * kChunk, j = first[size_t(c)];
          for (int64_t d = rank, rest = flat; d-- > 0;) at[size_t(d)] = rest % x.dim(int(d)), rest /= x.dim(int(d));
          for (const int64_t stop = std::min(n, flat + kChunk); flat < stop; ++flat) {
            if (v[flat] != T(0)) {
              for (int64_t d = 0; d < rank; ++d) o[d * total + j] = at[size_t(d)];
              ++j;
            }
            for (int64_t d = rank; d-- > 0;) {
              if (++at[size_t(d)] < x.dim(int(d))) break;
              at[size_t(d)] = 0;
            }
          }
        }
      });
    }
  });
  ctx.set_output(0, std::move(out));
}

// TopK of float32 rows: the k best found with nth_element and only those
// sorted, where the reference kernel sorts the whole row (retinanet keeps
// 1000 of its scores). The same order as the reference: NaN above every
// number, equal values by lower index first.
void topk_kernel(ref::KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (ctx.opset() < 10 || x.dtype() != DType::Float32 || x.rank() == 0 || ctx.input(1).numel() != 1 ||
      ctx.attr_int("sorted", 1) != 1)
    return run_reference(ctx);
  const int64_t k = ctx.input(1).as_int64(0);
  int64_t axis = ctx.attr_int("axis", -1);
  if (axis < 0) axis += x.rank();
  if (axis < 0 || axis >= x.rank() || k < 0 || k > x.dim(int(axis))) return run_reference(ctx);  // names what is wrong
  const bool largest = ctx.attr_int("largest", 1) != 0;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.dim(int(d));
  for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.dim(int(d));
  const int64_t dim = x.dim(int(axis));
  Dims dims = x.dims();
  dims[size_t(axis)] = k;
  Tensor values = Tensor::uninitialized(DType::Float32, dims), indices = Tensor::uninitialized(DType::Int64, dims);
  const float* in = x.data<float>();
  float* vo = values.data<float>();
  int64_t* io = indices.data<int64_t>();
  on_budget(outer * inner, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(dim));
    std::vector<int64_t> order(static_cast<size_t>(dim));
    for (int64_t r = begin; r < end; ++r) {
      const int64_t o = r / inner, i = r % inner;
      for (int64_t j = 0; j < dim; ++j) row[size_t(j)] = in[(o * dim + j) * inner + i];
      std::iota(order.begin(), order.end(), int64_t(0));
      auto less = [](float a, float b) { return (a != a || b != b) ? (a == a && b != b) : a < b; };
      auto before = [&](int64_t a, int64_t b) {
        const float va = row[size_t(a)], vb = row[size_t(b)];
        if (largest ? less(vb, va) : less(va, vb)) return true;
        if (largest ? less(va, vb) : less(vb, va)) return false;
        return a < b;
      };
      if (k < dim) std::nth_element(order.begin(), order.begin() + k, order.end(), before);
      std::sort(order.begin(), order.begin() + k, before);
      for (int64_t j = 0; j < k; ++j) {
        vo[(o * k + j) * inner + i] = row[size_t(order[size_t(j)])];
        io[(o * k + j) * inner + i] = order[size_t(j)];
      }
    }
  });
  ctx.set_output(0, std::move(values));
  ctx.set_output(1, std::move(indices));
}

}  // namespace

const ref::KernelRegistry& interpreter_kernels() {
  static const ref::KernelRegistry kernels = [] {
    ref::KernelRegistry r = ref::KernelRegistry::instance();
    r.add("Gemm", &gemm_kernel);
    r.add("MatMul", &matmul_kernel);
    r.add("RoiAlign", &roi_align_kernel);
    r.add("Expand", &expand_kernel);
    r.add("ConstantOfShape", &constant_of_shape_kernel);
    r.add("ScatterElements", &scatter_elements_kernel);
    r.add("Resize", &resize_kernel);
    r.add("Pad", &pad_kernel);
    r.add("Upsample", &resize_kernel);
    r.add("Greater", &comparison_kernel<std::greater<>>);
    r.add("GreaterOrEqual", &comparison_kernel<std::greater_equal<>>);
    r.add("Less", &comparison_kernel<std::less<>>);
    r.add("LessOrEqual", &comparison_kernel<std::less_equal<>>);
    r.add("Equal", &comparison_kernel<std::equal_to<>>);
    r.add("NonZero", &nonzero_kernel);
    r.add("TopK", &topk_kernel);
    return r;
  }();
  return kernels;
}

}  // namespace kiln::cpu
