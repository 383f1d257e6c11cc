#include "runtime/ir/shape_inference.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <string_view>

namespace kiln::ir {

namespace {

// Constants larger than this are never folded: folding is for shape
// arithmetic and small tables, not for precomputing the network.
constexpr int64_t kMaxFoldElements = 1 << 16;

struct NodeView {
  const Node& node;
  std::vector<const ValueInfo*> in;    // nullptr = omitted
  std::vector<const Tensor*> values;   // known constant values, nullptr otherwise

  [[noreturn]] void fail(const std::string& msg) const {
    ir::fail(ErrorKind::InvalidModel, node.describe() + ": " + msg);
  }
  const ValueInfo* input(size_t i) const { return i < in.size() ? in[i] : nullptr; }
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

// The [start, end) range of dims a Shape node (opset 15: start/end) returns.
std::pair<int64_t, int64_t> shape_range(const NodeView& n, int64_t rank) {
  int64_t start = n.attr_int("start", 0), end = n.attr_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  return {start, std::clamp<int64_t>(end, start, rank)};
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

// A scalar has no axis at all: every rule that takes one refuses it here.
int64_t norm_axis(const NodeView& n, int64_t axis, int64_t rank) {
  if (rank == 0) n.fail("input is a scalar (rank 0): it has no axis " + std::to_string(axis) + ", expected rank 1 or more");
  if (axis < -rank || axis >= rank)
    n.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank) + ", expected [" +
           std::to_string(-rank) + ", " + std::to_string(rank - 1) + "]");
  return axis < 0 ? axis + rank : axis;
}

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

// Arithmetic on attributes and constants, which may hold anything up to the
// int64 extremes, is done in 128 bits, where it cannot overflow, and each
// result is checked to be a size a tensor could have.
using Wide = __int128;
constexpr Wide kMaxSize = Wide(1) << 62;

int64_t size_from(const NodeView& n, Wide v, const std::string& what) {
  if (v < 0 || v > kMaxSize)
    n.fail(what + " would be " + (v < 0 ? "negative" : "above 2^62") + ": the attributes or constant inputs are out of range");
  return int64_t(v);
}

// Sizes read from a constant input: none negative or beyond 2^62.
const std::vector<int64_t>& sizes_from(const NodeView& n, const std::vector<int64_t>& sizes, const std::string& what) {
  for (int64_t v : sizes)
    if (v < 0 || v > kMaxSize) n.fail(what + " holds " + std::to_string(v) + ", expected sizes in [0, 2^62]");
  return sizes;
}

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
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") return Dim::known(size_from(n, (x + stride - 1) / stride, "the output size"));
  const Wide eff = Wide(kernel - 1) * dilation + 1;
  const Wide pad_total = auto_pad == "VALID" ? 0 : Wide(pad_begin) + pad_end;
  const Wide span = x + pad_total - eff;
  if (span < 0) return Dim::known(0);
  Wide out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  // With ceil mode the last window must start inside the input or left padding.
  if (ceil_mode && (out - 1) * stride >= x + pad_total / 2) --out;
  return Dim::known(size_from(n, out, "the output size"));
}

std::vector<ValueInfo> infer_window(const NodeView& n, bool is_conv) {
  const ValueInfo* x = n.input(0);
  DType dt = x ? x->dtype : DType::Undefined;
  if (!n.rank_known(0)) return {unknown_like(dt)};
  const auto& xs = x->shape.dims;
  if (xs.size() < 3) n.fail("input must have rank 3 or more (N, C, spatial...), has shape " + x->shape.to_string());
  const size_t spatial = xs.size() - 2;
  std::vector<int64_t> kernel;
  Dim channels = xs[1];
  if (is_conv) {
    const ValueInfo* w = n.input(1);
    if (!w || !w->shape.rank_known) return {unknown_like(dt)};
    if (w->shape.dims.size() != xs.size())
      n.fail("weight shape " + w->shape.to_string() + " does not match input shape " + x->shape.to_string());
    channels = w->shape.dims[0];
    check_group(n, n.attr_int("group", 1), xs[1], w->shape.dims[1], channels);
    if (auto k = n.attr_ints("kernel_shape")) kernel = *k;
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
    out.dims.push_back(window_out(n, xs[2 + i], kernel[i], strides[i], dilations[i], pads[i], pads[i + spatial], ceil_mode, auto_pad));
  std::vector<ValueInfo> outs{with_shape(dt, out)};
  if (n.node.op_type == "MaxPool") outs.push_back(with_shape(DType::Int64, out));
  return outs;
}

// ConvTranspose: each input position spreads a kernel window over the
// output, as the reference kernel computes it (output_shape, if given, wins).
std::vector<ValueInfo> infer_conv_transpose(const NodeView& n) {
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
    if (output_shape.size() != spatial) n.fail("output_shape has " + std::to_string(output_shape.size()) + " sizes for " + std::to_string(spatial) + " spatial dimensions");
    for (int64_t d : output_shape) out.dims.push_back(Dim::known(size_from(n, d, "output_shape " + dims_to_string(output_shape))));
    return {with_shape(dt, out)};
  }
  std::vector<int64_t> kernel;
  if (auto k = n.attr_ints("kernel_shape")) kernel = *k;
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
    n.fail("kernel_shape, strides, dilations, output_padding or pads do not match the " + std::to_string(spatial) + " spatial dimensions");
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  for (size_t i = 0; i < spatial; ++i)
    if (strides[i] <= 0 || dilations[i] <= 0 || kernel[i] <= 0 || out_pad[i] < 0 || (!same && (pads[i] < 0 || pads[i + spatial] < 0)))
      n.fail("kernel, strides and dilations must be positive, output_padding and pads not negative");
  for (size_t i = 0; i < spatial; ++i) {
    const Dim& in = xs[2 + i];
    if (!in.is_known()) {
      out.dims.push_back(Dim::unknown());
      continue;
    }
    const Wide v = *in.value;
    out.dims.push_back(Dim::known(size_from(
        n, same ? v * strides[i] : strides[i] * (v - 1) + out_pad[i] + Wide(kernel[i] - 1) * dilations[i] + 1 - pads[i] - pads[i + spatial],
        "the output size")));
  }
  return {with_shape(dt, out)};
}

// RNN, GRU and LSTM: Y holds every step's hidden state per direction, Y_h
// (and LSTM's Y_c) the last one; layout 1 (opset 14) puts the batch first.
std::vector<ValueInfo> infer_recurrent(const NodeView& n) {
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
  if (const Attribute* h = n.node.attr("hidden_size"); h && h->kind == Attribute::Kind::Int) hidden = Dim::known(h->i);
  else if (n.rank_known(1) && w->shape.rank() == 3 && w->shape.dims[1].is_known()) hidden = Dim::known(*w->shape.dims[1].value / gates);
  const Shape y = layout ? Shape{{batch, seq, dirs, hidden}, true} : Shape{{seq, dirs, batch, hidden}, true};
  const Shape state = layout ? Shape{{batch, dirs, hidden}, true} : Shape{{dirs, batch, hidden}, true};
  std::vector<ValueInfo> outs{with_shape(dt, y), with_shape(dt, state)};
  if (outputs == 3) outs.push_back(with_shape(dt, state));
  return outs;
}

std::vector<ValueInfo> infer_matmul(const NodeView& n) {
  const ValueInfo *a = n.input(0), *b = n.input(1);
  DType dt = a ? a->dtype : DType::Undefined;
  if (!n.rank_known(0) || !n.rank_known(1)) return {unknown_like(dt)};
  Shape as = a->shape, bs = b->shape;
  if (as.dims.empty() || bs.dims.empty()) n.fail("MatMul operands must not be scalars");
  bool a_vec = as.dims.size() == 1, b_vec = bs.dims.size() == 1;
  if (a_vec) as.dims.insert(as.dims.begin(), Dim::known(1));
  if (b_vec) bs.dims.push_back(Dim::known(1));
  const Dim& k1 = as.dims.back();
  const Dim& k2 = bs.dims[bs.dims.size() - 2];
  if (k1.is_known() && k2.is_known() && *k1.value != *k2.value)
    n.fail("inner dimensions differ: " + a->shape.to_string() + " times " + b->shape.to_string());
  ValueInfo ba = with_shape(dt, Shape{{as.dims.begin(), as.dims.end() - 2}, true});
  ValueInfo bb = with_shape(dt, Shape{{bs.dims.begin(), bs.dims.end() - 2}, true});
  Shape out = *broadcast(n, {&ba, &bb});  // both ranks are known, so there is a result
  if (!a_vec) out.dims.push_back(as.dims[as.dims.size() - 2]);
  if (!b_vec) out.dims.push_back(bs.dims.back());
  return {with_shape(dt, out)};
}

std::vector<ValueInfo> infer_reshape(const NodeView& n) {
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
      if (i >= x->shape.dims.size()) n.fail("shape entry " + std::to_string(i) + " is 0 (copy) but the input has rank " + std::to_string(x->shape.rank()));
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
    if (known == 0 || total % known != 0)
      n.fail("cannot reshape " + x->shape.to_string() + " to " + dims_to_string(*target));
    out.dims[size_t(minus_one)] = Dim::known(total / known);
  } else if (minus_one >= 0 && n.rank_known(0)) {
    // Symbolic: [batch, C, H, W] -> [batch, -1] keeps the symbol when the rest is fixed and equal.
    std::vector<Dim> in_rest, out_rest;
    int64_t in_known = 1, out_known = 1;
    bool ok = true;
    std::multiset<std::string> in_syms, out_syms;
    for (const auto& d : x->shape.dims) {
      if (d.is_known()) in_known *= *d.value;
      else if (!d.symbol.empty()) in_syms.insert(d.symbol);
      else ok = false;
    }
    for (size_t i = 0; i < out.dims.size(); ++i) {
      if (int(i) == minus_one) continue;
      const Dim& d = out.dims[i];
      if (d.is_known()) out_known *= *d.value;
      else if (!d.symbol.empty()) out_syms.insert(d.symbol);
      else ok = false;
    }
    if (ok && out_known && std::includes(in_syms.begin(), in_syms.end(), out_syms.begin(), out_syms.end())) {
      std::multiset<std::string> left;
      std::set_difference(in_syms.begin(), in_syms.end(), out_syms.begin(), out_syms.end(), std::inserter(left, left.end()));
      if (left.empty() && in_known % out_known == 0) out.dims[size_t(minus_one)] = Dim::known(in_known / out_known);
      else if (left.size() == 1 && in_known == out_known) out.dims[size_t(minus_one)] = Dim::named(*left.begin());
    }
  }
  if (n.rank_known(0) && x->shape.is_concrete() && out.is_concrete() &&
      checked_numel(out.concrete()) != checked_numel(x->shape.concrete()))
    n.fail("cannot reshape " + x->shape.to_string() + " to " + out.to_string());
  return {with_shape(dt, out)};
}

