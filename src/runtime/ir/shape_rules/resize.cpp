// Resize and Upsample. Exporters give a fixed output size as constant scales
// or sizes: the output's dims follow as the kernel computes them. Otherwise
// the resized axes are unknown.
#include <cmath>

#include "runtime/ir/shape_rules/shape_rule.hpp"

namespace kiln::ir::shape_rules {

namespace {

std::vector<ValueInfo> resize(const NodeView& n) {
  const ValueInfo* x = n.input(0);
  const DType dt = x ? x->dtype : DType::Undefined;
  if (!n.rank_known(0)) return {unknown_like(dt)};
  const int64_t rank = x->shape.rank();
  std::vector<int64_t> axes;
  if (auto a = n.attr_ints("axes")) {
    for (int64_t axis : *a) axes.push_back(axis < 0 ? axis + rank : axis);
  } else {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  for (int64_t a : axes)
    if (a < 0 || a >= rank) n.fail("axes holds " + std::to_string(a) + " for rank " + std::to_string(rank));
  const bool modern = n.node.op_type == "Resize" && n.node.opset >= 11;
  std::vector<double> scales;
  std::vector<int64_t> sizes;
  if (n.node.op_type == "Upsample" && n.node.opset < 9) {
    if (const Attribute* s = n.node.attr("scales"); s && s->kind == Attribute::Kind::Floats)
      scales.assign(s->floats.begin(), s->floats.end());
  } else if (const Tensor* s = n.value(modern ? 2 : 1); s && s->numel() > 0) {
    for (int64_t i = 0; i < s->numel(); ++i) scales.push_back(s->as_double(i));
  }
  if (modern)
    if (const Tensor* z = n.value(3); z && z->numel() > 0) sizes = z->to_int64_vector();
  const Attribute* policy = n.node.attr("keep_aspect_ratio_policy");
  const bool stretch = !policy || policy->s == "stretch";
  const bool by_sizes = stretch && !sizes.empty() && sizes.size() == axes.size();
  const bool by_scales = sizes.empty() && scales.size() == axes.size();
  Shape out = x->shape;
  for (size_t i = 0; i < axes.size(); ++i) {
    Dim& d = out.dims[size_t(axes[i])];
    if (by_sizes && sizes[i] >= 0) {
      d = Dim::known(sizes[i]);
    } else if (by_scales && scales[i] > 0 && d.is_known()) {
      const double size = std::floor(double(*d.value) * scales[i]);
      if (!(size <= double(kMaxSize)))
        n.fail("scales holds " + std::to_string(scales[i]) + ": the resized axis would be larger than 2^62");
      d = Dim::known(int64_t(size));
    } else if (!(by_scales && scales[i] == 1)) {
      d = Dim::unknown();
    }
  }
  return {with_shape(dt, out)};
}

}  // namespace

void register_resize_rules(ShapeRuleTable& t) {
  t.add("Resize", &resize);
  t.add("Upsample", &resize);
}

}  // namespace kiln::ir::shape_rules
