// ArgMax, ArgMin and Hardmax of float32 tensors: one portable kernel call
// (kiln_pk_arg_extreme, kiln_pk_hardmax) for both kernel families, oneDNN
// having no arg-reduction. Other element types run the reference kernel.
#include "backends/cpu/lower/context.hpp"
#include "backends/cpu/lower/families.hpp"
#include "backends/reference/kernel_context.hpp"

namespace kiln::cpu::lowering {

bool lower_arg_extreme(Context& cx, const ir::Node& n) {
  if (n.inputs.size() != 1 || n.outputs.size() != 1 || !cx.is_f32(n.inputs[0]) || cx.dtype(n.outputs[0]) != DType::Int64)
    return false;
  const Dims in = cx.dims(n.inputs[0]);
  ref::KernelContext ctx(n, {}, nullptr);
  int64_t axis = ctx.attr_int("axis", 0);
  if (!normalize_axis(axis, in.size())) return false;
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < in.size(); ++d) (int64_t(d) < axis ? outer : inner) *= int64_t(d) == axis ? 1 : in[d];
  const int64_t len = in[size_t(axis)];
  if (len == 0 || outer * inner != ir::checked_numel(cx.dims(n.outputs[0]))) return false;
  const int src = cx.plain(n.inputs[0]);
  cx.compiled();
  cx.add_call(n.describe(), {src, cx.define_plain(n.outputs[0])}, {0, 1},
              {"kiln_pk_arg_extreme",
               {Call::i64(outer), Call::i64(len), Call::i64(inner), Call::i32(n.op_type == "ArgMax"),
                Call::i32(ctx.attr_int("select_last_index", 0) != 0), Call::buffer(0), Call::buffer(1)},
               false});
  return true;
}

bool lower_hardmax(Context& cx, const ir::Node& n) {
  if (n.inputs.size() != 1 || n.outputs.size() != 1 || !cx.is_f32(n.inputs[0]) || !cx.is_f32(n.outputs[0])) return false;
  const Dims in = cx.dims(n.inputs[0]);
  ref::KernelContext ctx(n, {}, nullptr);
  // From opset 13 along one axis; before, over the input flattened to 2-D at the axis.
  const bool one_axis = ctx.opset() >= 13;
  int64_t axis = ctx.attr_int("axis", one_axis ? -1 : 1);
  if (in.empty() || !normalize_axis(axis, in.size())) return false;
  int64_t outer = 1, len = 1, inner = 1;
  for (size_t d = 0; d < in.size(); ++d) (int64_t(d) < axis ? outer : int64_t(d) == axis || !one_axis ? len : inner) *= in[d];
  const int src = cx.plain(n.inputs[0]);
  cx.compiled();
  cx.add_call(n.describe(), {src, cx.define_plain(n.outputs[0])}, {0, 1},
              {"kiln_pk_hardmax", {Call::i64(outer), Call::i64(len), Call::i64(inner), Call::buffer(0), Call::buffer(1)}, false});
  return true;
}

}  // namespace kiln::cpu::lowering