std::vector<ValueInfo> infer_reduce(const NodeView& n, bool arg) {
  const ValueInfo* x = n.input(0);
  DType dt = arg ? DType::Int64 : (x ? x->dtype : DType::Undefined);
  if (!n.rank_known(0)) return {unknown_like(dt)};
  const int64_t rank = x->shape.rank();
  const bool keep = n.attr_int("keepdims", 1) != 0;
  std::vector<int64_t> axes;
  if (arg) {
    axes.push_back(n.attr_int("axis", 0));
  } else if (auto a = n.attr_ints("axes")) {
    axes = *a;
  } else if (n.input(1)) {
    const Tensor* t = n.value(1);
    if (!t) return {unknown_like(dt)};
    axes = t->to_int64_vector();
  }
  if (axes.empty() && !arg) {
    if (n.attr_int("noop_with_empty_axes", 0)) return {*x};
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  std::set<int64_t> reduced;
  for (int64_t a : axes) reduced.insert(norm_axis(n, a, rank));
  Shape out;
  for (int64_t i = 0; i < rank; ++i) {
    if (!reduced.count(i)) out.dims.push_back(x->shape.dims[size_t(i)]);
    else if (keep) out.dims.push_back(Dim::known(1));
  }
  return {with_shape(dt, out)};
}

// Resize and Upsample. Exporters give a fixed output size as constant scales
// or sizes: the output's dims follow as the kernel computes them. Otherwise
// the resized axes are unknown.
ValueInfo infer_resize(const NodeView& n) {
  const ValueInfo* x = n.input(0);
  const DType dt = x ? x->dtype : DType::Undefined;
  if (!n.rank_known(0)) return unknown_like(dt);
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
      if (!(size <= double(kMaxSize))) n.fail("scales holds " + std::to_string(scales[i]) + ": the resized axis would be larger than 2^62");
      d = Dim::known(int64_t(size));
    } else if (!(by_scales && scales[i] == 1)) {
      d = Dim::unknown();
    }
  }
  return with_shape(dt, out);
}

