#pragma once
// Shape rules: per operator type, how a node's output dtypes and shapes follow
// from its inputs. infer_node looks the rule up in ShapeRuleTable; each
// family file (window.cpp, matmul.cpp, ...) registers its rules there.
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/ir/graph.hpp"

namespace kiln::ir::shape_rules {

// A node with what is known of its inputs.
struct NodeView {
  const Node& node;
  std::vector<const ValueInfo*> in;   // nullptr = omitted
  std::vector<const Tensor*> values;  // known constant values, nullptr otherwise

  [[noreturn]] void fail(const std::string& msg) const { ir::fail(ErrorKind::InvalidModel, node.describe() + ": " + msg); }
  const ValueInfo* input(size_t i) const { return i < in.size() ? in[i] : nullptr; }
  DType dtype(size_t i) const { return input(i) ? input(i)->dtype : DType::Undefined; }
  const Tensor* value(size_t i) const { return i < values.size() ? values[i] : nullptr; }
  bool rank_known(size_t i) const { return input(i) && input(i)->shape.rank_known; }
  int64_t attr_int(const std::string& k, int64_t def) const {
    const Attribute* a = node.attr(k);
    return a && a->kind == Attribute::Kind::Int ? a->i : def;
  }
  std::optional<std::vector<int64_t>> attr_ints(const std::string& k) const {
    const Attribute* a = node.attr(k);
    if (a && a->kind == Attribute::Kind::Ints) return a->ints;
    return std::nullopt;
  }
  // Int list from an attribute (older opsets) or a constant input (newer).
  std::optional<std::vector<int64_t>> ints_from(const std::string& attr, size_t input_index) const {
    if (auto a = attr_ints(attr)) return a;
    if (const Tensor* t = value(input_index)) return t->to_int64_vector();
    return std::nullopt;
  }
};

// One value per output of the node (fewer leave the rest unknown). Throws
// through NodeView::fail when the inputs contradict each other.
using ShapeRule = std::vector<ValueInfo> (*)(const NodeView&);

class ShapeRuleTable {
 public:
  // The table with every built-in rule.
  static const ShapeRuleTable& instance();

  void add(const std::string& op_type, ShapeRule rule);  // one rule per op type
  ShapeRule find(const std::string& op_type) const;      // nullptr if none
  std::vector<std::string> op_types() const;             // sorted

 private:
  std::unordered_map<std::string, ShapeRule> rules_;
};

// Each family file registers its rules through one of these.
void register_elementwise_rules(ShapeRuleTable& t);
void register_normalization_rules(ShapeRuleTable& t);
void register_window_rules(ShapeRuleTable& t);
void register_matmul_rules(ShapeRuleTable& t);
void register_reshape_rules(ShapeRuleTable& t);
void register_reduction_rules(ShapeRuleTable& t);
void register_resize_rules(ShapeRuleTable& t);
void register_recurrent_rules(ShapeRuleTable& t);
void register_data_movement_rules(ShapeRuleTable& t);
void register_shape_value_rules(ShapeRuleTable& t);
void register_sequence_rules(ShapeRuleTable& t);

// --- what the rules share -------------------------------------------------

ValueInfo unknown_like(DType dt);
ValueInfo with_shape(DType dt, Shape s);

// The rule of the many operators whose output is input 0's dtype and shape.
std::vector<ValueInfo> same_as_input(const NodeView& n);

// The axis in [0, rank), or an error naming the range it must be in.
int64_t norm_axis(const NodeView& n, int64_t axis, int64_t rank);

// Numpy broadcasting of the given inputs (nullptr ones are skipped); nothing
// if a rank is unknown.
std::optional<Shape> broadcast(const NodeView& n, const std::vector<const ValueInfo*>& ins);

// Arithmetic on attributes and constants, which may hold anything up to the
// int64 extremes, is done in 128 bits, where it cannot overflow, and each
// result is checked to be a size a tensor could have.
using Wide = __int128;
constexpr Wide kMaxSize = Wide(1) << 62;

// `v` as a size, or an error naming `what`.
int64_t size_from(const NodeView& n, Wide v, const std::string& what);

// Sizes read from a constant input: none negative or beyond 2^62.
const std::vector<int64_t>& sizes_from(const NodeView& n, const std::vector<int64_t>& sizes, const std::string& what);

// The [start, end) range of dims a Shape node (opset 15: start/end) returns.
std::pair<int64_t, int64_t> shape_range(const NodeView& n, int64_t rank);

}  // namespace kiln::ir::shape_rules
