// Operators that keep the elements and change the shape: Reshape, Flatten,
// Squeeze, Unsqueeze, DepthToSpace and SpaceToDepth.
#include <algorithm>
#include <iterator>
#include <set>

#include "runtime/ir/shape_rules/shape_rule.hpp"

namespace kiln::ir::shape_rules {

namespace {

std::vector<ValueInfo> reshape(const NodeView& n) {
  const ValueInfo* x = n.input(0);
  DType dt = x ? x->dtype : DType::Undefined;
  auto target = n.ints_from("shape", 1);
  if (!target) return {unknown_like(dt)};
  const bool allowzero = n.attr_int("allowzero", 0) != 0;
  Shape out;
  int minus_one = -1;
  for (size_t i = 0; i < target->size(); ++i) {
    int64_t d = (*target)[i];
    if (d == 0 && !allowzero) {
      if (!n.rank_known(0)) return {unknown_like(dt)};
      if (i >= x->shape.dims.size())
        n.fail("shape entry " + std::to_string(i) + " is 0 (copy) but the input has rank " + std::to_string(x->shape.rank()));
      out.dims.push_back(x->shape.dims[i]);
    } else if (d == -1) {
      if (minus_one >= 0) n.fail("more than one -1 in the target shape");
      minus_one = int(i);
      out.dims.push_back(Dim::unknown());
    } else if (d < 0) {
      n.fail("invalid target dimension " + std::to_string(d));
    } else {
      out.dims.push_back(Dim::known(d));
    }
  }
  if (minus_one >= 0 && n.rank_known(0) && x->shape.is_concrete()) {
    int64_t total = checked_numel(x->shape.concrete()), known = 1;
    for (size_t i = 0; i < out.dims.size(); ++i)
      if (int(i) != minus_one) {
        if (!out.dims[i].is_known()) return {with_shape(dt, out)};
        known *= *out.dims[i].value;
      }
    if (known == 0 || total % known != 0) n.fail("cannot reshape " + x->shape.to_string() + " to " + dims_to_string(*target));
    out.dims[size_t(minus_one)] = Dim::known(total / known);
  } else if (minus_one >= 0 && n.rank_known(0)) {
    // Symbolic: [batch, C, H, W] -> [batch, -1] keeps the symbol when the rest is fixed and equal.
    std::vector<Dim> in_rest, out_rest;
    int64_t in_known = 1, out_known = 1;
    bool ok = true;
    std::multiset<std::string> in_syms, out_syms;
    for (const auto& d : x->shape.dims) {
      if (d.is_known())
        in_known *= *d.value;
      else if (!d.symbol.empty())
        in_syms.insert(d.symbol);
      else
        ok = false;
    }
    for (size_t i = 0; i < out.dims.size(); ++i) {
      if (int(i) == minus_one) continue;
      const Dim& d = out.dims[i];
      if (d.is_known())
        out_known *= *d.value;
      else if (!d.symbol.empty())
        out_syms.insert(d.symbol);
      else
        ok = false;
    }
    if (ok && out_known && std::includes(in_syms.begin(), in_syms.end(), out_syms.begin(), out_syms.end())) {
      std::multiset<std::string> left;
      std::set_difference(in_syms.begin(), in_syms.end(), out_syms.begin(), out_syms.end(), std::inserter(left, left.end()));
      if (left.empty() && in_known % out_known == 0)
        out.dims[size_t(minus_one)] = Dim::known(in_known / out_known);
      else if (left.size() == 1 && in_known == out_known)
        out.dims[size_t(minus_one)] = Dim::named(*left.begin());
    }
  }
  if (n.rank_known(0) && x->shape.is_concrete() && out.is_concrete() &&
      checked_numel(out.concrete()) != checked_numel(x->shape.concrete()))
    n.fail("cannot reshape " + x->shape.to_string() + " to " + out.to_string());
  return {with_shape(dt, out)};
}

std::vector<ValueInfo> flatten(const NodeView& n) {
  const ValueInfo* x = n.input(0);
  const DType dt = n.dtype(0);
  if (!n.rank_known(0)) return {unknown_like(dt)};
  int64_t rank = x->shape.rank();
  int64_t axis = n.attr_int("axis", 1);
  if (axis < -rank || axis > rank) n.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  if (axis < 0) axis += rank;
  auto product = [&](int64_t from, int64_t to) -> Dim {
    int64_t p = 1;
    std::vector<Dim> syms;
    for (int64_t i = from; i < to; ++i) {
      const Dim& d = x->shape.dims[size_t(i)];
      if (d.is_known())
        p *= *d.value;
      else
        syms.push_back(d);
    }
    if (syms.empty()) return Dim::known(p);
    if (syms.size() == 1 && p == 1) return syms[0];
    return Dim::unknown();
  };
  return {with_shape(dt, Shape{{product(0, axis), product(axis, rank)}, true})};
}

std::vector<ValueInfo> squeeze(const NodeView& n) {
  const ValueInfo* x = n.input(0);
  const DType dt = n.dtype(0);
  if (!n.rank_known(0)) return {unknown_like(dt)};
  const auto axes = n.ints_from("axes", 1);
  if (!axes && n.input(1)) return {unknown_like(dt)};  // computed axes
  Shape s;
  int64_t rank = x->shape.rank();
  std::set<int64_t> drop;
  if (axes) {
    for (int64_t a : *axes) {
      int64_t ax = norm_axis(n, a, rank);
      const Dim& d = x->shape.dims[size_t(ax)];
      if (d.is_known() && *d.value != 1)
        n.fail("cannot squeeze axis " + std::to_string(a) + " of size " + std::to_string(*d.value));
      drop.insert(ax);
    }
  } else {
    for (int64_t i = 0; i < rank; ++i) {
      const Dim& d = x->shape.dims[size_t(i)];
      if (!d.is_known()) return {unknown_like(dt)};
      if (*d.value == 1) drop.insert(i);
    }
  }
  for (int64_t i = 0; i < rank; ++i)
    if (!drop.count(i)) s.dims.push_back(x->shape.dims[size_t(i)]);
  return {with_shape(dt, s)};
}

std::vector<ValueInfo> unsqueeze(const NodeView& n) {
  const ValueInfo* x = n.input(0);
  const DType dt = n.dtype(0);
  if (!n.rank_known(0)) return {unknown_like(dt)};
  const auto axes = n.ints_from("axes", 1);
  if (!axes && n.input(1)) return {unknown_like(dt)};  // computed axes
  if (!axes) n.fail("axes are required");
  Shape s;
  int64_t rank = x->shape.rank() + int64_t(axes->size());
  std::set<int64_t> add;
  for (int64_t a : *axes)
    if (!add.insert(norm_axis(n, a, rank)).second) n.fail("axes repeat axis " + std::to_string(a));
  size_t j = 0;
  for (int64_t i = 0; i < rank; ++i) s.dims.push_back(add.count(i) ? Dim::known(1) : x->shape.dims[j++]);
  return {with_shape(dt, s)};
}

// DepthToSpace moves b*b channels into a b x b block of pixels; SpaceToDepth back.
std::vector<ValueInfo> depth_space(const NodeView& n) {
  const ValueInfo* x = n.input(0);
  const DType dt = n.dtype(0);
  if (!n.rank_known(0) || x->shape.rank() != 4) return {unknown_like(dt)};
  const int64_t b = n.attr_int("blocksize", 0);
  if (b <= 0) n.fail("blocksize must be positive");
  const bool to_space = n.node.op_type == "DepthToSpace";
  const auto& xs = x->shape.dims;
  // The block must divide what it is taken from (b*b compared without
  // overflowing it); products of the other sizes are checked.
  auto divides = [&](const Dim& d, int64_t times, const char* what) {
    if (d.is_known() && (*d.value > 0 ? b > *d.value / times || *d.value % (b * times) != 0 : false))
      n.fail("blocksize " + std::to_string(b) + " does not divide the " + what + " of " + x->shape.to_string());
  };
  if (to_space)
    divides(xs[1], b, "channels");
  else
    divides(xs[2], 1, "height"), divides(xs[3], 1, "width");
  auto times = [](const Dim& d, int64_t num, int64_t den) {
    return d.is_known() ? Dim::known(checked_numel({*d.value, num}) / den) : Dim::unknown();
  };
  return {with_shape(
      dt, Shape{{xs[0], to_space ? times(xs[1], 1, b * b) : times(times(xs[1], b, 1), b, 1),
                 to_space ? times(xs[2], b, 1) : times(xs[2], 1, b), to_space ? times(xs[3], b, 1) : times(xs[3], 1, b)},
                true})};
}

}  // namespace

void register_reshape_rules(ShapeRuleTable& t) {
  t.add("Reshape", &reshape);
  t.add("Flatten", &flatten);
  t.add("Squeeze", &squeeze);
  t.add("Unsqueeze", &unsqueeze);
  t.add("DepthToSpace", &depth_space);
  t.add("SpaceToDepth", &depth_space);
}

}  // namespace kiln::ir::shape_rules
