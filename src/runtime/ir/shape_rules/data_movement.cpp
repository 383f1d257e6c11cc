// Data movement: Transpose, Concat, Gather, Slice, Split, Pad, Tile, the
// scatters and the rearrangements that keep the input's shape.
#include <algorithm>
#include <set>

#include "runtime/ir/shape_rules/shape_rule.hpp"

namespace kiln::ir::shape_rules {

namespace {

std::vector<ValueInfo> transpose(const NodeView& n) {
  const ValueInfo* x = n.input(0);
  const DType dt = n.dtype(0);
  if (!n.rank_known(0)) return {unknown_like(dt)};
  int64_t rank = x->shape.rank();
  auto perm = n.attr_ints("perm");
  std::vector<int64_t> p;
  if (perm)
    p = *perm;
  else
    for (int64_t i = rank - 1; i >= 0; --i) p.push_back(i);
  if (int64_t(p.size()) != rank) n.fail("perm has " + std::to_string(p.size()) + " entries for rank " + std::to_string(rank));
  Shape s;
  std::set<int64_t> seen;
  for (int64_t a : p) {
    int64_t ax = norm_axis(n, a, rank);
    if (!seen.insert(ax).second) n.fail("perm repeats axis " + std::to_string(a));
    s.dims.push_back(x->shape.dims[size_t(ax)]);
  }
  return {with_shape(dt, s)};
}

std::vector<ValueInfo> concat(const NodeView& n) {
  const DType dt = n.dtype(0);
  const ValueInfo* first = nullptr;
  for (auto* v : n.in)
    if (v && v->shape.rank_known) first = v;
  if (!first) return {unknown_like(dt)};
  int64_t rank = first->shape.rank();
  // Concat-1 to -3 default to axis 1; from opset 4 the axis is required.
  int64_t axis = norm_axis(n, n.attr_int("axis", n.node.opset < 4 ? 1 : 0), rank);
  Shape s = first->shape;
  int64_t total = 0;
  bool total_known = true;
  for (auto* v : n.in) {
    if (!v || !v->shape.rank_known) return {unknown_like(dt)};
    if (v->shape.rank() != rank)
      n.fail("inputs have different ranks: " + first->shape.to_string() + " and " + v->shape.to_string());
    for (int64_t i = 0; i < rank; ++i) {
      const Dim& d = v->shape.dims[size_t(i)];
      if (i == axis) {
        if (d.is_known())
          total += *d.value;
        else
          total_known = false;
      } else if (d.is_known() && s.dims[size_t(i)].is_known() && *d.value != *s.dims[size_t(i)].value) {
        n.fail("inputs " + first->shape.to_string() + " and " + v->shape.to_string() + " differ outside axis " +
               std::to_string(axis));
      } else if (!s.dims[size_t(i)].is_known() && d.is_known()) {
        s.dims[size_t(i)] = d;
      }
    }
  }
  s.dims[size_t(axis)] = total_known ? Dim::known(total) : (n.in.size() == 1 ? first->shape.dims[size_t(axis)] : Dim::unknown());
  return {with_shape(dt, s)};
}

std::vector<ValueInfo> gather(const NodeView& n) {
  const ValueInfo* x = n.input(0);
  const DType dt = n.dtype(0);
  const ValueInfo* idx = n.input(1);
  if (!n.rank_known(0) || !n.rank_known(1)) return {unknown_like(dt)};
  int64_t rank = x->shape.rank();
  int64_t axis = norm_axis(n, n.attr_int("axis", 0), rank);
  Shape s;
  for (int64_t i = 0; i < axis; ++i) s.dims.push_back(x->shape.dims[size_t(i)]);
  for (const auto& d : idx->shape.dims) s.dims.push_back(d);
  for (int64_t i = axis + 1; i < rank; ++i) s.dims.push_back(x->shape.dims[size_t(i)]);
  return {with_shape(dt, s)};
}

std::vector<ValueInfo> slice(const NodeView& n) {
  const ValueInfo* x = n.input(0);
  const DType dt = n.dtype(0);
  if (!n.rank_known(0)) return {unknown_like(dt)};
  auto starts = n.ints_from("starts", 1), ends = n.ints_from("ends", 2);
  if (!starts || !ends) return {unknown_like(dt)};
  int64_t rank = x->shape.rank();
  std::vector<int64_t> axes, steps;
  if (auto a = n.ints_from("axes", 3))
    axes = *a;
  else if (n.input(3))
    return {unknown_like(dt)};
  else
    for (size_t i = 0; i < starts->size(); ++i) axes.push_back(int64_t(i));
  if (n.input(4)) {
    if (!n.value(4)) return {unknown_like(dt)};
    steps = n.value(4)->to_int64_vector();
  } else {
    steps.assign(starts->size(), 1);
  }
  if (ends->size() != starts->size() || axes.size() != starts->size() || steps.size() != starts->size())
    n.fail("starts, ends, axes and steps must have the same length");
  Shape s = x->shape;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t ax = norm_axis(n, axes[i], rank);
    const Dim& d = x->shape.dims[size_t(ax)];
    if (steps[i] == 0) n.fail("slice step cannot be 0");
    if (!d.is_known()) {
      s.dims[size_t(ax)] = Dim::unknown();
      continue;
    }
    int64_t dim = *d.value, st = (*starts)[i], en = (*ends)[i], step = steps[i];
    if (dim == 0) continue;  // stays empty (and the clamps below need dim >= 1)
    if (st < 0) st += dim;
    if (en < 0) en += dim;
    if (step > 0) {
      st = std::clamp<int64_t>(st, 0, dim);
      en = std::clamp<int64_t>(en, 0, dim);
      s.dims[size_t(ax)] = Dim::known(en > st ? int64_t((Wide(en) - st + step - 1) / step) : 0);  // a step may be INT64_MAX
    } else {
      st = std::clamp<int64_t>(st, 0, dim - 1);
      en = std::clamp<int64_t>(en, -1, dim - 1);
      s.dims[size_t(ax)] = Dim::known(st > en ? int64_t((Wide(st) - en - step - 1) / -Wide(step)) : 0);  // or INT64_MIN
    }
  }
  return {with_shape(dt, s)};
}

std::vector<ValueInfo> split(const NodeView& n) {
  const ValueInfo* x = n.input(0);
  const DType dt = n.dtype(0);
  if (!n.rank_known(0)) {
    std::vector<ValueInfo> outs(n.node.outputs.size(), unknown_like(dt));
    return outs;
  }
  int64_t rank = x->shape.rank();
  int64_t axis = norm_axis(n, n.attr_int("axis", 0), rank);
  const Dim& d = x->shape.dims[size_t(axis)];
  size_t count = n.node.outputs.size();
  std::vector<int64_t> sizes;
  if (auto sp = n.ints_from("split", 1))
    sizes = *sp;
  else if (n.input(1))
    return std::vector<ValueInfo>(count, unknown_like(dt));
  if (!sizes.empty()) {
    if (sizes.size() != count)
      n.fail("split has " + std::to_string(sizes.size()) + " sizes for " + std::to_string(count) + " outputs");
    int64_t total = 0;  // compared before adding, so that huge sizes cannot overflow it
    for (int64_t size : sizes) {
      if (size < 0) n.fail("split " + dims_to_string(sizes) + " has a negative size");
      if (d.is_known() && size > *d.value - total)
        n.fail("split " + dims_to_string(sizes) + " sums to more than the axis size " + std::to_string(*d.value));
      total = d.is_known() ? total + size : 0;
    }
    if (d.is_known() && total != *d.value)
      n.fail("split " + dims_to_string(sizes) + " sums to " + std::to_string(total) + ", expected the axis size " +
             std::to_string(*d.value));
  }
  std::vector<ValueInfo> outs;
  for (size_t i = 0; i < count; ++i) {
    Shape s = x->shape;
    if (!sizes.empty()) {
      s.dims[size_t(axis)] = Dim::known(sizes[i]);
    } else if (d.is_known()) {
      int64_t chunk = (*d.value + int64_t(count) - 1) / int64_t(count);
      int64_t size = std::min<int64_t>(chunk, std::max<int64_t>(0, *d.value - chunk * int64_t(i)));
      s.dims[size_t(axis)] = Dim::known(size);
    } else {
      s.dims[size_t(axis)] = Dim::unknown();
    }
    outs.push_back(with_shape(dt, s));
  }
  return outs;
}

std::vector<ValueInfo> pad(const NodeView& n) {
  const ValueInfo* x = n.input(0);
  const DType dt = n.dtype(0);
  if (!n.rank_known(0)) return {unknown_like(dt)};
  auto pads = n.ints_from("pads", 1);
  if (!pads || n.input(3)) return {unknown_like(dt)};
  int64_t rank = x->shape.rank();
  if (int64_t(pads->size()) != 2 * rank)
    n.fail("pads has " + std::to_string(pads->size()) + " entries for rank " + std::to_string(rank));
  Shape s = x->shape;
  for (int64_t i = 0; i < rank; ++i)
    if (s.dims[size_t(i)].is_known())
      s.dims[size_t(i)] = Dim::known(size_from(n, Wide(*s.dims[size_t(i)].value) + (*pads)[size_t(i)] + (*pads)[size_t(i + rank)],
                                               "the padded size of axis " + std::to_string(i)));
    else if ((*pads)[size_t(i)] || (*pads)[size_t(i + rank)])
      s.dims[size_t(i)] = Dim::unknown();
  return {with_shape(dt, s)};
}

std::vector<ValueInfo> tile(const NodeView& n) {
  const ValueInfo* x = n.input(0);
  const DType dt = n.dtype(0);
  if (!n.rank_known(0) || !n.value(1)) return {unknown_like(dt)};
  auto reps = n.value(1)->to_int64_vector();
  if (int64_t(reps.size()) != x->shape.rank())
    n.fail("repeats has " + std::to_string(reps.size()) + " entries for rank " + std::to_string(x->shape.rank()));
  sizes_from(n, reps, "repeats");
  Shape s = x->shape;
  for (size_t i = 0; i < reps.size(); ++i)
    if (s.dims[i].is_known())
      s.dims[i] = Dim::known(size_from(n, Wide(*s.dims[i].value) * reps[i], "the tiled size of axis " + std::to_string(i)));
    else if (reps[i] != 1)
      s.dims[i] = Dim::unknown();
  return {with_shape(dt, s)};
}

std::vector<ValueInfo> gather_elements(const NodeView& n) {
  return {with_shape(n.dtype(0), n.input(1) ? n.input(1)->shape : Shape::unknown_rank())};
}

}  // namespace

void register_data_movement_rules(ShapeRuleTable& t) {
  t.add("Transpose", &transpose);
  t.add("Concat", &concat);
  t.add("Gather", &gather);
  t.add("GatherElements", &gather_elements);
  t.add("Slice", &slice);
  t.add("Split", &split);
  t.add("Pad", &pad);
  t.add("Tile", &tile);
  for (const char* op : {"ScatterND", "ScatterElements", "Scatter", "Trilu", "ReverseSequence"}) t.add(op, &same_as_input);
}

}  // namespace kiln::ir::shape_rules
