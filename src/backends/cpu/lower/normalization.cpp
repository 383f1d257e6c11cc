// Normalisations and softmax (Softmax, LogSoftmax, LayerNormalization,
// BatchNormalization, InstanceNormalization): oneDNN's primitives on
// constant parameters, a host kernel for instance normalisation, and the
// portable softmax and layer norm kernels.
#include "backends/cpu/host_kernels.hpp"
#include "backends/cpu/lower/context.hpp"
#include "backends/cpu/lower/families.hpp"
#include "backends/cpu/lower/fusion.hpp"
#include "backends/reference/kernel_context.hpp"

namespace kiln::cpu::lowering {

bool lower_softmax(Context& cx, const ir::Node& n) {
  if (n.inputs.size() != 1 || !cx.is_f32(n.inputs[0])) return false;
  Dims d = cx.dims(n.inputs[0]);
  if (d.empty()) return false;
  ref::KernelContext ctx(n, {}, nullptr);
  int64_t axis = ctx.attr_int("axis", n.opset >= 13 ? -1 : 1);
  if (!normalize_axis(axis, d.size())) return false;
  if (n.opset < 13) {  // the input is coerced to 2-D around the axis
    int64_t outer = 1, inner = 1;
    for (size_t i = 0; i < d.size(); ++i) (int64_t(i) < axis ? outer : inner) *= d[i];
    d = {outer, inner};
    axis = 1;
  }
  const md m = plain_md(d);
  dnnl::softmax_v2_forward::desc desc(dnnl::prop_kind::forward_inference,
                                      n.op_type == "Softmax" ? dnnl::algorithm::softmax_accurate : dnnl::algorithm::softmax_log,
                                      m, m, int(axis));
  dnnl::softmax_v2_forward::primitive_desc pd(desc, user_scratchpad(), cpu_engine());
  Fused f;
  f.value = n.outputs[0];
  const int src = cx.plain(n.inputs[0]);
  cx.compiled();
  emit_with_dst(cx, n.describe(), pd, {{DNNL_ARG_SRC, m}}, {src}, {}, f, m, true);
  return true;
}

bool lower_layer_norm(Context& cx, const ir::Node& n) {
  if (n.inputs.size() < 2 || !cx.is_f32(n.inputs[0])) return false;
  // The statistics, or a scale and bias of the run: the portable kernel.
  if (!cx.only_first_output_wanted(n)) return portable_layer_norm(cx, n);
  const Dims d = cx.dims(n.inputs[0]);
  ref::KernelContext ctx(n, {}, nullptr);
  int64_t axis = ctx.attr_int("axis", -1);
  if (!normalize_axis(axis, d.size())) return false;
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < d.size(); ++i) (int64_t(i) < axis ? outer : inner) *= d[i];
  const ir::Tensor* scale = cx.constant(n.inputs[1]);
  const ir::Tensor* shift = n.inputs.size() > 2 && !n.inputs[2].empty() ? cx.constant(n.inputs[2]) : nullptr;
  if (!scale || scale->dtype() != DType::Float32 || scale->numel() != inner) return portable_layer_norm(cx, n);
  if (n.inputs.size() > 2 && !n.inputs[2].empty() && (!shift || shift->dtype() != DType::Float32 || shift->numel() != inner))
    return portable_layer_norm(cx, n);
  const md m = plain_md({outer, inner});
  auto flags = dnnl::normalization_flags::use_scale;
  if (shift) flags = flags | dnnl::normalization_flags::use_shift;
  dnnl::layer_normalization_forward::desc desc(dnnl::prop_kind::forward_inference, m, ctx.attr_float("epsilon", 1e-5f), flags);
  dnnl::layer_normalization_forward::primitive_desc pd(desc, user_scratchpad(), cpu_engine());
  const md vec = plain_md({inner});
  std::unordered_map<int, dnnl::memory> constants{{DNNL_ARG_SCALE, cx.constant_memory(vec, scale->raw(), vec)}};
  if (shift) constants[DNNL_ARG_SHIFT] = cx.constant_memory(vec, shift->raw(), vec);
  Fused f;
  f.value = n.outputs[0];
  const int src = cx.plain(n.inputs[0]);
  cx.compiled();
  emit_with_dst(cx, n.describe(), pd, {{DNNL_ARG_SRC, m}}, {src}, std::move(constants), f, m, true);
  return true;
}

