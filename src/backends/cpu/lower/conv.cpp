// Convolutions (Conv, ConvTranspose): oneDNN convolutions and
// deconvolutions with their weights reordered once, fused post-ops, and
// the portable kernel's conv2d.
#include <algorithm>
#include <numeric>

#include "backends/cpu/lower/context.hpp"
#include "backends/cpu/lower/families.hpp"
#include "backends/cpu/lower/fusion.hpp"
#include "backends/cpu/lower/portable_conv_shape.hpp"
#include "backends/cpu/lowering.hpp"
#include "backends/cpu/portable/kernels.h"
#include "backends/reference/kernel_context.hpp"
#include "backends/reference/ops/op_util.hpp"

namespace kiln::cpu::lowering {

namespace {

// A convolution's SiLU runs as a loop after it from this many output values
// (see lower_conv).
constexpr int64_t kSiluLoopFrom = 65536;

// A dense layout of dims `whole` with its axes in the order of `like` (a
// layout without blocking), and a view of it with dims `part` that takes
// every stride-th element of each spatial axis (those after N and C).
// Nothing when `like` is blocked.
std::optional<std::pair<md, md>> strided_view(const md& like, const Dims& whole, const Dims& part, const Dims& strides) {
  const dnnl_memory_desc_t& d = like.data;
  if (d.format_kind != dnnl_blocked || d.format_desc.blocking.inner_nblks != 0 || size_t(d.ndims) != whole.size() ||
      part.size() != whole.size() || strides.size() + 2 != whole.size())
    return std::nullopt;
  std::vector<size_t> order(whole.size());  // outermost first
  std::iota(order.begin(), order.end(), 0);
  const auto* like_strides = d.format_desc.blocking.strides;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return like_strides[a] > like_strides[b]; });
  dnnl::memory::dims whole_strides(whole.size()), view_strides(whole.size());
  int64_t step = 1;
  for (size_t k = order.size(); k-- > 0;) {
    whole_strides[order[k]] = step;
    step *= whole[order[k]];
  }
  for (size_t i = 0; i < whole.size(); ++i) view_strides[i] = whole_strides[i] * (i < 2 ? 1 : strides[i - 2]);
  return std::make_pair(md(to_dnnl(whole), dt::f32, whole_strides), md(to_dnnl(part), dt::f32, view_strides));
}

// A ConvTranspose whose kernel equals its stride, lowered as a 1x1
// convolution to taps x C channels (tap t's channel c at t * C + c, the taps
// in row-major order of the kernel), then one copy: views of that output
// (`taps`) and of the ConvTranspose's (`out`) with the same dims
// [N, C/B, X1, k1, ..., Xs, ks, B], where X are the input's spatial axes,
// k the kernel's and B the channel block (none when 1). Both layouts must be
// plain strided or in the same channel blocks, with C a multiple of them.
std::optional<std::pair<md, md>> tap_views(const md& taps, const md& out, const Dims& kernel, int64_t channels) {
  auto block_of = [](const dnnl_memory_desc_t& d) -> int64_t {
    if (d.format_kind != dnnl_blocked || d.offset0 != 0 || d.extra.flags != 0) return -1;
    const auto& b = d.format_desc.blocking;
    if (b.inner_nblks == 0) return 1;
    return b.inner_nblks == 1 && b.inner_idxs[0] == 1 ? b.inner_blks[0] : -1;
  };
  const int64_t block = block_of(taps.data);
  const size_t spatial = kernel.size();
  if (block < 1 || block != block_of(out.data) || channels % block || size_t(taps.data.ndims) != spatial + 2 ||
      size_t(out.data.ndims) != spatial + 2)
    return std::nullopt;
  const auto* ts = taps.data.format_desc.blocking.strides;
  const auto* os = out.data.format_desc.blocking.strides;
  dnnl::memory::dims view = {taps.data.dims[0], channels / block}, from = {ts[0], ts[1]}, to = {os[0], os[1]};
  int64_t later_taps = 1;  // taps of the kernel axes after this one
  for (size_t d = spatial; d-- > 0;) {
    view.insert(view.begin() + 2, {taps.data.dims[2 + d], kernel[d]});
    from.insert(from.begin() + 2, {ts[2 + d], ts[1] * (channels / block) * later_taps});
    to.insert(to.begin() + 2, {os[2 + d] * kernel[d], os[2 + d]});
    later_taps *= kernel[d];
  }
  if (block > 1) {
    view.push_back(block);
    from.push_back(1);
    to.push_back(1);
  }
  return std::make_pair(md(view, dt::f32, from), md(view, dt::f32, to));
}