std::vector<ValueInfo> infer_node(const NodeView& n, const Graph& graph) {
  const std::string& op = n.node.op_type;
  const ValueInfo* x = n.input(0);
  // Every standard operator but these needs its first input; the backends
  // may then take input 0 as given.
  static const std::set<std::string> first_input_optional = {"Constant", "RandomNormal", "RandomUniform", "Loop", "Scan",
                                                             "Optional", "SequenceEmpty"};
  if (!x && n.node.domain.empty() && !first_input_optional.count(op)) n.fail("its first input is required but missing");
  const DType dt = x ? x->dtype : DType::Undefined;
  auto same = [&] { return x ? *x : ValueInfo{}; };

  static const std::set<std::string> unary = {
      "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Ceil", "Cos", "Cosh", "Erf", "Exp", "Floor",
      "Log", "Neg", "Reciprocal", "Round", "Sign", "Sin", "Sinh", "Sqrt", "Tan", "Tanh", "Not", "Relu",
      "Sigmoid", "Elu", "Selu", "Celu", "LeakyRelu", "HardSigmoid", "HardSwish", "Mish", "Softplus",
      "Softsign", "ThresholdedRelu", "Shrink", "Gelu", "PRelu", "Identity", "Softmax", "LogSoftmax",
      "Hardmax", "LRN", "InstanceNormalization", "MeanVarianceNormalization", "Clip", "CumSum", "Trilu",
      "ReverseSequence", "BitwiseNot"};
  static const std::set<std::string> binary = {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "BitShift",
                                               "And", "Or", "Xor", "Max", "Min", "Mean", "Sum"};
  static const std::set<std::string> compare = {"Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"};

  if (unary.count(op)) {
    // The axes it normalises over must exist (a scalar has none).
    if (n.rank_known(0) && op == "MeanVarianceNormalization")
      for (int64_t a : n.attr_ints("axes").value_or(std::vector<int64_t>{0, 2, 3})) norm_axis(n, a, x->shape.rank());
    return {same()};
  }
  if (op == "IsNaN" || op == "IsInf") {
    ValueInfo v = same();
    v.dtype = DType::Bool;
    return {v};
  }
  if (binary.count(op) || compare.count(op) || op == "Where") {
    auto s = broadcast(n, n.in);
    DType t = compare.count(op) ? DType::Bool : op == "Where" ? (n.input(1) ? n.input(1)->dtype : DType::Undefined) : dt;
    return {s ? with_shape(t, *s) : unknown_like(t)};
  }
  if (op == "Cast") return {with_shape(DType(n.attr_int("to", 0)), x ? x->shape : Shape::unknown_rank())};
  if (op == "CastLike") return {with_shape(n.input(1) ? n.input(1)->dtype : DType::Undefined, x ? x->shape : Shape::unknown_rank())};
  if (op == "Dropout") {
    ValueInfo mask = same();
    if (n.node.opset >= 10) mask.dtype = DType::Bool;  // before, the input's type
    return {same(), mask};
  }
  if (op == "LayerNormalization") {
    // Mean and InvStdDev keep the axes before `axis` and are 1 from there on,
    // in the stash type (float unless stated).
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
    return {same(), stats, stats};
  }
  if (op == "BatchNormalization") return {same()};
  if (op == "Conv" || op == "ConvInteger") {
    auto outs = infer_window(n, true);
    if (op == "ConvInteger") outs[0].dtype = DType::Int32;
    return outs;
  }
  if (op == "ConvTranspose") return infer_conv_transpose(n);
  if (op == "RNN" || op == "GRU" || op == "LSTM") return infer_recurrent(n);
  if (op == "MaxPool" || op == "AveragePool" || op == "LpPool") return infer_window(n, false);
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool" || op == "GlobalLpPool") {
    if (!n.rank_known(0)) return {unknown_like(dt)};
    Shape s = x->shape;
    for (size_t i = 2; i < s.dims.size(); ++i) s.dims[i] = Dim::known(1);
    return {with_shape(dt, s)};
  }
  if (op == "MatMul" || op == "MatMulInteger") {
    auto outs = infer_matmul(n);
    if (op == "MatMulInteger") outs[0].dtype = DType::Int32;
    return outs;
  }
  if (op == "Gemm") {
    const ValueInfo* b = n.input(1);
    if (!n.rank_known(0) || !n.rank_known(1)) return {unknown_like(dt)};
    if (x->shape.rank() != 2 || b->shape.rank() != 2)
      n.fail("A and B must be matrices, got " + x->shape.to_string() + " and " + b->shape.to_string());
    bool ta = n.attr_int("transA", 0), tb = n.attr_int("transB", 0);
    Dim m = x->shape.dims[ta ? 1 : 0], k1 = x->shape.dims[ta ? 0 : 1];
    Dim k2 = b->shape.dims[tb ? 1 : 0], nn = b->shape.dims[tb ? 0 : 1];
    if (k1.is_known() && k2.is_known() && *k1.value != *k2.value)
      n.fail("inner dimensions differ: A " + x->shape.to_string() + " and B " + b->shape.to_string());
    return {with_shape(dt, Shape{{m, nn}, true})};
  }
  if (op == "Flatten") {
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
        if (d.is_known()) p *= *d.value;
        else syms.push_back(d);
      }
      if (syms.empty()) return Dim::known(p);
      if (syms.size() == 1 && p == 1) return syms[0];
      return Dim::unknown();
    };
    return {with_shape(dt, Shape{{product(0, axis), product(axis, rank)}, true})};
  }
  if (op == "Reshape") return infer_reshape(n);
  if (op == "Transpose") {
    if (!n.rank_known(0)) return {unknown_like(dt)};
    int64_t rank = x->shape.rank();
    auto perm = n.attr_ints("perm");
    std::vector<int64_t> p;
    if (perm) p = *perm;
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
  if (op == "Squeeze" || op == "Unsqueeze") {
    if (!n.rank_known(0)) return {unknown_like(dt)};
    std::optional<std::vector<int64_t>> axes = n.ints_from("axes", 1);
    if (!axes && n.input(1)) return {unknown_like(dt)};
    Shape s;
    if (op == "Squeeze") {
      int64_t rank = x->shape.rank();
      std::set<int64_t> drop;
      if (axes) {
        for (int64_t a : *axes) {
          int64_t ax = norm_axis(n, a, rank);
          const Dim& d = x->shape.dims[size_t(ax)];
          if (d.is_known() && *d.value != 1) n.fail("cannot squeeze axis " + std::to_string(a) + " of size " + std::to_string(*d.value));
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
    } else {
      if (!axes) n.fail("axes are required");
      int64_t rank = x->shape.rank() + int64_t(axes->size());
      std::set<int64_t> add;
      for (int64_t a : *axes)
        if (!add.insert(norm_axis(n, a, rank)).second) n.fail("axes repeat axis " + std::to_string(a));
      size_t j = 0;
      for (int64_t i = 0; i < rank; ++i) s.dims.push_back(add.count(i) ? Dim::known(1) : x->shape.dims[j++]);
    }
    return {with_shape(dt, s)};
  }
  if (op == "Concat") {
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
          if (d.is_known()) total += *d.value;
          else total_known = false;
        } else if (d.is_known() && s.dims[size_t(i)].is_known() && *d.value != *s.dims[size_t(i)].value) {
          n.fail("inputs " + first->shape.to_string() + " and " + v->shape.to_string() + " differ outside axis " + std::to_string(axis));
        } else if (!s.dims[size_t(i)].is_known() && d.is_known()) {
          s.dims[size_t(i)] = d;
        }
      }
    }
    s.dims[size_t(axis)] = total_known ? Dim::known(total) : (n.in.size() == 1 ? first->shape.dims[size_t(axis)] : Dim::unknown());
    return {with_shape(dt, s)};
  }
  if (op == "Shape") {
    int64_t r = x && x->shape.rank_known ? x->shape.rank() : -1;
    if (r < 0) return {with_shape(DType::Int64, Shape{{Dim::unknown()}, true})};
    auto [start, end] = shape_range(n, r);
    return {with_shape(DType::Int64, Shape{{Dim::known(end - start)}, true})};
  }
  if (op == "Size") return {with_shape(DType::Int64, Shape{})};
  if (op == "Resize" || op == "Upsample") return {infer_resize(n)};
  if (op == "NonZero") {  // one column per nonzero element: only the count depends on the data
    if (!n.rank_known(0)) return {unknown_like(DType::Int64)};
    return {with_shape(DType::Int64, Shape{{Dim::known(x->shape.rank()), Dim::unknown()}, true})};
  }
  if (op == "Gather") {
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
  if (op == "ReduceSum" || op == "ReduceMean" || op == "ReduceMax" || op == "ReduceMin" || op == "ReduceProd" ||
      op == "ReduceL1" || op == "ReduceL2" || op == "ReduceLogSum" || op == "ReduceLogSumExp" || op == "ReduceSumSquare")
    return infer_reduce(n, false);
  if (op == "ArgMax" || op == "ArgMin") return infer_reduce(n, true);
  if (op == "ConstantOfShape") {
    const Attribute* v = n.node.attr("value");
    DType t = v && v->kind == Attribute::Kind::Tensor ? v->t.dtype() : DType::Float32;
    if (const Tensor* shape = n.value(0)) return {with_shape(t, Shape::from_dims(sizes_from(n, shape->to_int64_vector(), "shape")))};
    if (n.rank_known(0) && x->shape.rank() == 1 && x->shape.dims[0].is_known()) {
      Shape s;
      s.dims.assign(size_t(*x->shape.dims[0].value), Dim::unknown());
      return {with_shape(t, s)};
    }
    return {unknown_like(t)};
  }
  if (op == "Expand") {
    const Tensor* shape = n.value(1);
    if (!shape) return {unknown_like(dt)};
    ValueInfo target = with_shape(dt, Shape::from_dims(sizes_from(n, shape->to_int64_vector(), "shape")));
    auto s = broadcast(n, {x, &target});
    return {s ? with_shape(dt, *s) : unknown_like(dt)};
  }
  if (op == "Slice") {
    if (!n.rank_known(0)) return {unknown_like(dt)};
    auto starts = n.ints_from("starts", 1), ends = n.ints_from("ends", 2);
    if (!starts || !ends) return {unknown_like(dt)};
    int64_t rank = x->shape.rank();
    std::vector<int64_t> axes, steps;
    if (auto a = n.ints_from("axes", 3)) axes = *a;
    else if (n.input(3)) return {unknown_like(dt)};
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
  if (op == "Split") {
    if (!n.rank_known(0)) {
      std::vector<ValueInfo> outs(n.node.outputs.size(), unknown_like(dt));
      return outs;
    }
    int64_t rank = x->shape.rank();
    int64_t axis = norm_axis(n, n.attr_int("axis", 0), rank);
    const Dim& d = x->shape.dims[size_t(axis)];
    size_t count = n.node.outputs.size();
    std::vector<int64_t> sizes;
    if (auto sp = n.ints_from("split", 1)) sizes = *sp;
    else if (n.input(1)) return std::vector<ValueInfo>(count, unknown_like(dt));
    if (!sizes.empty()) {
      if (sizes.size() != count) n.fail("split has " + std::to_string(sizes.size()) + " sizes for " + std::to_string(count) + " outputs");
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
  if (op == "Pad") {
    if (!n.rank_known(0)) return {unknown_like(dt)};
    auto pads = n.ints_from("pads", 1);
    if (!pads || n.input(3)) return {unknown_like(dt)};
    int64_t rank = x->shape.rank();
    if (int64_t(pads->size()) != 2 * rank) n.fail("pads has " + std::to_string(pads->size()) + " entries for rank " + std::to_string(rank));
    Shape s = x->shape;
    for (int64_t i = 0; i < rank; ++i)
      if (s.dims[size_t(i)].is_known())
        s.dims[size_t(i)] = Dim::known(size_from(n, Wide(*s.dims[size_t(i)].value) + (*pads)[size_t(i)] + (*pads)[size_t(i + rank)],
                                                 "the padded size of axis " + std::to_string(i)));
      else if ((*pads)[size_t(i)] || (*pads)[size_t(i + rank)]) s.dims[size_t(i)] = Dim::unknown();
    return {with_shape(dt, s)};
  }
  if (op == "DepthToSpace" || op == "SpaceToDepth") {
    if (!n.rank_known(0) || x->shape.rank() != 4) return {unknown_like(dt)};
    const int64_t b = n.attr_int("blocksize", 0);
    if (b <= 0) n.fail("blocksize must be positive");
    // DepthToSpace moves b*b channels into a b x b block of pixels; SpaceToDepth back.
    const bool to_space = op == "DepthToSpace";
    const auto& xs = x->shape.dims;
    // The block must divide what it is taken from (b*b compared without
    // overflowing it); products of the other sizes are checked.
    auto divides = [&](const Dim& d, int64_t times, const char* what) {
      if (d.is_known() && (*d.value > 0 ? b > *d.value / times || *d.value % (b * times) != 0 : false))
        n.fail("blocksize " + std::to_string(b) + " does not divide the " + what + " of " + x->shape.to_string());
    };
    if (to_space) divides(xs[1], b, "channels");
    else divides(xs[2], 1, "height"), divides(xs[3], 1, "width");
    auto times = [](const Dim& d, int64_t num, int64_t den) {
      return d.is_known() ? Dim::known(checked_numel({*d.value, num}) / den) : Dim::unknown();
    };
    return {with_shape(dt, Shape{{xs[0], to_space ? times(xs[1], 1, b * b) : times(times(xs[1], b, 1), b, 1),
                                  to_space ? times(xs[2], b, 1) : times(xs[2], 1, b), to_space ? times(xs[3], b, 1) : times(xs[3], 1, b)},
                                 true})};
  }
  if (op == "ScatterND" || op == "ScatterElements" || op == "Scatter") return {same()};
  if (op == "GatherElements") return {with_shape(dt, n.input(1) ? n.input(1)->shape : Shape::unknown_rank())};
  if (op == "DequantizeLinear") return {with_shape(DType::Float32, x ? x->shape : Shape::unknown_rank())};
  if (op == "QuantizeLinear") {
    const ValueInfo* zero_point = n.input(2);
    return {with_shape(zero_point ? zero_point->dtype : DType::UInt8, x ? x->shape : Shape::unknown_rank())};
  }
  if (op == "TopK") {
    auto k = n.ints_from("k", 1);
    if (!n.rank_known(0) || !k || k->size() != 1) return {unknown_like(dt), unknown_like(DType::Int64)};
    Shape s = x->shape;
    s.dims[size_t(norm_axis(n, n.attr_int("axis", -1), s.rank()))] = Dim::known((*k)[0]);
    return {with_shape(dt, s), with_shape(DType::Int64, s)};
  }
  if (op == "Tile") {
    if (!n.rank_known(0) || !n.value(1)) return {unknown_like(dt)};
    auto reps = n.value(1)->to_int64_vector();
    if (int64_t(reps.size()) != x->shape.rank()) n.fail("repeats has " + std::to_string(reps.size()) + " entries for rank " + std::to_string(x->shape.rank()));
    sizes_from(n, reps, "repeats");
    Shape s = x->shape;
    for (size_t i = 0; i < reps.size(); ++i)
      if (s.dims[i].is_known())
        s.dims[i] = Dim::known(size_from(n, Wide(*s.dims[i].value) * reps[i], "the tiled size of axis " + std::to_string(i)));
      else if (reps[i] != 1)
        s.dims[i] = Dim::unknown();
    return {with_shape(dt, s)};
  }
  // No rule: fall back on the model's own annotations, if any.
  std::vector<ValueInfo> outs;
  for (const auto& o : n.node.outputs) {
    auto it = graph.value_info.find(o);
    outs.push_back(it != graph.value_info.end() ? it->second : ValueInfo{});
  }
  return outs;
}

bool foldable(const NodeView& n) {
  if (!may_fold(n.node)) return false;
  bool any = false;
  for (size_t i = 0; i < n.in.size(); ++i) {
    if (!n.in[i]) continue;
    if (!n.values[i] || n.values[i]->numel() > kMaxFoldElements) return false;
    any = true;
  }
  return any || n.node.op_type == "Range" || n.node.op_type == "EyeLike";
}

// Unifies an inferred value with the model's declaration: declared fixed dims
// fill in unknown ones; contradictions are errors. Not for the outputs whose
// length is the data's to decide: a model that declares NonZero's output
// 2x3 (as ONNX's own backend tests do) describes one input, and taken as the
// shape it made every other input an error.
ValueInfo reconcile(const Node& node, const std::string& name, ValueInfo inferred, const ValueInfo* declared) {
  inferred.name = name;
  static const std::set<std::string> data_decides = {"NonZero", "Unique", "NonMaxSuppression", "Compress"};
  if (!declared || (node.domain.empty() && data_decides.count(node.op_type))) return inferred;
  if (inferred.dtype == DType::Undefined) inferred.dtype = declared->dtype;
  if (!inferred.shape.rank_known) {
    inferred.shape = declared->shape;
    return inferred;
  }
  if (!declared->shape.rank_known || declared->shape.rank() != inferred.shape.rank()) return inferred;
  for (size_t i = 0; i < inferred.shape.dims.size(); ++i) {
    Dim& got = inferred.shape.dims[i];
    const Dim& want = declared->shape.dims[i];
    if (!got.is_known() && got.symbol.empty()) got = want;
  }
  return inferred;
}

}  // namespace

bool may_fold(const Node& node) {
  static const std::set<std::string> never = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                                              "Multinomial", "Bernoulli", "If", "Loop", "Scan", "Dropout"};
  return node.domain.empty() && !never.count(node.op_type);
}

InferenceResult infer_shapes(const Graph& graph, const std::vector<ValueInfo>& inputs, const ConstantEvaluator& evaluator) {
  InferenceResult r;
  for (const auto& [name, t] : graph.initializers) {
    r.values[name] = with_shape(t.dtype(), Shape::from_dims(t.dims()));
    r.values[name].name = name;
    r.constants[name] = t;
  }
  for (const auto& in : graph.inputs) {
    ValueInfo v = in;
    for (const auto& o : inputs)
      if (o.name == in.name) v = o;
    if (graph.initializers.count(in.name)) {
      bool overridden = false;
      for (const auto& o : inputs) overridden |= o.name == in.name;
      if (!overridden) continue;  // keeps the initializer's own shape and value
      r.constants.erase(in.name);
    }
    r.values[in.name] = v;
  }

  for (const Node& node : graph.nodes) {
    NodeView view{node, {}, {}};
    for (const auto& name : node.inputs) {
      if (name.empty()) {
        view.in.push_back(nullptr);
        view.values.push_back(nullptr);
        continue;
      }
      auto it = r.values.find(name);
      // Outer-scope names of a subgraph are unknown here: treat them as untyped.
      static const ValueInfo untyped;
      view.in.push_back(it == r.values.end() ? &untyped : &it->second);
      auto c = r.constants.find(name);
      view.values.push_back(c == r.constants.end() ? nullptr : &c->second);
    }

    std::vector<ValueInfo> outs;
    bool folded = false;
    if (evaluator && foldable(view)) {
      std::optional<std::vector<Tensor>> values;
      try {
        values = evaluator(node, view.values);
      } catch (const Error& e) {
        // A constant subexpression that fails to evaluate is an error of the model.
        fail(ErrorKind::InvalidModel, e.what());
      }
      if (values) {
        folded = true;
        for (size_t i = 0; i < node.outputs.size() && i < values->size(); ++i) {
          if (node.outputs[i].empty()) continue;
          r.constants[node.outputs[i]] = (*values)[i];
          outs.push_back(with_shape((*values)[i].dtype(), Shape::from_dims((*values)[i].dims())));
        }
      }
    }
    if (!folded) {
      try {
        outs = infer_node(view, graph);
      } catch (const Error& e) {
        // A size checked where the node is not known (checked_numel) is named here.
        if (std::string_view(e.what()).substr(0, 6) == "node '") throw;
        fail(e.kind(), node.describe() + ": " + e.what());
      }
      // Shape of a concrete shape is a constant: the heart of shape-arithmetic folding.
      // input(0): a node may come with no inputs at all.
      const ValueInfo* first = view.input(0);
      if (node.op_type == "Shape" && node.domain.empty() && first && first->shape.is_concrete() && !node.outputs.empty()) {
        Dims d = first->shape.concrete();
        auto [start, end] = shape_range(view, int64_t(d.size()));
        r.constants[node.outputs[0]] = Tensor::from_vector<int64_t>({end - start}, std::vector<int64_t>(d.begin() + start, d.begin() + end));
      } else if (node.op_type == "Size" && node.domain.empty() && first && first->shape.is_concrete() &&
                 !node.outputs.empty()) {
        r.constants[node.outputs[0]] = Tensor::scalar<int64_t>(checked_numel(first->shape.concrete()));
      }
    }
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      const std::string& name = node.outputs[i];
      if (name.empty()) continue;
      ValueInfo inferred = i < outs.size() ? outs[i] : ValueInfo{};
      const ValueInfo* declared = nullptr;
      auto vi = graph.value_info.find(name);
      if (vi != graph.value_info.end()) declared = &vi->second;
      for (const auto& o : graph.outputs)
        if (o.name == name) declared = &o;
      r.values[name] = reconcile(node, name, inferred, declared);
    }
  }
  return r;
}

