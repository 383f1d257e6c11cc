// Sliding windows: convolutions (and transposed ones) and pooling.
#include "runtime/ir/shape_rules/shape_rule.hpp"

namespace kiln::ir::shape_rules {

namespace {

// A convolution's group count: positive, and dividing the input channels
// (each group's weights take channels / group of them) and the output ones.
void check_group(const NodeView& n, int64_t group, const Dim& channels, const Dim& per_group, const Dim& out_channels) {
  if (group < 1) n.fail("group is " + std::to_string(group) + ", expected a positive number of groups");
  if (channels.is_known() && *channels.value % group != 0)
    n.fail("group " + std::to_string(group) + " does not divide the " + std::to_string(*channels.value) + " input channels");
  if (channels.is_known() && per_group.is_known() && Wide(*per_group.value) * group != *channels.value)
    n.fail("the weights take " + std::to_string(*per_group.value) + " channels per group, expected " +
           std::to_string(*channels.value) + " input channels / group " + std::to_string(group));
  if (out_channels.is_known() && *out_channels.value % group != 0)
    n.fail("group " + std::to_string(group) + " does not divide the " + std::to_string(*out_channels.value) + " output channels");
}

// Output size of a sliding window along one axis (conv/pool), or unknown.
Dim window_out(const NodeView& n, const Dim& in, int64_t kernel, int64_t stride, int64_t dilation, int64_t pad_begin,
               int64_t pad_end, bool ceil_mode, const std::string& auto_pad) {
  if (!in.is_known()) return Dim::unknown();
  const Wide x = *in.value;
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")
    return Dim::known(size_from(n, (x + stride - 1) / stride, "the output size"));
  const Wide eff = Wide(kernel - 1) * dilation + 1;
  const Wide pad_total = auto_pad == "VALID" ? 0 : Wide(pad_begin) + pad_end;
  const Wide span = x + pad_total - eff;
  if (span < 0) return Dim::known(0);
  Wide out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  // With ceil mode the last window must start inside the input or left padding.
  if (ceil_mode && (out - 1) * stride >= x + pad_total / 2) --out;
  return Dim::known(size_from(n, out, "the output size"));
}

// `weights`: the input holding a convolution's weights.
std::vector<ValueInfo> window(const NodeView& n, bool is_conv, size_t weights = 1) {
  const ValueInfo* x = n.input(0);
  DType dt = x ? x->dtype : DType::Undefined;
  if (!n.rank_known(0)) return {unknown_like(dt)};
  const auto& xs = x->shape.dims;
  if (xs.size() < 3) n.fail("input must have rank 3 or more (N, C, spatial...), has shape " + x->shape.to_string());
  const size_t spatial = xs.size() - 2;
  std::vector<int64_t> kernel;
  Dim channels = xs[1];
  if (is_conv) {
    const ValueInfo* w = n.input(weights);
    if (!w || !w->shape.rank_known) return {unknown_like(dt)};
    if (w->shape.dims.size() != xs.size())
      n.fail("weight shape " + w->shape.to_string() + " does not match input shape " + x->shape.to_string());
    channels = w->shape.dims[0];
    check_group(n, n.attr_int("group", 1), xs[1], w->shape.dims[1], channels);
    if (auto k = n.attr_ints("kernel_shape"))
      kernel = *k;
    else
      for (size_t i = 0; i < spatial; ++i) {
        if (!w->shape.dims[2 + i].is_known()) return {unknown_like(dt)};
        kernel.push_back(*w->shape.dims[2 + i].value);
      }
  } else {
    auto k = n.attr_ints("kernel_shape");
    if (!k) n.fail("required attribute 'kernel_shape' is missing");
    kernel = *k;
  }
  if (kernel.size() != spatial)
    n.fail("kernel has " + std::to_string(kernel.size()) + " dimensions, input has " + std::to_string(spatial) + " spatial ones");
  auto strides = n.attr_ints("strides").value_or(std::vector<int64_t>(spatial, 1));
  auto dilations = n.attr_ints("dilations").value_or(std::vector<int64_t>(spatial, 1));
  auto pads = n.attr_ints("pads").value_or(std::vector<int64_t>(2 * spatial, 0));
  if (strides.size() != spatial || dilations.size() != spatial || pads.size() != 2 * spatial)
    n.fail("strides, dilations or pads do not match the " + std::to_string(spatial) + " spatial dimensions");
  for (size_t i = 0; i < spatial; ++i)
    if (strides[i] <= 0 || dilations[i] <= 0 || kernel[i] <= 0) n.fail("kernel, strides and dilations must be positive");
  for (int64_t p : pads)
    if (p < 0) n.fail("pads " + dims_to_string(pads) + " has a negative value");
  const Attribute* ap = n.node.attr("auto_pad");
  std::string auto_pad = ap && ap->kind == Attribute::Kind::String ? ap->s : "NOTSET";
  bool ceil_mode = n.attr_int("ceil_mode", 0) != 0;
  Shape out;
  out.dims.push_back(xs[0]);
  out.dims.push_back(channels);
  for (size_t i = 0; i < spatial; ++i)
    out.dims.push_back(
        window_out(n, xs[2 + i], kernel[i], strides[i], dilations[i], pads[i], pads[i + spatial], ceil_mode, auto_pad));
  std::vector<ValueInfo> outs{with_shape(dt, out)};
  if (n.node.op_type == "MaxPool") outs.push_back(with_shape(DType::Int64, out));
  return outs;
}

// ConvTranspose: each input position spreads a kernel window over the
// output, as the reference kernel computes it (output_shape, if given, wins).
std::vector<ValueInfo> conv_transpose(const NodeView& n) {
  const ValueInfo *x = n.input(0), *w = n.input(1);
  const DType dt = x ? x->dtype : DType::Undefined;
  if (!n.rank_known(0) || !n.rank_known(1)) return {unknown_like(dt)};
  const auto& xs = x->shape.dims;
  if (xs.size() < 3 || w->shape.dims.size() != xs.size())
    n.fail("input " + x->shape.to_string() + " and weights " + w->shape.to_string() + " must both be N, C, spatial...");
  const size_t spatial = xs.size() - 2;
  const Dim& per_group = w->shape.dims[1];
  Shape out;
  out.dims.push_back(xs[0]);
  const int64_t group = n.attr_int("group", 1);
  check_group(n, group, xs[1], Dim::unknown(), Dim::unknown());
  out.dims.push_back(per_group.is_known() ? Dim::known(size_from(n, Wide(*per_group.value) * group, "the output channels"))
                                          : Dim::unknown());
  auto output_shape = n.attr_ints("output_shape").value_or(std::vector<int64_t>{});
  if (output_shape.size() == spatial + 2) output_shape.erase(output_shape.begin(), output_shape.begin() + 2);
  if (!output_shape.empty()) {
    if (output_shape.size() != spatial)
      n.fail("output_shape has " + std::to_string(output_shape.size()) + " sizes for " + std::to_string(spatial) +
             " spatial dimensions");
    for (int64_t d : output_shape)
      out.dims.push_back(Dim::known(size_from(n, d, "output_shape " + dims_to_string(output_shape))));
    return {with_shape(dt, out)};
  }
  std::vector<int64_t> kernel;
  if (auto k = n.attr_ints("kernel_shape"))
    kernel = *k;
  else
    for (size_t i = 0; i < spatial; ++i) {
      if (!w->shape.dims[2 + i].is_known()) return {unknown_like(dt)};
      kernel.push_back(*w->shape.dims[2 + i].value);
    }
  const auto strides = n.attr_ints("strides").value_or(std::vector<int64_t>(spatial, 1));
  const auto dilations = n.attr_ints("dilations").value_or(std::vector<int64_t>(spatial, 1));
  const auto out_pad = n.attr_ints("output_padding").value_or(std::vector<int64_t>(spatial, 0));
  auto pads = n.attr_ints("pads").value_or(std::vector<int64_t>(2 * spatial, 0));
  const Attribute* ap = n.node.attr("auto_pad");
  const std::string auto_pad = ap && ap->kind == Attribute::Kind::String ? ap->s : "NOTSET";
  if (auto_pad == "VALID") pads.assign(2 * spatial, 0);
  if (kernel.size() != spatial || strides.size() != spatial || dilations.size() != spatial || out_pad.size() != spatial ||
      pads.size() != 2 * spatial)
    n.fail("kernel_shape, strides, dilations, output_padding or pads do not match the " + std::to_string(spatial) +
           " spatial dimensions");
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  for (size_t i = 0; i < spatial; ++i)
    if (strides[i] <= 0 || dilations[i] <= 0 || kernel[i] <= 0 || out_pad[i] < 0 ||
        (!same && (pads[i] < 0 || pads[i + spatial] < 0)))
      n.fail("kernel, strides and dilations must be positive, output_padding and pads not negative");
  for (size_t i = 0; i < spatial; ++i) {
    const Dim& in = xs[2 + i];
    if (!in.is_known()) {
      out.dims.push_back(Dim::unknown());
      continue;
    }
    const Wide v = *in.value;
    out.dims.push_back(Dim::known(
        size_from(n,
                  same ? v * strides[i]
                       : strides[i] * (v - 1) + out_pad[i] + Wide(kernel[i] - 1) * dilations[i] + 1 - pads[i] - pads[i + spatial],
                  "the output size")));
  }
  return {with_shape(dt, out)};
}

std::vector<ValueInfo> conv(const NodeView& n) { return window(n, true); }

std::vector<ValueInfo> conv_integer(const NodeView& n) {
  auto outs = window(n, true);
  outs[0].dtype = DType::Int32;
  return outs;
}

// x, x_scale, x_zero_point, w, ...: the result has the type of y_zero_point.
std::vector<ValueInfo> qlinear_conv(const NodeView& n) {
  auto outs = window(n, true, 3);
  const ValueInfo* zero_point = n.input(7);
  outs[0].dtype = zero_point ? zero_point->dtype : DType::Undefined;
  return outs;
}

std::vector<ValueInfo> pool(const NodeView& n) { return window(n, false); }

std::vector<ValueInfo> global_pool(const NodeView& n) {
  const ValueInfo* x = n.input(0);
  if (!n.rank_known(0)) return {unknown_like(n.dtype(0))};
  Shape s = x->shape;
  for (size_t i = 2; i < s.dims.size(); ++i) s.dims[i] = Dim::known(1);
  return {with_shape(x->dtype, s)};
}

}  // namespace

void register_window_rules(ShapeRuleTable& t) {
  t.add("Conv", &conv);
  t.add("ConvInteger", &conv_integer);
  t.add("QLinearConv", &qlinear_conv);
  t.add("ConvTranspose", &conv_transpose);
  for (const char* op : {"MaxPool", "AveragePool", "LpPool"}) t.add(op, &pool);
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"}) t.add(op, &global_pool);
}

}  // namespace kiln::ir::shape_rules