// Left to choose (`any`), oneDNN 2.6 on AVX-512 takes channels-last and its
// brgemm kernels, the faster ones while the activations stay in cache. On
// large activations its 1x1 kernels in 16-channel blocks are faster, most of
// all with a residual sum or an eltwise post-op to apply (resnet50's 64->256
// 1x1 at 56x56, batch 8: 2.6 against 4.0 ms with the sum), while its 3x3
// kernels lose less there than on small ones. So a convolution whose input
// or output is large computes in blocks of 16 channels.
bool prefers_channel_blocks(const Tuning& tuning, const Dims& in, const Dims& out) {
  return 4 * std::max(ir::checked_numel(in), ir::checked_numel(out)) >= tuning.channel_blocks_from;
}

// x * sigmoid(x) over every value of `from`'s buffer, whatever its layout
// (the padding of a channel block stays 0), which then holds `f.value`.
void emit_silu(Context& cx, const std::string& label, const std::string& from, const Fused& f) {
  const Context::Val v = cx.val(from);
  auto loop = std::make_unique<Loop>();
  loop->shape = {int64_t(v.layout.get_size() / 4)};
  loop->operands.push_back({0, {1}});
  loop->code = {{Loop::Op::Load, 0, -1, 0, 0}, {Loop::Op::Sigmoid, 0, -1, 0, 0}, {Loop::Op::Mul, 0, 1, 0, 0}};
  loop->stores = {{2, 0}};
  Step s;
  s.label = "SiLU in place after " + label;
  s.args = {v.buffer};
  s.writes = {1};
  s.loop = std::move(loop);
  cx.vals[f.value] = v;
  cx.program.steps.push_back(std::move(s));
  absorb(cx, f);
}

// A convolution's step (either direction): its weights reordered once into
// the layout the primitive chose, the source read in the layout it wants.
// Weights and bias that are values of the run (graph inputs, or computed)
// rather than constants are reordered into that layout by a step of their
// own on every run: no trials of other implementations then, as those
// reorder constant weights once.
void emit_weighted(Context& cx, const ir::Node& n, const dnnl::primitive_desc_base& pd, int src, const md& user_wei,
                   const ir::Tensor* w, const ir::Tensor* b, const md& bias_md, const Fused& f) {
  std::vector<std::pair<int, md>> rt{{DNNL_ARG_SRC, pd.src_desc(0)}};
  std::vector<int> bufs{src};
  std::unordered_map<int, dnnl::memory> constants;
  if (w) {
    constants[DNNL_ARG_WEIGHTS] = cx.constant_memory(user_wei, w->raw(), pd.weights_desc(0));
  } else {
    const std::string& name = n.inputs[1];
    const int reordered = cx.add_buffer(Buffer::Kind::Arena, 0, int64_t(pd.weights_desc(0).get_size()), name + "#weights");
    cx.add_reorder("weights " + name + " of " + n.describe(), cx.plain(name), reordered, user_wei, pd.weights_desc(0));
    rt.push_back({DNNL_ARG_WEIGHTS, pd.weights_desc(0)});
    bufs.push_back(reordered);
  }
  if (b) {
    constants[DNNL_ARG_BIAS] = cx.constant_memory(bias_md, b->raw(), bias_md);
  } else if (bias_md) {
    rt.push_back({DNNL_ARG_BIAS, bias_md});
    bufs.push_back(cx.plain(n.inputs[2]));
  }
  cx.compiled();
  emit_with_dst(cx, n.describe(), pd, std::move(rt), std::move(bufs), std::move(constants), f, pd.dst_desc(0),
                is_plain(pd.dst_desc(0), cx.dims(f.value)));
  if (cx.trials && w) cx.trials->push_back({cx.program.steps.size() - 1, user_wei, w->raw()});
}

