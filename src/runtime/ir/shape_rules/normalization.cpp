// Normalisation and softmax: the output is shaped like the input; layer
// normalisation adds its statistics.
#include "runtime/ir/shape_rules/shape_rule.hpp"

namespace kiln::ir::shape_rules {

namespace {

std::vector<ValueInfo> mean_variance_normalization(const NodeView& n) {
  // The axes it normalises over must exist (a scalar has none).
  if (n.rank_known(0))
    for (int64_t a : n.attr_ints("axes").value_or(std::vector<int64_t>{0, 2, 3})) norm_axis(n, a, n.input(0)->shape.rank());
  return same_as_input(n);
}

// Mean and InvStdDev keep the axes before `axis` and are 1 from there on, in
// the stash type (float unless stated).
std::vector<ValueInfo> layer_normalization(const NodeView& n) {
  const ValueInfo* x = n.input(0);
  const Attribute* stash = n.node.attr("stash_type");
  ValueInfo stats = unknown_like(stash ? DType(stash->i) : DType::Float32);
  if (x && x->shape.rank_known) {
    const Attribute* a = n.node.attr("axis");
    int64_t axis = a ? a->i : -1;
    if (axis < 0) axis += x->shape.rank();
    if (axis >= 0 && axis < x->shape.rank()) {
      stats.shape = x->shape;
      for (int64_t i = axis; i < x->shape.rank(); ++i) stats.shape.dims[size_t(i)] = Dim::known(1);
    }
  }
  return {same_as_input(n)[0], stats, stats};
}

}  // namespace

void register_normalization_rules(ShapeRuleTable& t) {
  for (const char* op : {"BatchNormalization", "InstanceNormalization", "LRN", "Softmax", "LogSoftmax", "Hardmax"})
    t.add(op, &same_as_input);
  t.add("MeanVarianceNormalization", &mean_variance_normalization);
  t.add("LayerNormalization", &layer_normalization);
}

}  // namespace kiln::ir::shape_rules
