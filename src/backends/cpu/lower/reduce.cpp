// Reductions (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd,
// ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp) of
// float32 tensors over constant axes: oneDNN's reduction primitive, and the
// portable kernel over one contiguous run of axes. Integer types, axes of
// the run and empty tensors run the reference kernel.
#include <map>
#include <optional>
#include <string>

#include "backends/cpu/lower/context.hpp"
#include "backends/cpu/lower/families.hpp"
#include "backends/cpu/lower/fusion.hpp"
#include "backends/cpu/portable/kernels.h"
#include "backends/reference/kernel_context.hpp"

namespace kiln::cpu::lowering {

namespace {

// Which axes of the input a reduction node reduces (none: the node is not
// one this lowering takes), and the input's dims with those set to 1.
struct Reduced {
  std::vector<bool> axes;
  Dims kept;
};

std::optional<Reduced> reduced_axes(Context& cx, const ir::Node& n) {
  if (n.inputs.empty() || n.outputs.size() != 1 || !cx.is_f32(n.inputs[0]) || !cx.is_f32(n.outputs[0])) return std::nullopt;
  const Dims in = cx.dims(n.inputs[0]);
  if (in.empty() || ir::checked_numel(in) == 0) return std::nullopt;
  ref::KernelContext ctx(n, {}, nullptr);
  std::vector<int64_t> axes;
  // Axes come from the input from opset 13 (ReduceSum) or 18 (the others),
  // from the attribute before.
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
    const ir::Tensor* a = cx.constant(n.inputs[1]);
    if (!a || !ir::dtype_is_int(a->dtype()) || a->rank() > 1) return std::nullopt;
    axes = a->to_int64_vector();
  } else {
    axes = ctx.attr_ints("axes");
  }
  // An empty list with noop_with_empty_axes reduces nothing: a copy, left to the reference kernel.
  if (axes.empty() && ctx.attr_int("noop_with_empty_axes", 0) != 0) return std::nullopt;
  Reduced r{std::vector<bool>(in.size(), axes.empty()), in};
  for (int64_t a : axes) {
    if (!normalize_axis(a, in.size()) || r.axes[size_t(a)]) return std::nullopt;
    r.axes[size_t(a)] = true;
  }
  for (size_t d = 0; d < in.size(); ++d)
    if (r.axes[d]) r.kept[d] = 1;
  if (ir::checked_numel(r.kept) != ir::checked_numel(cx.dims(n.outputs[0]))) return std::nullopt;
  return r;
}

}  // namespace

bool lower_reduce(Context& cx, const ir::Node& n) {
  const auto r = reduced_axes(cx, n);
  if (!r) return false;
  struct Algorithm {
    dnnl::algorithm alg;
    float p;
  };
  static const std::map<std::string, Algorithm, std::less<>> algorithms = {
      {"ReduceSum", {dnnl::algorithm::reduction_sum, 0}},
      {"ReduceMean", {dnnl::algorithm::reduction_mean, 0}},
      {"ReduceMax", {dnnl::algorithm::reduction_max, 0}},
      {"ReduceMin", {dnnl::algorithm::reduction_min, 0}},
      {"ReduceProd", {dnnl::algorithm::reduction_mul, 0}},
      {"ReduceL1", {dnnl::algorithm::reduction_norm_lp_sum, 1}},
      {"ReduceL2", {dnnl::algorithm::reduction_norm_lp_sum, 2}},
      {"ReduceSumSquare", {dnnl::algorithm::reduction_norm_lp_power_p_sum, 2}},
      {"ReduceLogSum", {dnnl::algorithm::reduction_sum, 0}},
  };
  const auto it = algorithms.find(n.op_type);
  if (it == algorithms.end()) return false;
  // An input reduced over no axis of more than one element is copied: oneDNN
  // refuses a reduction whose source and destination are the same shape.
  if (r->kept == cx.dims(n.inputs[0])) return false;
  const md src = plain_md(cx.dims(n.inputs[0])), dst = plain_md(r->kept);
  dnnl::primitive_attr attr = user_scratchpad();
  if (n.op_type == "ReduceLogSum") {
    dnnl::post_ops log;
    log.append_eltwise(1.0f, dnnl::algorithm::eltwise_log, 0, 0);
    attr.set_post_ops(log);
  }
  dnnl::reduction::primitive_desc pd;
  try {
    pd = dnnl::reduction::primitive_desc(dnnl::reduction::desc(it->second.alg, src, dst, it->second.p, 0), attr, cpu_engine());
  } catch (const dnnl::error&) {
    return false;
  }
  Fused f;
  f.value = n.outputs[0];
  const int in = cx.plain(n.inputs[0]);
  cx.compiled();
  // The destination is the input's rank with reduced axes of 1: the same
  // bytes as the output's own shape, kept or not.
  emit_with_dst(cx, n.describe(), pd, {{DNNL_ARG_SRC, src}}, {in}, {}, f, dst, true);
  return true;
}

bool portable_reduce(Context& cx, const ir::Node& n) {
  const auto r = reduced_axes(cx, n);
  if (!r) return false;
  static const std::map<std::string, int32_t, std::less<>> ops = {
      {"ReduceSum", KILN_PK_REDUCE_SUM}, {"ReduceMean", KILN_PK_REDUCE_MEAN}, {"ReduceMax", KILN_PK_REDUCE_MAX},
      {"ReduceMin", KILN_PK_REDUCE_MIN}, {"ReduceProd", KILN_PK_REDUCE_PROD}, {"ReduceSumSquare", KILN_PK_REDUCE_SUM_SQUARE},
      {"ReduceL1", KILN_PK_REDUCE_L1},   {"ReduceL2", KILN_PK_REDUCE_L2},     {"ReduceLogSumExp", KILN_PK_REDUCE_LOG_SUM_EXP},
  };
  const auto it = ops.find(n.op_type);
  if (it == ops.end()) return false;
  // The kernel reduces one run of axes: those reduced, less axes of 1 (which
  // a reduction leaves as they are), must be next to each other.
  const Dims in = cx.dims(n.inputs[0]);
  int64_t first = -1, last = -1;
  for (size_t d = 0; d < in.size(); ++d)
    if (r->axes[d] && in[d] > 1) {
      if (first < 0) first = int64_t(d);
      last = int64_t(d);
    }
  int64_t outer = 1, len = 1, inner = 1;
  for (size_t d = 0; d < in.size(); ++d) {
    const int64_t at = int64_t(d);
    if (first >= 0 && at > first && at < last && !r->axes[d] && in[d] > 1) return false;
    (first < 0 || at < first ? outer : at <= last ? len : inner) *= in[d];
  }
  const int src = cx.plain(n.inputs[0]);
  cx.compiled();
  cx.add_call(n.describe(), {src, cx.define_plain(n.outputs[0])}, {0, 1},
              {"kiln_pk_reduce",
               {Call::i64(outer), Call::i64(len), Call::i64(inner), Call::i32(it->second), Call::buffer(0), Call::buffer(1)},
               false});
  return true;
}

}  // namespace kiln::cpu::lowering