void emit_conv(Context& cx, const ir::Node& n, const dnnl::convolution_forward::primitive_desc& pd, int src, const ir::Tensor* w,
               const ir::Tensor* b, const dnnl::memory::dims& wei, const md& bias_md, int64_t group, const Fused& f) {
  const Dims wdims = cx.dims(n.inputs[1]);
  const size_t rank = wdims.size();
  md user_wei = group > 1 ? md(wei, dt::f32,
                               rank == 3   ? dnnl::memory::format_tag::goiw
                               : rank == 4 ? dnnl::memory::format_tag::goihw
                                           : dnnl::memory::format_tag::goidhw)
                          : plain_md(wdims);
  emit_weighted(cx, n, pd, src, user_wei, w, b, bias_md, f);
}

// A kernel as large as its stride puts each input pixel's products with
// the kernel's taps side by side in the output, none overlapping: a 1x1
// convolution to taps x C_out channels computes them all, and one copy
// moves each tap's channels to its pixel (tap_views). oneDNN 2.6's
// deconvolution took 6-10x as long as the two for a U-Net's 2x2
// upsampling (32 -> 16 channels, 64x64 -> 128x128, batch 8: 6.8 ms against
// 0.67 + 0.44). Activations fuse into the convolution; a residual sum does
// not (its layout is the output's).
bool lower_conv_transpose_by_taps(Context& cx, const ir::Node& n, const ir::Tensor* w, const ir::Tensor* b, const Dims& in,
                                  const Dims& out, const Dims& kernel) {
  const int64_t taps = ir::checked_numel(kernel), channels = out[1], in_channels = in[1], wide = taps * channels;
  // In channel blocks where a convolution would compute so, or where the input already is.
  const bool blocked =
      channels % 16 == 0 && (prefers_channel_blocks(cx.tuning, in, out) || channel_block(cx.val(n.inputs[0]).layout) == 16);
  auto layout = [&](const Dims& d) {
    return blocked ? md(to_dnnl(d), dt::f32, channel_blocked_tag(d.size())) : channels_last(d);
  };
  Dims taps_dims = in;
  taps_dims[1] = wide;
  const md taps_md = layout(taps_dims);
  Fused f = fuse_after(cx, n.outputs[0], false);
  const bool to_output = cx.output_of.count(f.value) > 0;
  const md out_md = to_output ? plain_md(out) : layout(out);
  const auto views = tap_views(taps_md, out_md, kernel, channels);
  if (!views) return false;

  Dims wei_dims = {wide, in_channels};
  wei_dims.resize(in.size(), 1);
  const md bias_md = b ? md({wide}, dt::f32, dnnl::memory::format_tag::x) : md();
  const dnnl::memory::dims ones(kernel.size(), 1), zeros(kernel.size(), 0);
  dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                       md(to_dnnl(in), dt::f32, dnnl::memory::format_tag::any),
                                       md(to_dnnl(wei_dims), dt::f32, dnnl::memory::format_tag::any), bias_md, taps_md, ones,
                                       zeros, zeros, zeros);
  dnnl::convolution_forward::primitive_desc pd(desc, post_op_attr(f), cpu_engine());
  if (reference_kernel(pd) || pd.dst_desc() != taps_md) return false;

  // ONNX's weights [C_in, C_out, taps] as the convolution's [taps x C_out, C_in], the bias once per tap.
  auto weights = std::make_shared<std::vector<float>>(size_t(wide * in_channels));
  const float* from = w->data<float>();
  for (int64_t i = 0; i < in_channels; ++i)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t t = 0; t < taps; ++t) (*weights)[size_t((t * channels + c) * in_channels + i)] = *from++;
  std::unordered_map<int, dnnl::memory> constants{
      {DNNL_ARG_WEIGHTS, cx.constant_memory(plain_md(wei_dims), weights->data(), pd.weights_desc(), weights)}};
  if (b) {
    auto bias = std::make_shared<std::vector<float>>(size_t(wide));
    for (int64_t t = 0; t < taps; ++t) std::copy_n(b->data<float>(), channels, bias->begin() + t * channels);
    constants[DNNL_ARG_BIAS] = cx.constant_memory(bias_md, bias->data(), bias_md, bias);
  }
  cx.compiled();
  const int src = cx.as_layout(n.inputs[0], pd.src_desc());
  const int products = cx.add_buffer(Buffer::Kind::Arena, 0, int64_t(taps_md.get_size()), n.outputs[0] + "#taps");
  cx.add_primitive(n.describe(), pd, {src, products}, {0, 1}, {{DNNL_ARG_SRC, pd.src_desc()}, {DNNL_ARG_DST, taps_md}},
                   std::move(constants));
  cx.add_reorder("taps to pixels " + f.value, products, cx.define(f.value, out_md, to_output), views->first, views->second);
  absorb(cx, f);
  return true;
}

