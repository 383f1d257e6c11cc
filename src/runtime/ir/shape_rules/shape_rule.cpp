#include "runtime/ir/shape_rules/shape_rule.hpp"

#include <algorithm>

namespace kiln::ir::shape_rules {

const ShapeRuleTable& ShapeRuleTable::instance() {
  static const ShapeRuleTable table = [] {
    ShapeRuleTable t;
    register_elementwise_rules(t);
    register_normalization_rules(t);
    register_window_rules(t);
    register_matmul_rules(t);
    register_reshape_rules(t);
    register_reduction_rules(t);
    register_resize_rules(t);
    register_recurrent_rules(t);
    register_data_movement_rules(t);
    register_shape_value_rules(t);
    register_sequence_rules(t);
    return t;
  }();
  return table;
}

void ShapeRuleTable::add(const std::string& op_type, ShapeRule rule) {
  // Two families claiming one operator would leave the winner to the order of registration.
  if (!rules_.emplace(op_type, rule).second) fail(ErrorKind::Internal, "two shape rules for operator " + op_type);
}

ShapeRule ShapeRuleTable::find(const std::string& op_type) const {
  auto it = rules_.find(op_type);
  return it == rules_.end() ? nullptr : it->second;
}

std::vector<std::string> ShapeRuleTable::op_types() const {
  std::vector<std::string> out;
  for (const auto& [op, rule] : rules_) out.push_back(op);
  std::sort(out.begin(), out.end());
  return out;
}

ValueInfo unknown_like(DType dt) {
  ValueInfo v;
  v.dtype = dt;
  return v;
}

ValueInfo with_shape(DType dt, Shape s) {
  ValueInfo v;
  v.dtype = dt;
  v.shape = std::move(s);
  return v;
}

std::vector<ValueInfo> same_as_input(const NodeView& n) {
  const ValueInfo* x = n.input(0);
  return {x ? *x : ValueInfo{}};
}

// A scalar has no axis at all: every rule that takes one refuses it here.
int64_t norm_axis(const NodeView& n, int64_t axis, int64_t rank) {
  if (rank == 0) n.fail("input is a scalar (rank 0): it has no axis " + std::to_string(axis) + ", expected rank 1 or more");
  if (axis < -rank || axis >= rank)
    n.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank) + ", expected [" +
           std::to_string(-rank) + ", " + std::to_string(rank - 1) + "]");
  return axis < 0 ? axis + rank : axis;
}

namespace {

Dim broadcast_dim(const NodeView& n, const Dim& a, const Dim& b, const ValueInfo& x, const ValueInfo& y) {
  if (a == b) return a;
  if (a.is_known() && *a.value == 1) return b;
  if (b.is_known() && *b.value == 1) return a;
  if (a.is_known() && b.is_known())
    n.fail("inputs of shapes " + x.shape.to_string() + " and " + y.shape.to_string() + " cannot be broadcast");
  // A symbol against a size > 1: the size wins (the symbol must equal it or be 1).
  if (a.is_known()) return a;
  if (b.is_known()) return b;
  return Dim::unknown();
}

}  // namespace

std::optional<Shape> broadcast(const NodeView& n, const std::vector<const ValueInfo*>& ins) {
  Shape out;
  const ValueInfo* first = nullptr;
  for (const ValueInfo* v : ins) {
    if (!v) continue;
    if (!v->shape.rank_known) return std::nullopt;
    if (!first) {
      out = v->shape;
      first = v;
      continue;
    }
    size_t rank = std::max(out.dims.size(), v->shape.dims.size());
    Shape next;
    for (size_t i = 0; i < rank; ++i) {
      size_t oa = rank - out.dims.size(), ob = rank - v->shape.dims.size();
      Dim a = i < oa ? Dim::known(1) : out.dims[i - oa];
      Dim b = i < ob ? Dim::known(1) : v->shape.dims[i - ob];
      next.dims.push_back(broadcast_dim(n, a, b, *first, *v));
    }
    out = next;
  }
  return out;
}

int64_t size_from(const NodeView& n, Wide v, const std::string& what) {
  if (v < 0 || v > kMaxSize)
    n.fail(what + " would be " + (v < 0 ? "negative" : "above 2^62") + ": the attributes or constant inputs are out of range");
  return int64_t(v);
}

const std::vector<int64_t>& sizes_from(const NodeView& n, const std::vector<int64_t>& sizes, const std::string& what) {
  for (int64_t v : sizes)
    if (v < 0 || v > kMaxSize) n.fail(what + " holds " + std::to_string(v) + ", expected sizes in [0, 2^62]");
  return sizes;
}

std::pair<int64_t, int64_t> shape_range(const NodeView& n, int64_t rank) {
  int64_t start = n.attr_int("start", 0), end = n.attr_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  return {start, std::clamp<int64_t>(end, start, rank)};
}

}  // namespace kiln::ir::shape_rules