// A BatchNormalization the graph passes left: on [N, C], which has no
// spatial axes for a depthwise Conv (the passes make the others one, 8x
// faster than this kernel on densenet121). oneDNN's inference kernel, in
// the layout its input is in, with a Relu that follows fused.
bool lower_batch_norm(Context& cx, const ir::Node& n) {
  if (n.inputs.size() != 5 || !cx.is_f32(n.inputs[0])) return false;
  if (!cx.only_first_output_wanted(n)) return false;
  const Dims d = cx.dims(n.inputs[0]);
  if (d.size() < 2 || d.size() > 5) return false;
  ref::KernelContext ctx(n, {}, nullptr);
  if (ctx.attr_int("training_mode", 0) != 0) return false;
  if (n.opset < 9 && ctx.attr_int("spatial", 1) == 0) return false;  // statistics per element, not per channel
  const ir::Tensor* params[4];                                       // scale, B, mean, var
  for (size_t i = 0; i < 4; ++i) {
    params[i] = cx.constant(n.inputs[i + 1]);
    if (!params[i] || params[i]->dtype() != DType::Float32 || params[i]->numel() != d[1]) return false;
  }
  const Context::Val& x = cx.val(n.inputs[0]);
  auto flags =
      dnnl::normalization_flags::use_global_stats | dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  // oneDNN 2.6 takes no post-ops here, only a Relu of its own.
  Fused f = fuse_chain(cx, n.outputs[0], false, 1);
  if (f.eltwise.size() == 1 && f.eltwise[0].alg == dnnl::algorithm::eltwise_relu && f.eltwise[0].alpha == 0)
    flags = flags | dnnl::normalization_flags::fuse_norm_relu;
  else
    f = fuse_chain(cx, n.outputs[0], false, 0);
  dnnl::batch_normalization_forward::desc desc(dnnl::prop_kind::forward_inference, x.layout, ctx.attr_float("epsilon", 1e-5f),
                                               flags);
  dnnl::batch_normalization_forward::primitive_desc pd(desc, user_scratchpad(), cpu_engine());
  const md vec = plain_md({d[1]});
  std::unordered_map<int, dnnl::memory> constants;
  const int args[4] = {DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE};
  for (size_t i = 0; i < 4; ++i) constants[args[i]] = cx.constant_memory(vec, params[i]->raw(), vec);
  cx.compiled();
  emit_with_dst(cx, n.describe(), pd, {{DNNL_ARG_SRC, x.layout}}, {x.buffer}, std::move(constants), f, pd.dst_desc(),
                is_plain(pd.dst_desc(), d));
  return true;
}

// InstanceNormalization with constant scale and B: a host kernel
// (oneDNN 2.6 has no instance normalization; its batch normalization over
// [1, N * C, spatial] picks the reference kernel, 3 ms against 0.1).
bool lower_instance_norm(Context& cx, const ir::Node& n) {
  if (!cx.host_kernels || n.inputs.size() != 3 || !cx.is_f32(n.inputs[0]) || n.outputs.size() != 1) return false;
  const Dims d = cx.dims(n.inputs[0]);
  if (d.size() < 3) return false;
  for (size_t i : {1, 2}) {
    const ir::Tensor* t = cx.constant(n.inputs[i]);
    if (!t || t->dtype() != DType::Float32 || t->dims() != Dims{d[1]}) return false;
  }
  const int64_t length = ir::checked_numel(d) / (d[0] * d[1]);
  ref::KernelContext ctx(n, {}, nullptr);
  auto kernel = std::make_unique<InstanceNormKernel>(d[0] * d[1], d[1], length, ctx.attr_float("epsilon", 1e-5f));
  const int src = cx.plain(n.inputs[0]), scale = cx.plain(n.inputs[1]), shift = cx.plain(n.inputs[2]);
  cx.add_kernel(n.describe(), {src, scale, shift, cx.define_plain(n.outputs[0])}, {0, 0, 0, 1}, std::move(kernel));
  cx.compiled();
  return true;
}