// channel when only depthwise convolutions (one input channel per group)
// read it, as they split their work by channel too. In mobilenet_v2 the
// expansions then leave each depthwise step its input in the same core's
// cache (the bundle 3% faster on 2 threads).
// How a convolution writing `v` splits its outputs over threads: by
// channel when only depthwise convolutions (one input channel per group)
// read it, as they split their work by channel too. In mobilenet_v2 the
// expansions then leave each depthwise step its input in the same core's
// cache (the bundle 3% faster on 2 threads).
int32_t conv_split(Context& cx, const std::string& v) {
  const auto& readers = cx.consumers(v);
  if (readers.empty()) return KILN_PK_SPLIT_ANY;
  for (size_t i : readers) {
    const ir::Node& c = cx.graph.nodes[i];
    if (c.op_type != "Conv" || !c.domain.empty() || c.inputs.size() < 2 || c.inputs[0] != v) return KILN_PK_SPLIT_ANY;
    const Dims wd = cx.dims(c.inputs[1]);
    if (wd.size() < 3 || wd[1] != 1 || ref::KernelContext(c, {}, nullptr).attr_int("group", 1) <= 1) return KILN_PK_SPLIT_ANY;
  }
  return KILN_PK_SPLIT_CHANNELS;
}

}  // namespace

