// Recurrent layers.
#include "runtime/ir/shape_rules/shape_rule.hpp"

namespace kiln::ir::shape_rules {

namespace {

// RNN, GRU and LSTM: Y holds every step's hidden state per direction, Y_h
// (and LSTM's Y_c) the last one; layout 1 (opset 14) puts the batch first.
std::vector<ValueInfo> recurrent(const NodeView& n) {
  const ValueInfo *x = n.input(0), *w = n.input(1);
  const DType dt = x ? x->dtype : DType::Undefined;
  const size_t outputs = n.node.op_type == "LSTM" ? 3 : 2;
  if (!n.rank_known(0) || x->shape.rank() != 3) return std::vector<ValueInfo>(outputs, unknown_like(dt));
  const int64_t layout = n.node.opset >= 14 ? n.attr_int("layout", 0) : 0;
  const Dim seq = x->shape.dims[layout ? 1 : 0], batch = x->shape.dims[layout ? 0 : 1];
  const Attribute* d = n.node.attr("direction");
  const Dim dirs = Dim::known(d && d->kind == Attribute::Kind::String && d->s == "bidirectional" ? 2 : 1);
  const int64_t gates = n.node.op_type == "LSTM" ? 4 : n.node.op_type == "GRU" ? 3 : 1;
  Dim hidden = Dim::unknown();
  if (const Attribute* h = n.node.attr("hidden_size"); h && h->kind == Attribute::Kind::Int)
    hidden = Dim::known(h->i);
  else if (n.rank_known(1) && w->shape.rank() == 3 && w->shape.dims[1].is_known())
    hidden = Dim::known(*w->shape.dims[1].value / gates);
  const Shape y = layout ? Shape{{batch, seq, dirs, hidden}, true} : Shape{{seq, dirs, batch, hidden}, true};
  const Shape state = layout ? Shape{{batch, dirs, hidden}, true} : Shape{{dirs, batch, hidden}, true};
  std::vector<ValueInfo> outs{with_shape(dt, y), with_shape(dt, state)};
  if (outputs == 3) outs.push_back(with_shape(dt, state));
  return outs;
}

}  // namespace

void register_recurrent_rules(ShapeRuleTable& t) {
  for (const char* op : {"RNN", "GRU", "LSTM"}) t.add(op, &recurrent);
}

}  // namespace kiln::ir::shape_rules
