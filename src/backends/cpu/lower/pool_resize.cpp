// Pooling (MaxPool, AveragePool and their global forms) and Resize: oneDNN
// pooling and resampling in the layout the activations are in, a host
// kernel for one channels-last image, and the portable pooling kernels.
#include <cmath>
#include <limits>
#include <map>
#include <string_view>

#include "backends/cpu/host_kernels.hpp"
#include "backends/cpu/lower/context.hpp"
#include "backends/cpu/lower/families.hpp"
#include "backends/cpu/lower/fusion.hpp"
#include "backends/cpu/portable/kernels.h"
#include "backends/cpu/thread_budget.hpp"
#include "backends/reference/kernel_context.hpp"
#include "backends/reference/ops/op_util.hpp"
#include "backends/reference/resize_plan.hpp"

namespace kiln::cpu::lowering {

namespace {

// Whether oneDNN's resampling reads these taps along an axis of `in`
// samples (one list per output coordinate). Its mapping, in float: source
// s = (o + 0.5) * in / out - 0.5; nearest takes round(s), halves away from
// zero; linear floor(s) and floor(s) + 1 weighted by the distance, indices
// clamped to the axis. An axis that keeps its length maps o to o. The
// reference works in double: linear weights may differ by the rounding of
// s in float (a few ulp of `in`; RetinaNet's 320 -> 800 image resize).
bool onednn_takes_these_taps(const std::vector<std::vector<ref::ResizeTap>>& taps, int64_t in, bool linear) {
  const int64_t out = int64_t(taps.size());
  const double tolerance = 1e-6 + 4 * double(std::numeric_limits<float>::epsilon()) * double(in);
  auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
  for (int64_t o = 0; o < out; ++o) {
    const float s = (float(o) + 0.5f) * float(in) / float(out) - 0.5f;
    std::map<int64_t, double> want, have;
    if (linear) {
      const float lo = std::floor(s);
      want[clamp(int64_t(lo))] += 1.0 - double(s - lo);
      want[clamp(int64_t(lo) + 1)] += double(s - lo);
    } else {
      want[clamp(int64_t(std::round(s)))] = 1;
    }
    for (const ref::ResizeTap& t : taps[size_t(o)]) have[t.index] += t.weight;
    for (auto* m : {&want, &have})
      for (auto it = m->begin(); it != m->end();) it = std::fabs(it->second) < 1e-6 ? m->erase(it) : std::next(it);
    if (want.size() != have.size()) return false;
    for (auto w = want.begin(), h = have.begin(); w != want.end(); ++w, ++h)
      if (w->first != h->first || std::fabs(w->second - h->second) > tolerance) return false;
  }
  return true;
}

}  // namespace

bool lower_pool(Context& cx, const ir::Node& n) {
  if (n.inputs.empty()) return false;
  // The maximum of quantized values is the quantized maximum (fuse_qdq).
  const DType type = cx.dtype(n.inputs[0]);
  const bool quantized = n.op_type == "MaxPool" && (type == DType::UInt8 || type == DType::Int8);
  if (!cx.is_f32(n.inputs[0]) && !quantized) return false;
  if (!cx.only_first_output_wanted(n)) return false;
  const Dims in = cx.dims(n.inputs[0]), out = cx.dims(n.outputs[0]);
  if (in.size() < 3 || in.size() > 5) return false;
  ref::KernelContext ctx(n, {}, nullptr);
  const Dims spatial(in.begin() + 2, in.end());
  const bool global = n.op_type.rfind("Global", 0) == 0;
  dnnl::algorithm alg = dnnl::algorithm::pooling_max;
  ref::Geometry geo;
  if (global) {
    geo.kernel = spatial;
    geo.strides.assign(spatial.size(), 1);
    geo.dilations.assign(spatial.size(), 1);
    geo.pad_begin.assign(spatial.size(), 0);
    geo.pad_end.assign(spatial.size(), 0);
    geo.out.assign(spatial.size(), 1);
    if (n.op_type == "GlobalAveragePool") alg = dnnl::algorithm::pooling_avg_exclude_padding;
  } else {
    if (ctx.attr_int("storage_order", 0) != 0 && n.outputs.size() > 1) return false;
    if (n.op_type == "AveragePool")
      alg = ctx.attr_int("count_include_pad", 0) ? dnnl::algorithm::pooling_avg_include_padding
                                                 : dnnl::algorithm::pooling_avg_exclude_padding;
    geo = ref::forward_geometry(ctx, spatial, ctx.attr_ints("kernel_shape"), ctx.attr_int("ceil_mode", 0) != 0);
    // ceil_mode: oneDNN sizes its output by floor, so the extra window is end padding.
    for (size_t d = 0; d < spatial.size(); ++d)
      geo.pad_end[d] =
          std::max(geo.pad_end[d], (geo.out[d] - 1) * geo.strides[d] + geo.extent(d) - spatial[d] - geo.pad_begin[d]);
    if (alg == dnnl::algorithm::pooling_avg_include_padding && ctx.attr_int("ceil_mode", 0)) return false;
  }
  if (Dims(out.begin() + 2, out.end()) != geo.out) return false;
  const md src_md = cx.val(n.inputs[0]).layout;
  // One channels-last image: a pixel split (ChannelsLastMeanKernel) beats
  // oneDNN's split by channel block. Across images oneDNN splits by image,
  // which was faster (efficientnet_v2_s at batch 8: 2.1 against 4.1 ms).
  if (n.op_type == "GlobalAveragePool" && cx.host_kernels && in[0] == 1 && src_md == channels_last(in)) {
    const int64_t pixels = ir::checked_numel(spatial);
    auto kernel = std::make_unique<ChannelsLastMeanKernel>(pixels, in[1], std::min<int64_t>(omp_get_max_threads(), pixels));
    const int scratch = cx.add_buffer(Buffer::Kind::Arena, 0, kernel->scratch_bytes(), n.outputs[0] + "#partial sums");
    // [N, C, 1, ...]: channels-last bytes, which the convolution after a
    // squeeze-and-excitation pooling reads as they are.
    const int dst = cx.define(n.outputs[0], channels_last(out), false);
    cx.add_kernel(n.describe(), {cx.val(n.inputs[0]).buffer, dst, scratch}, {0, 1, 1}, std::move(kernel));
    cx.compiled();
    return true;
  }
  dnnl::memory::dims dil;
  for (int64_t d : geo.dilations) dil.push_back(d - 1);
  auto describe = [&](const md& src) {
    dnnl::pooling_v2_forward::desc desc(dnnl::prop_kind::forward_inference, alg, src,
                                        md(to_dnnl(out), *onednn_type(type), dnnl::memory::format_tag::any), to_dnnl(geo.strides),
                                        to_dnnl(geo.kernel), dil, to_dnnl(geo.pad_begin), to_dnnl(geo.pad_end));
    return dnnl::pooling_v2_forward::primitive_desc(desc, user_scratchpad(), cpu_engine());
  };
  dnnl::pooling_v2_forward::primitive_desc pd = describe(src_md);
  int src = cx.val(n.inputs[0]).buffer;
  // On plain (channels-first) input oneDNN 2.6 pools with a simple C++
  // loop: after a GroupNorm in a 1-D conv net, 0.56 ms against 0.065 for
  // its channels-last kernel. A reorder there costs less than the
  // difference.
  if (src_md == plain_md(in) && !global && std::string_view(pd.impl_info_str()).rfind("jit", 0) != 0) {
    const md cl = channels_last(in);
    if (auto other = describe(cl); std::string_view(other.impl_info_str()).rfind("jit", 0) == 0) {
      pd = other;
      src = cx.as_layout(n.inputs[0], cl);
    }
  }
  Fused f;
  f.value = n.outputs[0];
  cx.compiled();
  emit_with_dst(cx, n.describe(), pd, {{DNNL_ARG_SRC, pd.src_desc()}}, {src}, {}, f, pd.dst_desc(), is_plain(pd.dst_desc(), out));
  return true;
}

// A float Resize or Upsample of the spatial axes whose plan of taps (the
// reference kernel's own) is what oneDNN's resampling computes: FPN's
// nearest upsampling by whole factors, a detector's bilinear image resize.
// It then runs in the activations' blocked layout; as a reference-kernel
// step it needed them plain, with reorders on both sides: FPN's 2x nearest
// upsampling of 256 channels from 25x25 took 1.14-1.17 ms in the
// interpreter's kernel plus a 0.06 ms reorder, 0.15-0.17 ms here. The other
// Resizes run the interpreter's kernel (interpreter/resize.cpp: the same
// plan of taps, on plain values only); the reference kernel stays the
// oracle both are tested against.
bool lower_resize(Context& cx, const ir::Node& n) {
  if (n.inputs.empty() || !cx.is_f32(n.inputs[0]) || !cx.only_first_output_wanted(n)) return false;
  const Dims in = cx.dims(n.inputs[0]), out = cx.dims(n.outputs[0]);
  if (in.size() < 3 || in.size() > 5 || in[0] != out[0] || in[1] != out[1]) return false;
  if (ir::checked_numel(in) == 0 || ir::checked_numel(out) == 0) return false;
  // The plan reads the other inputs' values (constants here) and only the shape of X.
  static const char shape_only = 0;
  const ir::Tensor x = ir::Tensor::view(DType::Float32, in, const_cast<char*>(&shape_only));
  std::vector<const ir::Tensor*> inputs{&x};
  for (size_t i = 1; i < n.inputs.size(); ++i) {
    inputs.push_back(n.inputs[i].empty() ? nullptr : cx.constant(n.inputs[i]));
    if (!n.inputs[i].empty() && !inputs.back()) return false;
  }
  const ref::KernelContext ctx(n, inputs, nullptr);
  const std::string mode = ctx.attr_string("mode", "nearest");
  if (mode != "nearest" && mode != "linear") return false;
  ref::ResizePlan plan;
  try {
    plan = ref::resize_plan(ctx);
  } catch (const ir::Error&) {
    return false;  // the reference kernel reports it at run time
  }
  if (plan.out_dims != out) return false;
  for (size_t d = 0; d < in.size(); ++d)
    if (!onednn_takes_these_taps(plan.taps[d], in[d], mode == "linear")) return false;
  const md src_md = cx.val(n.inputs[0]).layout;
  dnnl::resampling_forward::desc desc(dnnl::prop_kind::forward_inference,
                                      mode == "linear" ? dnnl::algorithm::resampling_linear : dnnl::algorithm::resampling_nearest,
                                      src_md, md(to_dnnl(out), dt::f32, dnnl::memory::format_tag::any));
  dnnl::resampling_forward::primitive_desc pd(desc, user_scratchpad(), cpu_engine());
  Fused f;
  f.value = n.outputs[0];
  cx.compiled();
  emit_with_dst(cx, n.describe(), pd, {{DNNL_ARG_SRC, src_md}}, {cx.val(n.inputs[0]).buffer}, {}, f, pd.dst_desc(),
                is_plain(pd.dst_desc(), out));
  return true;
}

bool portable_pool(Context& cx, const ir::Node& n) {
  if (n.inputs.empty()) return false;
  // The maximum of quantized values is the quantized maximum (fuse_qdq).
  const DType type = cx.dtype(n.inputs[0]);
  const bool quantized = n.op_type == "MaxPool" && (type == DType::UInt8 || type == DType::Int8);
  if (!cx.is_f32(n.inputs[0]) && !quantized) return false;
  if (!cx.only_first_output_wanted(n)) return false;
  const Dims in = cx.dims(n.inputs[0]), out = cx.dims(n.outputs[0]);
  if (in.size() != 3 && in.size() != 4) return false;
  ref::KernelContext ctx(n, {}, nullptr);
  const bool ceil = ctx.attr_int("ceil_mode", 0) != 0;
  const bool include_pad = n.op_type == "AveragePool" && ctx.attr_int("count_include_pad", 0) != 0;
  // Padding counted into a window that ceil mode runs past the end: the
  // kernel would count the overhang too.
  if (include_pad && ceil) return false;
  ref::Geometry geo = ref::forward_geometry(ctx, Dims(in.begin() + 2, in.end()), ctx.attr_ints("kernel_shape"), ceil);
  if (Dims(out.begin() + 2, out.end()) != geo.out) return false;
  if (n.op_type == "AveragePool")
    for (int64_t d : geo.dilations)
      if (d != 1) return false;
  auto two = [&](const Dims& d, int64_t one) { return d.size() == 1 ? Dims{one, d[0]} : d; };
  const Dims hw = two(Dims(in.begin() + 2, in.end()), 1), k = two(geo.kernel, 1), st = two(geo.strides, 1),
             pad = two(geo.pad_begin, 0), dil = two(geo.dilations, 1), o = two(geo.out, 1);
  std::vector<Call::Arg> a{Call::i64(in[0] * in[1]), Call::i64(hw[0]),  Call::i64(hw[1]), Call::i64(o[0]),
                           Call::i64(o[1]),          Call::i64(k[0]),   Call::i64(k[1]),  Call::i64(st[0]),
                           Call::i64(st[1]),         Call::i64(pad[0]), Call::i64(pad[1])};
  if (n.op_type == "MaxPool") {
    a.push_back(Call::i64(dil[0]));
    a.push_back(Call::i64(dil[1]));
    if (quantized) a.push_back(Call::i32(type == DType::Int8 ? KILN_PK_INT8 : KILN_PK_UINT8));
  } else {
    a.push_back(Call::i32(include_pad));
  }
  a.push_back(Call::buffer(0));
  a.push_back(Call::buffer(1));
  const int src = cx.plain(n.inputs[0]);
  cx.compiled();
  cx.add_call(n.describe(), {src, cx.define_plain(n.outputs[0])}, {0, 1},
              {n.op_type != "MaxPool" ? "kiln_pk_avg_pool2d"
               : quantized            ? "kiln_pk_max_pool2d_8bit"
                                      : "kiln_pk_max_pool2d",
               std::move(a), false});
  return true;
}

bool portable_global_pool(Context& cx, const ir::Node& n) {
  if (n.inputs.size() != 1 || !cx.is_f32(n.inputs[0])) return false;
  const Dims in = cx.dims(n.inputs[0]);
  if (in.size() < 3) return false;
  const int64_t planes = in[0] * in[1];
  const int src = cx.plain(n.inputs[0]);
  cx.compiled();
  cx.add_call(n.describe(), {src, cx.define_plain(n.outputs[0])}, {0, 1},
              {"kiln_pk_global_pool",
               {Call::i64(planes), Call::i64(ir::checked_numel(in) / std::max<int64_t>(planes, 1)),
                Call::i32(n.op_type == "GlobalMaxPool"), Call::buffer(0), Call::buffer(1)},
               false});
  return true;
}

}  // namespace kiln::cpu::lowering