bool lower_conv(Context& cx, const ir::Node& n) {
  if (n.inputs.size() < 2 || !cx.is_f32(n.inputs[0]) || !cx.is_f32(n.inputs[1]) || n.outputs.size() != 1) return false;
  // Weights and bias are usually constants, but may be values of the run.
  const bool has_bias = n.inputs.size() > 2 && !n.inputs[2].empty();
  if (has_bias && !cx.is_f32(n.inputs[2])) return false;
  const ir::Tensor* w = cx.constant(n.inputs[1]);
  const ir::Tensor* b = has_bias ? cx.constant(n.inputs[2]) : nullptr;
  const Dims in = cx.dims(n.inputs[0]), out = cx.dims(n.outputs[0]), wdims = cx.dims(n.inputs[1]);
  const size_t rank = in.size();
  if (rank < 3 || rank > 5 || wdims.size() != rank) return false;
  if (has_bias && cx.dims(n.inputs[2]) != Dims{wdims[0]}) return false;
  ref::KernelContext ctx(n, {}, nullptr);
  const int64_t group = ctx.attr_int("group", 1);
  // A group that does not split the channels evenly is the reference kernel's to refuse.
  if (group < 1 || in[1] != wdims[1] * group || wdims[0] % group) return false;
  Dims kernel(wdims.begin() + 2, wdims.end());
  ref::Geometry geo = ref::forward_geometry(ctx, Dims(in.begin() + 2, in.end()), kernel, false);
  if (Dims(out.begin() + 2, out.end()) != geo.out) return false;

  dnnl::memory::dims wei;
  if (group > 1) {
    wei = {group, wdims[0] / group};
    wei.insert(wei.end(), wdims.begin() + 1, wdims.end());
  } else {
    wei = to_dnnl(wdims);
  }
  dnnl::memory::dims dil;
  for (int64_t d : geo.dilations) dil.push_back(d - 1);  // oneDNN counts the gaps
  Fused f = fuse_after(cx, n.outputs[0], true);
  // oneDNN 2.6's swish post-op costs about 0.4 ns per value, more than
  // the convolution itself on a large activation (EfficientNet-B0's 32
  // channels at 112x112, depthwise: 0.07 ms alone, 0.23-0.35 with it). A
  // generated loop on the same threads, in place, costs about 0.1 ns per
  // value (as measured in the model: 0.70 -> 0.28 + 0.36 ms on its 1x1 16->96
  // convolution at 112x112). On small activations the two cost about
  // the same, and the extra step is not worth it.
  Fused silu;
  if (f.eltwise.size() == 1 && f.eltwise[0].alg == dnnl::algorithm::eltwise_swish && f.sum_position < 0 &&
      ir::checked_numel(out) >= kSiluLoopFrom) {
    silu = std::exchange(f, Fused{});
    f.value = n.outputs[0];
  }
  md bias_md = has_bias ? md({wdims[0]}, dt::f32, dnnl::memory::format_tag::x) : md();
  auto describe = [&](const Dims& src, const Dims& strides) {
    auto with = [&](bool blocked, dnnl::algorithm alg = dnnl::algorithm::convolution_direct) {
      // An image's 3 channels are not padded to 16: oneDNN reads them as they are.
      auto layout = [&](const Dims& d) {
        return md(to_dnnl(d), dt::f32, blocked && d[1] >= 16 ? channel_blocked_tag(d.size()) : dnnl::memory::format_tag::any);
      };
      dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, alg, layout(src),
                                           md(wei, dt::f32, dnnl::memory::format_tag::any), bias_md, layout(out),
                                           to_dnnl(strides), dil, to_dnnl(geo.pad_begin), to_dnnl(geo.pad_end));
      return dnnl::convolution_forward::primitive_desc(desc, post_op_attr(f), cpu_engine());
    };
    // oneDNN 2.6's Winograd kernels (AVX-512 only, in 16-channel blocks)
    // run ResNet's 3x3 convolutions 1.3-2.1x faster than its direct ones,
    // at batch 1 and 8 alike (relative error 2e-6). Channels in whole
    // blocks: winograd_weights.hpp transforms only unpadded weights.
    const bool square3 = kernel == Dims{3, 3} && std::all_of(strides.begin(), strides.end(), [](int64_t s) { return s == 1; }) &&
                         std::all_of(geo.dilations.begin(), geo.dilations.end(), [](int64_t d) { return d == 1; });
    if (square3 && group == 1 && in[1] % 16 == 0 && out[1] % 16 == 0 && cx.tuning.winograd && w) {
      try {
        return with(true, dnnl::algorithm::convolution_winograd);
      } catch (const dnnl::error&) {  // not on this CPU, or not for these pads
      }
    }
    if (prefers_channel_blocks(cx.tuning, in, out)) {
      // Only where oneDNN has a fast kernel for the blocks (not for some
      // grouped shapes, for one): its reference kernel is never worth it.
      auto pd = with(true);
      if (!reference_kernel(pd)) return pd;
    }
    return with(false);
  };
  auto emit = [&](const dnnl::convolution_forward::primitive_desc& pd, int src) {
    emit_conv(cx, n, pd, src, w, b, wei, bias_md, group, f);
    if (!silu.nodes.empty()) emit_silu(cx, n.describe(), n.outputs[0], silu);
    return true;
  };
  // A strided 1x1 convolution reads only every stride-th pixel. oneDNN 2.6
  // runs some of these 1.5-3.4x slower than a copy of those pixels (1/stride^2
  // of the input) followed by a unit-stride convolution: resnet50's 512->1024
  // projection; its others, and resnet18's, cost about the same either way.
  // So the lowering subsamples first where the layouts allow. oneDNN accepts
  // a strided view only when stride x length stays within each axis: every
  // axis's length must be a multiple of its stride.
  bool subsample = std::any_of(geo.strides.begin(), geo.strides.end(), [](int64_t s) { return s > 1; });
  for (size_t i = 0; i < kernel.size(); ++i)
    subsample &= kernel[i] == 1 && geo.pad_begin[i] == 0 && geo.pad_end[i] == 0 && in[i + 2] % geo.strides[i] == 0;
  if (subsample) {
    Dims picked = in;
    std::copy(geo.out.begin(), geo.out.end(), picked.begin() + 2);
    const auto pd = describe(picked, Dims(geo.strides.size(), 1));
    // Read the input in the layout it has where that is unblocked, else in the convolution's.
    const md& current = cx.val(n.inputs[0]).layout;
    auto view = current.dims() == to_dnnl(in) ? strided_view(current, in, picked, geo.strides) : std::nullopt;
    if (!view) view = strided_view(pd.src_desc(), in, picked, geo.strides);
    if (view) {
      const int whole = cx.as_layout(n.inputs[0], view->first);
      const int src = cx.add_buffer(Buffer::Kind::Arena, 0, int64_t(pd.src_desc().get_size()), n.inputs[0] + "#subsampled");
      cx.add_reorder("subsample " + n.inputs[0], whole, src, view->second, pd.src_desc());
      return emit(pd, src);
    }
  }
  const auto pd = describe(in, geo.strides);
  return emit(pd, cx.as_layout(n.inputs[0], pd.src_desc()));
}