Specialization specialize(const Graph& graph, const std::map<std::string, std::pair<DType, Dims>>& input_shapes,
                          const ConstantEvaluator& evaluator) {
  std::vector<ValueInfo> inputs;
  std::map<std::string, int64_t> symbols;
  for (const auto& [name, spec] : input_shapes) {
    const ValueInfo* decl = graph.find_input(name);
    if (!decl) fail(ErrorKind::InvalidArgument, "the model has no input '" + name + "'");
    const auto& [dtype, dims] = spec;
    if (decl->dtype != DType::Undefined && decl->dtype != dtype)
      fail(ErrorKind::InvalidArgument, "input '" + name + "' must be " + dtype_name(decl->dtype) + ", got " + dtype_name(dtype));
    if (decl->shape.rank_known) {
      if (decl->shape.rank() != int(dims.size()))
        fail(ErrorKind::InvalidArgument, "input '" + name + "' must have shape " + decl->shape.to_string() + ", got " + dims_to_string(dims));
      for (size_t i = 0; i < dims.size(); ++i) {
        const Dim& d = decl->shape.dims[i];
        if (d.is_known() && *d.value != dims[i])
          fail(ErrorKind::InvalidArgument, "input '" + name + "' must have shape " + decl->shape.to_string() + ", got " + dims_to_string(dims));
        if (!d.is_known() && !d.symbol.empty()) {
          auto [it, fresh] = symbols.emplace(d.symbol, dims[i]);
          if (!fresh && it->second != dims[i])
            fail(ErrorKind::InvalidArgument, "input '" + name + "' sets '" + d.symbol + "' to " + std::to_string(dims[i]) +
                                                 ", another input set it to " + std::to_string(it->second));
        }
      }
    }
    ValueInfo v;
    v.name = name;
    v.dtype = dtype;
    v.shape = Shape::from_dims(dims);
    inputs.push_back(v);
  }
  for (const auto* req : graph.required_inputs())
    if (!input_shapes.count(req->name)) fail(ErrorKind::InvalidArgument, "no shape given for input '" + req->name + "'");

  Specialization s;
  s.result = infer_shapes(graph, inputs, evaluator);
  for (const auto& node : graph.nodes)
    for (const auto& o : node.outputs)
      if (!o.empty() && !s.result.values[o].shape.is_concrete()) s.dynamic.push_back(o);
  return s;
}

}  // namespace kiln::ir