bool portable_softmax(Context& cx, const ir::Node& n) {
  if (n.inputs.size() != 1 || !cx.is_f32(n.inputs[0])) return false;
  const Dims d = cx.dims(n.inputs[0]);
  if (d.empty()) return false;
  ref::KernelContext ctx(n, {}, nullptr);
  int64_t axis = ctx.attr_int("axis", n.opset >= 13 ? -1 : 1);
  if (!normalize_axis(axis, d.size())) return false;
  int64_t outer = 1, len = 1, inner = 1;
  for (size_t i = 0; i < d.size(); ++i) {
    const int64_t at = int64_t(i);
    // Before opset 13 the input is coerced to 2-D around the axis.
    (at < axis ? outer : at == axis || n.opset < 13 ? len : inner) *= d[i];
  }
  const int src = cx.plain(n.inputs[0]);
  cx.compiled();
  cx.add_call(n.describe(), {src, cx.define_plain(n.outputs[0])}, {0, 1},
              {"kiln_pk_softmax",
               {Call::i64(outer), Call::i64(len), Call::i64(inner), Call::i32(n.op_type == "LogSoftmax"), Call::buffer(0),
                Call::buffer(1)},
               false});
  return true;
}

bool portable_layer_norm(Context& cx, const ir::Node& n) {
  if (n.inputs.size() < 2 || !cx.is_f32(n.inputs[0]) || !cx.is_f32(n.inputs[1])) return false;
  const Dims d = cx.dims(n.inputs[0]);
  ref::KernelContext ctx(n, {}, nullptr);
  // Mean and InvStdDev in float (stash_type 1), one per row.
  auto statistic = [&](size_t k) { return n.outputs.size() > k && !n.outputs[k].empty(); };
  if (n.outputs.size() > 3 || ((statistic(1) || statistic(2)) && ctx.attr_int("stash_type", 1) != 1)) return false;
  int64_t axis = ctx.attr_int("axis", -1);
  if (!normalize_axis(axis, d.size())) return false;
  int64_t rows = 1, cols = 1;
  for (size_t i = 0; i < d.size(); ++i) (int64_t(i) < axis ? rows : cols) *= d[i];
  const bool has_bias = n.inputs.size() > 2 && !n.inputs[2].empty();
  if (ir::checked_numel(cx.dims(n.inputs[1])) != cols) return false;
  if (has_bias && (!cx.is_f32(n.inputs[2]) || ir::checked_numel(cx.dims(n.inputs[2])) != cols)) return false;
  std::vector<int> args{cx.plain(n.inputs[0]), cx.plain(n.inputs[1])};
  if (has_bias) args.push_back(cx.plain(n.inputs[2]));
  std::vector<char> writes(args.size(), 0);
  auto output = [&](size_t k) {
    if (!statistic(k) && k > 0) return Call::null();
    args.push_back(cx.define_plain(n.outputs[k]));
    writes.push_back(1);
    return Call::buffer(int(args.size()) - 1);
  };
  const Call::Arg y = output(0), mean = output(1), inv_std_dev = output(2);
  cx.compiled();
  cx.add_call(n.describe(), std::move(args), std::move(writes),
              {"kiln_pk_layer_norm",
               {Call::i64(rows), Call::i64(cols), Call::f32(ctx.attr_float("epsilon", 1e-5f)), Call::buffer(0), Call::buffer(1),
                has_bias ? Call::buffer(2) : Call::null(), y, mean, inv_std_dev},
               false});
  return true;
}

}  // namespace kiln::cpu::lowering