bool lower_conv_transpose(Context& cx, const ir::Node& n) {
  if (n.inputs.size() < 2 || !cx.is_f32(n.inputs[0]) || !cx.is_f32(n.inputs[1]) || n.outputs.size() != 1) return false;
  // Weights and bias are usually constants, but may be values of the run.
  const bool has_bias = n.inputs.size() > 2 && !n.inputs[2].empty();
  if (has_bias && !cx.is_f32(n.inputs[2])) return false;
  const ir::Tensor* w = cx.constant(n.inputs[1]);
  const ir::Tensor* b = has_bias ? cx.constant(n.inputs[2]) : nullptr;
  const Dims in = cx.dims(n.inputs[0]), out = cx.dims(n.outputs[0]), wdims = cx.dims(n.inputs[1]);
  const size_t rank = in.size();
  if (rank < 3 || rank > 5 || wdims.size() != rank || out.size() != rank) return false;
  ref::KernelContext ctx(n, {}, nullptr);
  const int64_t group = ctx.attr_int("group", 1);
  if (group < 1 || in[1] % group || wdims[0] != in[1] || out[1] != wdims[1] * group) return false;
  const ref::Geometry geo = ref::transposed_geometry(ctx, Dims(in.begin() + 2, in.end()),
                                                     ref::kernel_shape_of(ctx, Dims(wdims.begin() + 2, wdims.end())));
  if (geo.out != Dims(out.begin() + 2, out.end())) return false;
  // oneDNN's size rule has no output padding: it is the geometry's end padding
  // already. oneDNN takes no negative padding; the reference kernel does.
  auto negative = [](const Dims& pads) { return std::any_of(pads.begin(), pads.end(), [](int64_t p) { return p < 0; }); };
  if (negative(geo.pad_begin) || negative(geo.pad_end)) return false;
  dnnl::memory::dims dil;
  for (int64_t d : geo.dilations) dil.push_back(d - 1);  // oneDNN counts the gaps
  // ONNX's weights are [C_in, C_out / group, kernel...]; oneDNN names them
  // the other way round, so they are described by strides as they lie.
  const int64_t per_group_in = in[1] / group, per_group_out = wdims[1];
  int64_t window = 1;
  for (size_t d = 2; d < rank; ++d) window *= wdims[d];
  dnnl::memory::dims wei = {per_group_out, per_group_in}, wei_strides = {window, per_group_out * window};
  if (group > 1) {
    wei.insert(wei.begin(), group);
    wei_strides.insert(wei_strides.begin(), per_group_in * per_group_out * window);
  }
  for (size_t d = 2, stride = size_t(window); d < rank; ++d) {
    stride /= size_t(wdims[d]);
    wei.push_back(wdims[d]);
    wei_strides.push_back(int64_t(stride));
  }
  const md user_wei(wei, dt::f32, wei_strides);
  if (has_bias && cx.dims(n.inputs[2]) != Dims{out[1]}) return false;
  const md bias_md = has_bias ? md({out[1]}, dt::f32, dnnl::memory::format_tag::x) : md();
  const Dims kernel(wdims.begin() + 2, wdims.end());
  // By taps, the weights are rearranged once: constants only.
  bool by_taps = group == 1 && w && (b || !has_bias);
  for (size_t d = 0; d < kernel.size(); ++d)
    by_taps &= geo.strides[d] == kernel[d] && geo.dilations[d] == 1 && geo.pad_begin[d] == 0 && geo.pad_end[d] == 0;
  if (by_taps && lower_conv_transpose_by_taps(cx, n, w, b, in, out, kernel)) return true;
  Fused f = fuse_after(cx, n.outputs[0], true);
  auto any = [](const Dims& d) { return md(to_dnnl(d), dt::f32, dnnl::memory::format_tag::any); };
  dnnl::deconvolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct, any(in),
                                         md(wei, dt::f32, dnnl::memory::format_tag::any), bias_md, any(out), to_dnnl(geo.strides),
                                         dil, to_dnnl(geo.pad_begin), to_dnnl(geo.pad_end));
  dnnl::deconvolution_forward::primitive_desc pd(desc, post_op_attr(f), cpu_engine());
  emit_weighted(cx, n, pd, cx.as_layout(n.inputs[0], pd.src_desc()), user_wei, w, b, bias_md, f);
  return true;
}

