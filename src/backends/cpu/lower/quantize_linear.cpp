// QuantizeLinear and DequantizeLinear, per tensor and per channel, and
// Cast of the quantized and int32 types to float: oneDNN reorders that
// scale and shift (or convert), and binaries where the zero points differ
// between channels.
#include <algorithm>
#include <cmath>

#include "backends/cpu/lower/families.hpp"
#include "backends/cpu/lower/quantized_operands.hpp"
#include "backends/reference/kernel_context.hpp"
#include "backends/reference/ops/op_util.hpp"

namespace kiln::cpu::lowering {

namespace {

// QuantizeLinear and DequantizeLinear's scales and zero points per channel
// along `axis` (1-D, of that axis' length).
struct PerChannel {
  std::vector<float> scales, zero_points;
  int axis = 0;
  bool one_zero_point() const {
    return std::all_of(zero_points.begin(), zero_points.end(), [&](float z) { return z == zero_points[0]; });
  }
};

std::optional<PerChannel> per_channel(Context& cx, const ir::Node& n, DType type, const Dims& dims) {
  const ir::Tensor* s = cx.constant(n.inputs[1]);
  ref::KernelContext ctx(n, {}, nullptr);
  int64_t axis = ctx.attr_int("axis", 1);
  if (!s || s->dtype() != DType::Float32 || s->dims().size() != 1 || !normalize_axis(axis, dims.size()) ||
      s->numel() != dims[size_t(axis)])
    return std::nullopt;
  PerChannel q{std::vector<float>(s->data<float>(), s->data<float>() + s->numel()), std::vector<float>(size_t(s->numel()), 0.0f),
               int(axis)};
  for (float v : q.scales)
    if (!(v > 0) || !std::isfinite(v)) return std::nullopt;
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    const ir::Tensor* z = cx.constant(n.inputs[2]);
    if (!z || z->dtype() != type || z->numel() != s->numel()) return std::nullopt;
    for (int64_t i = 0; i < z->numel(); ++i) q.zero_points[size_t(i)] = float(z->as_int64(i));
  } else if (type != DType::UInt8) {
    return std::nullopt;
  }
  return q;
}

// Zero points that differ between channels, which oneDNN 2.6's reorders do
// not take: oneDNN binaries with the scales and zero points as per-channel
// operands, one each (a binary post-op cannot be saved in the cache).
// Quantizing: x / s[c] (in float, as the reference kernel divides), + z[c]
// rounded and saturated into the output type. Dequantizing: the integers
// made float (oneDNN 2.6 has only its reference binary for an 8-bit source
// beside a float one), - z[c], * s[c].
bool per_channel_zero_points(Context& cx, const ir::Node& n, const PerChannel& q, bool quantize) {
  const std::string &x = n.inputs[0], &y = n.outputs[0];
  const Dims dims = cx.dims(y);
  Dims param_dims(dims.size(), 1);
  param_dims[size_t(q.axis)] = dims[size_t(q.axis)];
  const md param = plain_md(param_dims);
  // In the layout x has where that is dense (plain, channels last).
  md from = cx.val(x).layout;
  auto in_float = retyped(from, dt::f32), to = retyped(from, *onednn_type(cx.dtype(y)));
  if (!in_float || !to) {
    from = cx.plain_layout(x);
    in_float = retyped(from, dt::f32);
    to = retyped(from, *onednn_type(cx.dtype(y)));
  }
  using alg = dnnl::algorithm;
  struct Binary {
    alg op;
    const std::vector<float>* operand;
    dnnl::binary::primitive_desc pd;
  };
  std::vector<Binary> binaries;
  if (quantize)
    binaries = {{alg::binary_div, &q.scales, {}}, {alg::binary_add, &q.zero_points, {}}};
  else
    binaries = {{alg::binary_sub, &q.zero_points, {}}, {alg::binary_mul, &q.scales, {}}};
  for (size_t i = 0; i < binaries.size(); ++i) {
    try {
      binaries[i].pd = dnnl::binary::primitive_desc(
          dnnl::binary::desc(binaries[i].op, *in_float, param, i + 1 == binaries.size() ? *to : *in_float), user_scratchpad(),
          cpu_engine());
    } catch (const dnnl::error&) {
      return false;
    }
    if (reference_kernel(binaries[i].pd)) return false;
  }
  int src = from == cx.val(x).layout ? cx.val(x).buffer : cx.plain(x);
  if (!quantize) {
    const int as_float = cx.add_buffer(Buffer::Kind::Arena, 0, int64_t(in_float->get_size()), x + "#float");
    cx.add_reorder(n.describe() + " (as float)", src, as_float, from, *in_float);
    src = as_float;
  }
  const int between = cx.add_buffer(Buffer::Kind::Arena, 0, int64_t(in_float->get_size()), y + "#float");
  const int dst = cx.define(y, *to, is_plain(*to, dims));
  cx.compiled();
  for (size_t i = 0; i < binaries.size(); ++i) {
    const bool last = i + 1 == binaries.size();
    auto operand = std::make_shared<std::vector<float>>(*binaries[i].operand);
    cx.add_primitive(n.describe() + (last ? "" : " (scaled)"), binaries[i].pd, {i == 0 ? src : between, last ? dst : between},
                     {0, 1}, {{DNNL_ARG_SRC_0, *in_float}, {DNNL_ARG_DST, last ? *to : *in_float}},
                     {{DNNL_ARG_SRC_1, cx.constant_memory(param, operand->data(), param, operand)}});
  }
  return true;
}

}  // namespace

