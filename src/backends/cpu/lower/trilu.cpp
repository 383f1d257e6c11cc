// Trilu of any fixed-size element type: one portable kernel call
// (kiln_pk_trilu) for both kernel families, its diagonal offset read when
// the step runs (it may be a graph input).
#include "backends/cpu/lower/context.hpp"
#include "backends/cpu/lower/families.hpp"
#include "backends/reference/kernel_context.hpp"

namespace kiln::cpu::lowering {

bool lower_trilu(Context& cx, const ir::Node& n) {
  if (n.inputs.empty() || n.outputs.size() != 1) return false;
  const Dims x = cx.dims(n.inputs[0]);
  if (x.size() < 2 || cx.dtype(n.outputs[0]) != cx.dtype(n.inputs[0])) return false;
  const bool has_k = n.inputs.size() > 1 && !n.inputs[1].empty();
  if (has_k && (cx.dtype(n.inputs[1]) != DType::Int64 || ir::checked_numel(cx.dims(n.inputs[1])) != 1)) return false;
  const int64_t rows = x[x.size() - 2], cols = x.back();
  const int64_t elem_bytes = cx.bytes_of(n.inputs[0]) / ir::checked_numel(x);
  ref::KernelContext ctx(n, {}, nullptr);
  std::vector<int> args{cx.plain(n.inputs[0])};
  if (has_k) args.push_back(cx.plain(n.inputs[1]));
  cx.compiled();
  args.push_back(cx.define_plain(n.outputs[0]));
  std::vector<char> writes(args.size(), 0);
  writes.back() = 1;
  cx.add_call(n.describe(), std::move(args), std::move(writes),
              {"kiln_pk_trilu",
               {Call::i64(ir::checked_numel(x) / (rows * cols)), Call::i64(rows), Call::i64(cols), Call::i64(elem_bytes),
                Call::i32(ctx.attr_int("upper", 1) != 0), has_k ? Call::buffer(1) : Call::null(), Call::buffer(0),
                Call::buffer(has_k ? 2 : 1)},
               false});
  return true;
}

}  // namespace kiln::cpu::lowering