bool portable_conv(Context& cx, const ir::Node& n) {
  if (n.inputs.size() < 2 || !cx.is_f32(n.inputs[0]) || !cx.is_f32(n.inputs[1]) || n.outputs.size() != 1) return false;
  const bool has_bias = n.inputs.size() > 2 && !n.inputs[2].empty();
  if (has_bias && !cx.is_f32(n.inputs[2])) return false;
  const auto shape = portable_conv_shape(n, cx.dims(n.inputs[0]), cx.dims(n.inputs[1]), cx.dims(n.outputs[0]));
  if (!shape || (has_bias && ir::checked_numel(cx.dims(n.inputs[2])) != shape->k)) return false;
  Epilogue e = portable_epilogue(cx, n.outputs[0], true);
  std::vector<int> args{cx.plain(n.inputs[0]), cx.plain(n.inputs[1])};
  std::vector<char> writes{0, 0};
  Call::Arg bias = Call::null();
  if (has_bias) {
    args.push_back(cx.plain(n.inputs[2]));
    writes.push_back(0);
    bias = Call::buffer(int(args.size()) - 1);
  }
  int dst = -1;
  const Call::Arg residual = epilogue_args(cx, e, args, writes, dst);
  const PortableConvShape& c = *shape;
  const Call::Arg work =
      cx.scratch(args, writes,
                 kiln_pk_conv2d_scratch_bytes(c.n, c.c, c.h, c.w, c.k, c.oh, c.ow, c.kh, c.kw, c.sh, c.sw, c.dh, c.dw, c.group),
                 n.describe());
  std::vector<Call::Arg> call_args = c.args();
  call_args.insert(call_args.end(), {Call::buffer(0), Call::buffer(1), bias, residual, Call::buffer(dst), Call::i32(e.act),
                                     Call::f32(e.alpha), Call::f32(e.beta), Call::i32(conv_split(cx, e.fused.value)), work});
  Call call{"kiln_pk_conv2d", std::move(call_args), false};
  cx.compiled();
  absorb(cx, e.fused);
  cx.add_call(n.describe(), std::move(args), std::move(writes), std::move(call));
  return true;
}

}  // namespace kiln::cpu::lowering