// Cast of the quantized and int32 types to float: a reorder (exact for
// 8-bit values; int32 rounds to the nearest float, as a C conversion does).
// Casts from float truncate in ONNX, where a reorder rounds: not here.
bool lower_cast(Context& cx, const ir::Node& n) {
  if (n.inputs.size() != 1 || n.outputs.size() != 1 || !cx.is_f32(n.outputs[0])) return false;
  const DType from = cx.dtype(n.inputs[0]);
  if (!is_8bit(from) && from != DType::Int32) return false;
  const md src = cx.val(n.inputs[0]).layout;
  auto dst = retyped(src, dt::f32);
  if (!dst) return false;
  cx.add_reorder(n.describe(), cx.val(n.inputs[0]).buffer, cx.define(n.outputs[0], *dst, is_plain(*dst, cx.dims(n.outputs[0]))),
                 src, *dst);
  cx.compiled();
  return true;
}

// QuantizeLinear and DequantizeLinear: a reorder between the float and the
// quantized type that scales (per tensor or per channel) and shifts by the
// zero point, in the layout the input has (a convolution's channels-last
// output stays channels last).
bool lower_quantize(Context& cx, const ir::Node& n) {
  if (n.inputs.size() < 2 || n.outputs.size() != 1) return false;
  const std::string &x = n.inputs[0], &y = n.outputs[0];
  const bool quantize = n.op_type == "QuantizeLinear";
  const DType qt = cx.dtype(quantize ? y : x);
  if (!cx.is_f32(quantize ? x : y) || !(is_8bit(qt) || (!quantize && qt == DType::Int32))) return false;
  const Dims dims = cx.dims(y);
  const ir::Tensor* s = cx.constant(n.inputs[1]);
  std::optional<PerChannel> channels;
  std::optional<Quantization> q;
  if (s && s->dims().size() == 1 && s->numel() > 1) {
    channels = per_channel(cx, n, qt, dims);
    if (channels && !channels->one_zero_point()) return is_8bit(qt) && per_channel_zero_points(cx, n, *channels, quantize);
    if (channels) q = Quantization{1, int32_t(channels->zero_points[0])};
  } else {
    q = per_tensor(cx, n, 1, 2, qt);
  }
  if (!q || (qt == DType::Int32 && q->zero_point != 0)) return false;
  const md from = cx.val(x).layout;
  const dt type = *onednn_type(cx.dtype(y));
  // From channel blocks (a float convolution's output) to channels last,
  // the layout the int8 convolutions take.
  auto to = retyped(from, type);
  if (!to) to = dims.size() >= 3 && dims.size() <= 5 ? retyped(channels_last(dims), type) : plain_md(dims, type);
  std::unordered_map<int, dnnl::memory> constants;
  dnnl::primitive_attr attr = user_scratchpad();
  if (channels) {
    std::vector<float> scales;
    for (float v : channels->scales) scales.push_back(quantize ? float(1.0 / double(v)) : v);
    attr.set_output_scales(1 << channels->axis, scales);
  } else {
    output_scales_arg(cx, constants, attr, quantize ? float(1.0 / double(q->scale)) : q->scale);
  }
  zero_point_arg(cx, constants, attr, quantize ? DNNL_ARG_DST : DNNL_ARG_SRC, q->zero_point);
  const dnnl::reorder::primitive_desc pd(cpu_engine(), from, cpu_engine(), *to, attr);
  emit(cx, n, pd, cx.val(x).buffer, from, std::move(constants), *to);
  return true;
}

}  // namespace kiln::cpu::lowering
