// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss of float32 inputs
// with int32 or int64 targets: one portable kernel call (kiln_pk_nll_loss),
// for the native kernels too (oneDNN has no loss). Other types, and shapes
// the reference kernel would refuse, run that kernel, which says why.
#include <string>

#include "backends/cpu/lower/context.hpp"
#include "backends/cpu/lower/families.hpp"
#include "backends/cpu/portable/kernels.h"
#include "backends/reference/kernel_context.hpp"

namespace kiln::cpu::lowering {

bool lower_loss(Context& cx, const ir::Node& n) {
  const bool from_scores = n.op_type == "SoftmaxCrossEntropyLoss";
  if (n.inputs.size() < 2 || n.outputs.empty() || !cx.is_f32(n.inputs[0]) || !cx.is_f32(n.outputs[0])) return false;
  const std::string& target = n.inputs[1];
  if (target.empty()) return false;
  const DType target_type = cx.dtype(target);
  if (target_type != DType::Int32 && target_type != DType::Int64) return false;
  const bool weighted = n.inputs.size() > 2 && !n.inputs[2].empty();
  if (weighted && !cx.is_f32(n.inputs[2])) return false;
  const Dims x = cx.dims(n.inputs[0]);
  if (x.size() < 2) return false;
  Dims per_item = x;
  per_item.erase(per_item.begin() + 1);
  if (cx.dims(target) != per_item || (weighted && cx.dims(n.inputs[2]) != Dims{x[1]})) return false;
  ref::KernelContext ctx(n, {}, nullptr);
  const std::string reduction = ctx.attr_string("reduction", "mean");
  const int32_t how = reduction == "none"   ? KILN_PK_LOSS_NONE
                      : reduction == "sum"  ? KILN_PK_LOSS_SUM
                      : reduction == "mean" ? KILN_PK_LOSS_MEAN
                                            : -1;
  if (how < 0) return false;
  const bool log_prob_wanted = from_scores && !cx.only_first_output_wanted(n);
  if (!from_scores && !cx.only_first_output_wanted(n)) return false;

  const int64_t items = x[0], classes = x[1], inner = ir::checked_numel(x) / (items * classes);
  std::vector<int> args{cx.plain(n.inputs[0]), cx.plain(target)};
  std::vector<char> writes{0, 0};
  Call::Arg weight = Call::null();
  if (weighted) {
    args.push_back(cx.plain(n.inputs[2]));
    writes.push_back(0);
    weight = Call::buffer(int(args.size()) - 1);
  }
  cx.compiled();
  args.push_back(cx.define_plain(n.outputs[0]));
  writes.push_back(1);
  const Call::Arg out = Call::buffer(int(args.size()) - 1);
  // The log-probabilities: the input itself, SoftmaxCrossEntropyLoss's
  // second output, or scratch when nothing reads that.
  Call::Arg logp = Call::buffer(0);
  if (log_prob_wanted) {
    args.push_back(cx.define_plain(n.outputs[1]));
    writes.push_back(1);
    logp = Call::buffer(int(args.size()) - 1);
  } else if (from_scores) {
    logp = cx.scratch(args, writes, size_t(cx.bytes_of(n.inputs[0])), n.describe());
  }
  const bool has_ignore = ctx.has_attr("ignore_index");
  cx.add_call(n.describe(), std::move(args), std::move(writes),
              {"kiln_pk_nll_loss",
               {Call::i64(items), Call::i64(classes), Call::i64(inner), from_scores ? Call::buffer(0) : Call::null(), logp,
                Call::i32(target_type == DType::Int64), Call::buffer(1), weight, Call::i32(has_ignore),
                Call::i64(has_ignore ? ctx.attr_int("ignore_index") : 0), Call::i32(how), out},
               true});
  return true;
}

}  // namespace kiln::cpu::lowering
