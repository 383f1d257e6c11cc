// Quantized operators (QLinearConv, ConvInteger, QLinearMatMul,
// MatMulInteger, QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
// Cast of integers to float, and ONNX Runtime's QLinearAdd and QGemm):
// oneDNN int8 convolutions and matmuls with the
// scales and zero points as attributes, reorders that quantize, dequantize
// or convert, and a host kernel for the dynamic quantization.
// A quantized model's QDQ form reaches here as these operators
// (passes/fuse_qdq.cpp). The arithmetic is the reference kernels' (an int32
// accumulator, requantized with rounding half to even and saturation) but
// with the requantization scale in float, where the reference works in
// double: a result on a rounding tie may differ by one step.
#include <algorithm>
#include <cmath>

#include "backends/cpu/host_kernels.hpp"
#include "backends/cpu/lower/context.hpp"
#include "backends/cpu/lower/families.hpp"
#include "backends/cpu/lower/quantized_operands.hpp"
#include "backends/reference/kernel_context.hpp"
#include "backends/reference/ops/op_util.hpp"
#include "runtime/passes/passes.hpp"

namespace kiln::cpu::lowering {

namespace {

// Products per float sum where the int8 kernels are not exact: |a - zero
// point| <= 255 and |b| <= 128, so 512 of them sum to at most 16,711,680 <
// 2^24, where floats hold integers exactly.
constexpr int64_t kExactChunk = 512;

// Per output channel scales (one, or `channels`) with zero points all 0,
// as oneDNN's int8 kernels take weights.
std::optional<std::vector<float>> symmetric_weights(Context& cx, const ir::Node& n, size_t scale, size_t zero_point,
                                                    int64_t channels) {
  const ir::Tensor* s = cx.constant(n.inputs[scale]);
  if (!s || s->dtype() != DType::Float32 || (s->numel() != 1 && s->numel() != channels) || s->dims().size() > 1)
    return std::nullopt;
  std::vector<float> scales(s->data<float>(), s->data<float>() + s->numel());
  for (float v : scales)
    if (!(v > 0) || !std::isfinite(v)) return std::nullopt;
  if (zero_point < n.inputs.size() && !n.inputs[zero_point].empty()) {
    const ir::Tensor* z = cx.constant(n.inputs[zero_point]);
    if (!z || z->dtype() != DType::Int8) return std::nullopt;
    for (int64_t i = 0; i < z->numel(); ++i)
      if (z->as_int64(i) != 0) return std::nullopt;
  }
  return scales;
}

// The destination's requantization: x_scale * w_scale[c] / y_scale per
// output channel.
std::vector<float> requantization(float x_scale, const std::vector<float>& w_scales, float y_scale) {
  std::vector<float> out;
  for (float w : w_scales) out.push_back(float(double(x_scale) * double(w) / double(y_scale)));
  return out;
}

// What an int8 convolution computes besides its operands: the zero point of
// x, the output's type, its requantization (none: int32) and zero point.
struct Int8Conv {
  int32_t x_zero_point = 0;
  DType out = DType::Int32;
  std::vector<float> scales;
  int32_t y_zero_point = 0;
  // Where the int8 kernels would not be exact (int8_products_exact): x less
  // its zero point and the weights as floats, a float convolution, and a
  // reorder that requantizes its sums (with the scales and zero point).
  bool in_float = false;
  // Whether the float form may stand in where oneDNN has no int8 kernel but
  // its reference one (grouped convolutions of few channels per group
  // without VNNI): ConvInteger's sums only while they are exact.
  bool float_form = true;
};

// The float form of an int8 convolution (Int8Conv::in_float).
bool emit_float_conv(Context& cx, const ir::Node& n, const ir::Tensor& w, const ir::Tensor* b, const Int8Conv& q,
                     const dnnl::convolution_forward::desc& desc, const md& user_wei) {
  const std::string &x = n.inputs[0], &y = n.outputs[0];
  dnnl::convolution_forward::primitive_desc pd;
  try {
    pd = dnnl::convolution_forward::primitive_desc(desc, user_scratchpad(), cpu_engine());
  } catch (const dnnl::error&) {
    return false;
  }
  if (reference_kernel(pd)) return false;
  std::unordered_map<int, dnnl::memory> shift_constants;
  dnnl::primitive_attr shift = user_scratchpad();
  zero_point_arg(cx, shift_constants, shift, DNNL_ARG_FROM, q.x_zero_point);
  const md x_md = cx.val(x).layout;
  const dnnl::reorder::primitive_desc to_float(cpu_engine(), x_md, cpu_engine(), pd.src_desc(), shift);
  const int x_float = cx.add_buffer(Buffer::Kind::Arena, 0, int64_t(pd.src_desc().get_size()), x + "#float");
  cx.add_primitive(n.describe() + " (x in float)", to_float, {cx.val(x).buffer, x_float}, {0, 1},
                   {{DNNL_ARG_FROM, x_md}, {DNNL_ARG_TO, pd.src_desc()}}, std::move(shift_constants));

  auto weights = std::make_shared<std::vector<float>>(w.data<int8_t>(), w.data<int8_t>() + w.numel());
  md user_f32 = user_wei;
  user_f32.data.data_type = dnnl_f32;
  std::unordered_map<int, dnnl::memory> constants{
      {DNNL_ARG_WEIGHTS, cx.constant_memory(user_f32, weights->data(), pd.weights_desc(), weights)}};
  if (b) {
    auto bias = std::make_shared<std::vector<float>>(b->data<int32_t>(), b->data<int32_t>() + b->numel());
    const md bias_md({b->numel()}, dt::f32, dnnl::memory::format_tag::x);
    constants[DNNL_ARG_BIAS] = cx.constant_memory(bias_md, bias->data(), bias_md, bias);
  }
  const int sums = cx.add_buffer(Buffer::Kind::Arena, 0, int64_t(pd.dst_desc().get_size()), y + "#float");
  cx.add_primitive(n.describe(), pd, {x_float, sums}, {0, 1}, {{DNNL_ARG_SRC, pd.src_desc()}, {DNNL_ARG_DST, pd.dst_desc()}},
                   std::move(constants));

  const Dims out = cx.dims(y);
  const dt type = *onednn_type(q.out);
  auto y_md = retyped(pd.dst_desc(), type);
  if (!y_md) y_md = retyped(channels_last(out), type);
  std::unordered_map<int, dnnl::memory> requantize_constants;
  dnnl::primitive_attr requantize = user_scratchpad();
  if (!q.scales.empty()) requantize.set_output_scales(q.scales.size() == 1 ? 0 : 1 << 1, q.scales);
  zero_point_arg(cx, requantize_constants, requantize, DNNL_ARG_TO, q.y_zero_point);
  const dnnl::reorder::primitive_desc to_out(cpu_engine(), pd.dst_desc(), cpu_engine(), *y_md, requantize);
  const int dst = cx.define(y, *y_md, is_plain(*y_md, out));
  cx.compiled();
  cx.add_primitive(n.describe() + " (requantized)", to_out, {sums, dst}, {0, 1},
                   {{DNNL_ARG_FROM, pd.dst_desc()}, {DNNL_ARG_TO, *y_md}}, std::move(requantize_constants));
  return true;
}

// An int8 convolution of x by constant int8 weights `w` (+ an int32 bias).
bool emit_int8_conv(Context& cx, const ir::Node& n, const ir::Tensor& w, const ir::Tensor* b, const Int8Conv& q) {
  const std::string &x = n.inputs[0], &y = n.outputs[0];
  const Dims in = cx.dims(x), out = cx.dims(y), wdims = w.dims();
  const size_t rank = in.size();
  if (rank < 3 || rank > 5 || wdims.size() != rank) return false;
  ref::KernelContext ctx(n, {}, nullptr);
  const int64_t group = ctx.attr_int("group", 1);
  if (group < 1 || in[1] != wdims[1] * group || wdims[0] % group) return false;
  const Dims kernel(wdims.begin() + 2, wdims.end());
  const ref::Geometry geo = ref::forward_geometry(ctx, Dims(in.begin() + 2, in.end()), kernel, false);
  if (Dims(out.begin() + 2, out.end()) != geo.out) return false;
  dnnl::memory::dims wei = to_dnnl(wdims), dil;
  if (group > 1) {
    wei = {group, wdims[0] / group};
    wei.insert(wei.end(), wdims.begin() + 1, wdims.end());
  }
  for (int64_t d : geo.dilations) dil.push_back(d - 1);

  using tag = dnnl::memory::format_tag;
  const md user_wei = group > 1 ? md(wei, dt::s8,
                                     rank == 3   ? tag::goiw
                                     : rank == 4 ? tag::goihw
                                                 : tag::goidhw)
                                : plain_md(wdims, dt::s8);
  const auto any = dnnl::memory::format_tag::any;
  auto in_float = [&] {
    if (!q.float_form) return false;
    const md bias_f32 = b ? md({wdims[0]}, dt::f32, tag::x) : md();
    const dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                               md(to_dnnl(in), dt::f32, any), md(wei, dt::f32, any), bias_f32,
                                               md(to_dnnl(out), dt::f32, any), to_dnnl(geo.strides), dil, to_dnnl(geo.pad_begin),
                                               to_dnnl(geo.pad_end));
    return emit_float_conv(cx, n, w, b, q, desc, user_wei);
  };
  if (q.in_float) return in_float();

  std::unordered_map<int, dnnl::memory> constants;
  dnnl::primitive_attr attr = user_scratchpad();
  if (!q.scales.empty()) attr.set_output_scales(q.scales.size() == 1 ? 0 : 1 << 1, q.scales);
  zero_point_arg(cx, constants, attr, DNNL_ARG_SRC, q.x_zero_point);
  zero_point_arg(cx, constants, attr, DNNL_ARG_DST, q.y_zero_point);
  const md bias_md = b ? md({wdims[0]}, dt::s32, dnnl::memory::format_tag::x) : md();
  dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                       md(to_dnnl(in), *onednn_type(cx.dtype(x)), any), md(wei, dt::s8, any), bias_md,
                                       md(to_dnnl(out), *onednn_type(q.out), any), to_dnnl(geo.strides), dil,
                                       to_dnnl(geo.pad_begin), to_dnnl(geo.pad_end));
  dnnl::convolution_forward::primitive_desc pd;
  try {
    pd = dnnl::convolution_forward::primitive_desc(desc, attr, cpu_engine());
  } catch (const dnnl::error&) {
    return in_float();  // no int8 kernel for this case
  }
  if (reference_kernel(pd)) return in_float();
  constants[DNNL_ARG_WEIGHTS] = cx.constant_memory(user_wei, w.raw(), pd.weights_desc());
  if (b) constants[DNNL_ARG_BIAS] = cx.constant_memory(bias_md, b->raw(), bias_md);
  const int src = cx.as_layout(x, pd.src_desc());
  emit(cx, n, pd, src, pd.src_desc(), std::move(constants), pd.dst_desc());
  return true;
}

// An 8-bit zero point known only when the program runs (DynamicQuantizeLinear's)
// as the int32 oneDNN binds: one more step converting it.
int runtime_zero_point(Context& cx, const std::string& name) {
  const md one({1}, *onednn_type(cx.dtype(name)), dnnl::memory::format_tag::x);
  const md one_s32({1}, dt::s32, dnnl::memory::format_tag::x);
  const int s32 = cx.add_buffer(Buffer::Kind::Arena, 0, 4, name + "#int32");
  cx.add_reorder("zero point " + name + " as int32", cx.plain(name), s32, one, one_s32);
  return s32;
}

// The zero point of A in the float form of a product: a constant, or
// (`buffer` >= 0) an int32 of the run.
struct ZeroPointArg {
  int32_t value = 0;
  int buffer = -1;
};

// The int32 products of 8-bit rows (buffer `a`, plain rows x K as `a_md`
// describes) less their zero point by the constant int8 weights `w`
// (K x cols) into `dst`, a plain rows x cols int32 buffer, where the int8
// kernels would not be exact: K in chunks of at most kExactChunk, each
// chunk of A converted to float (oneDNN 2.6's matmul ignores the offset of
// a part of a larger source: a reorder takes it), its float sums exact, the
// chunks added up in int32 (a reorder's sum).
// With `accumulate`, the products add to what `dst` holds.
void exact_float_products(Context& cx, const ir::Node& n, int a, const md& a_md, ZeroPointArg zp, const ir::Tensor& w, int dst,
                          bool accumulate = false) {
  const int64_t rows = a_md.dims()[0], k = w.dims()[0], cols = w.dims()[1];
  const md out_f32 = plain_md({rows, cols}), out_s32 = plain_md({rows, cols}, dt::s32);
  const int a_float = cx.add_buffer(Buffer::Kind::Arena, 0, int64_t(plain_md({rows, std::min(k, kExactChunk)}).get_size()),
                                    n.inputs[0] + "#float");
  const int product = cx.add_buffer(Buffer::Kind::Arena, 0, int64_t(out_f32.get_size()), n.outputs[0] + "#float");
  dnnl::primitive_attr add = user_scratchpad();
  dnnl::post_ops sum;
  sum.append_sum(1.0f);
  add.set_post_ops(sum);
  for (int64_t k0 = 0; k0 < k; k0 += kExactChunk) {
    const int64_t kc = std::min(kExactChunk, k - k0);
    const std::string part = n.describe() + " (rows " + std::to_string(k0) + ".." + std::to_string(k0 + kc - 1) + " of B)";
    const md a_part = a_md.submemory_desc({rows, kc}, {0, k0}), a_f32 = plain_md({rows, kc});
    std::unordered_map<int, dnnl::memory> shift_constants;
    dnnl::primitive_attr shift = user_scratchpad();
    std::vector<int> bufs{a, a_float};
    std::vector<std::pair<int, md>> rt{{DNNL_ARG_FROM, a_part}, {DNNL_ARG_TO, a_f32}};
    if (zp.buffer >= 0) {
      shift.set_zero_points(DNNL_ARG_FROM, 0, {DNNL_RUNTIME_S32_VAL});
      bufs.push_back(zp.buffer);
      rt.push_back({DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_FROM, md({1}, dt::s32, dnnl::memory::format_tag::x)});
    } else {
      zero_point_arg(cx, shift_constants, shift, DNNL_ARG_FROM, zp.value);
    }
    const dnnl::reorder::primitive_desc to_float(cpu_engine(), a_part, cpu_engine(), a_f32, shift);
    std::vector<char> writes(bufs.size(), 0);
    writes[1] = 1;
    cx.add_primitive(part + " A in float", to_float, std::move(bufs), std::move(writes), std::move(rt),
                     std::move(shift_constants));
    const dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(a_f32, md({kc, cols}, dt::f32, dnnl::memory::format_tag::any), out_f32), user_scratchpad(),
        cpu_engine());
    auto weights = std::make_shared<std::vector<float>>(w.data<int8_t>() + k0 * cols, w.data<int8_t>() + (k0 + kc) * cols);
    cx.add_primitive(part, pd, {a_float, product}, {0, 1}, {{DNNL_ARG_SRC, a_f32}, {DNNL_ARG_DST, out_f32}},
                     {{DNNL_ARG_WEIGHTS, cx.constant_memory(plain_md({kc, cols}), weights->data(), pd.weights_desc(), weights)}});
    const dnnl::reorder::primitive_desc to_int(cpu_engine(), out_f32, cpu_engine(), out_s32,
                                               k0 == 0 && !accumulate ? user_scratchpad() : add);
    // The sum reads the destination: the step writes it in place.
    cx.add_primitive(part + " as int32", to_int, {product, dst}, {0, 1}, {{DNNL_ARG_FROM, out_f32}, {DNNL_ARG_TO, out_s32}}, {});
  }
}

// The rows x k x cols of a matrix product.
struct Product {
  int64_t rows, k, cols;
};

// An int8 matmul of the node's first input (8-bit rows, plain, in buffer
// `src`) by constant int8 weights `w` (stored as `user_w` describes) plus
// an int32 `bias` (or none) into its output, requantized by `scales` (per
// tensor or per column) with the zero points, or (a float output) scaled;
// `keep` holds a bias the lowering made. False where oneDNN has only its
// reference kernel.
bool emit_int8_matmul(Context& cx, const ir::Node& n, int src, Product p, const md& user_w, const ir::Tensor& w,
                      const ir::Tensor* bias, const std::vector<float>& scales, int32_t a_zero_point, int32_t y_zero_point,
                      std::shared_ptr<const void> keep = nullptr) {
  const std::string &a = n.inputs[0], &y = n.outputs[0];
  std::unordered_map<int, dnnl::memory> constants;
  dnnl::primitive_attr attr = user_scratchpad();
  attr.set_output_scales(scales.size() == 1 ? 0 : 1 << 1, scales);
  zero_point_arg(cx, constants, attr, DNNL_ARG_SRC, a_zero_point);
  zero_point_arg(cx, constants, attr, DNNL_ARG_DST, y_zero_point);
  // A stack of rows times one matrix: one 2-D product on the plain bytes.
  const md src_md = plain_md({p.rows, p.k}, *onednn_type(cx.dtype(a)));
  const md dst_md = plain_md({p.rows, p.cols}, *onednn_type(cx.dtype(y)));
  const md bias_md = bias ? plain_md({1, p.cols}, dt::s32) : md();
  dnnl::matmul::primitive_desc pd;
  try {
    pd = dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(src_md, md({p.k, p.cols}, dt::s8, dnnl::memory::format_tag::any), bias_md, dst_md), attr,
        cpu_engine());
  } catch (const dnnl::error&) {
    return false;
  }
  if (reference_kernel(pd)) return false;
  constants[DNNL_ARG_WEIGHTS] = cx.constant_memory(user_w, w.raw(), pd.weights_desc());
  if (bias) constants[DNNL_ARG_BIAS] = cx.constant_memory(bias_md, bias->raw(), bias_md, std::move(keep));
  const int dst = cx.define_plain(y);
  cx.compiled();
  cx.add_primitive(n.describe(), pd, {src, dst}, {0, 1}, {{DNNL_ARG_SRC, src_md}, {DNNL_ARG_DST, dst_md}}, std::move(constants));
  return true;
}

// The float form of a requantized int8 matmul (where the int8 kernels would
// not be exact): exact_float_products of the node's first input (8-bit
// rows, plain, in buffer `src`) by `w` (K x cols) into int32 sums, which
// start from an int32 `bias` per column (or none), and a reorder
// requantizing them by `scales` (or, to a float output, scaling them).
void emit_float_matmul(Context& cx, const ir::Node& n, int src, int64_t rows, const ir::Tensor& w, const ir::Tensor* bias,
                       const std::vector<float>& scales, int32_t a_zero_point, int32_t y_zero_point) {
  const std::string &a = n.inputs[0], &y = n.outputs[0];
  const int64_t k = w.dims()[0], cols = w.dims()[1];
  const md src_md = plain_md({rows, k}, *onednn_type(cx.dtype(a))), dst_md = plain_md({rows, cols}, *onednn_type(cx.dtype(y)));
  const md sums_md = plain_md({rows, cols}, dt::s32);
  const int sums = cx.add_buffer(Buffer::Kind::Arena, 0, int64_t(sums_md.get_size()), y + "#int32");
  if (bias) {
    ir::Tensor start = ir::Tensor::uninitialized(DType::Int32, {rows, cols});
    for (int64_t r = 0; r < rows; ++r) std::copy_n(bias->data<int32_t>(), cols, start.data<int32_t>() + r * cols);
    cx.add_reorder(n.describe() + " (bias)", cx.add_constant(std::move(start), y + "#bias"), sums, sums_md, sums_md);
  }
  exact_float_products(cx, n, src, src_md, {a_zero_point}, w, sums, bias != nullptr);
  std::unordered_map<int, dnnl::memory> constants;
  dnnl::primitive_attr requantize = user_scratchpad();
  requantize.set_output_scales(scales.size() == 1 ? 0 : 1 << 1, scales);
  zero_point_arg(cx, constants, requantize, DNNL_ARG_TO, y_zero_point);
  const dnnl::reorder::primitive_desc to_out(cpu_engine(), sums_md, cpu_engine(), dst_md, requantize);
  const int dst = cx.define_plain(y);
  cx.compiled();
  cx.add_primitive(n.describe() + " (requantized)", to_out, {sums, dst}, {0, 1},
                   {{DNNL_ARG_FROM, sums_md}, {DNNL_ARG_TO, dst_md}}, std::move(constants));
}

}  // namespace

bool lower_qlinear_conv(Context& cx, const ir::Node& n) {
  if (n.inputs.size() < 8 || n.outputs.size() != 1) return false;
  const ir::Tensor* w = cx.constant(n.inputs[3]);
  const DType xt = cx.dtype(n.inputs[0]), yt = cx.dtype(n.outputs[0]);
  if (!is_8bit(xt) || !is_8bit(yt) || !w || w->dtype() != DType::Int8) return false;
  const bool has_bias = n.inputs.size() > 8 && !n.inputs[8].empty();
  const ir::Tensor* b = has_bias ? cx.constant(n.inputs[8]) : nullptr;
  if (has_bias && (!b || b->dtype() != DType::Int32 || b->numel() != w->dims()[0])) return false;
  const auto xq = per_tensor(cx, n, 1, 2, xt), yq = per_tensor(cx, n, 6, 7, yt);
  const auto wq = symmetric_weights(cx, n, 4, 5, w->dims()[0]);
  if (!xq || !yq || !wq) return false;
  // In float, the sums may round where they pass 2^24; the requantization
  // then moves a value by a step at most, as the float scale already may.
  return emit_int8_conv(
      cx, n, *w, b,
      {xq->zero_point, yt, requantization(xq->scale, *wq, yq->scale), yq->zero_point, !passes::int8_products_exact(xt, *w)});
}

// ConvInteger: the int32 sums themselves, x's zero point a constant. In
// float (int8_products_exact says no) only while every sum is exact: at
// most kExactChunk products in each.
bool lower_conv_integer(Context& cx, const ir::Node& n) {
  if (n.inputs.size() < 2 || n.outputs.size() != 1) return false;
  const ir::Tensor* w = cx.constant(n.inputs[1]);
  const DType xt = cx.dtype(n.inputs[0]);
  if (!is_8bit(xt) || !w || w->dtype() != DType::Int8 || w->dims().size() < 3) return false;
  const bool in_float = !passes::int8_products_exact(xt, *w);
  const bool exact_in_float = ir::checked_numel(w->dims()) / w->dims()[0] <= kExactChunk;
  if (in_float && !exact_in_float) return false;
  int32_t x_zero_point = 0;
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    const ir::Tensor* z = cx.constant(n.inputs[2]);
    if (!z || z->dtype() != xt || z->numel() != 1) return false;
    x_zero_point = int32_t(z->as_int64(0));
  }
  if (n.inputs.size() > 3 && !n.inputs[3].empty()) {
    const ir::Tensor* z = cx.constant(n.inputs[3]);
    for (int64_t i = 0; z && i < z->numel(); ++i)
      if (z->as_int64(i) != 0) return false;
    if (!z) return false;
  }
  return emit_int8_conv(cx, n, *w, nullptr, {x_zero_point, DType::Int32, {}, 0, in_float, exact_in_float});
}

// QLinearMatMul of 8-bit rows (a stack of them) by constant int8 weights
// symmetric about zero. Where the int8 kernels would not be exact
// (int8_products_exact): a less its zero point in float, the exact products
// as MatMulInteger's, and a reorder requantizing them.
bool lower_qlinear_matmul(Context& cx, const ir::Node& n) {
  if (n.inputs.size() != 8 || n.outputs.size() != 1) return false;
  const std::string &a = n.inputs[0], &y = n.outputs[0];
  const ir::Tensor* w = cx.constant(n.inputs[3]);
  const DType at = cx.dtype(a), yt = cx.dtype(y);
  if (!is_8bit(at) || !is_8bit(yt) || !w || w->dtype() != DType::Int8 || w->dims().size() != 2) return false;
  const Dims ad = cx.dims(a);
  const int64_t k = w->dims()[0], cols = w->dims()[1];
  if (ad.size() < 2 || ad.back() != k) return false;
  const auto aq = per_tensor(cx, n, 1, 2, at), yq = per_tensor(cx, n, 6, 7, yt);
  const auto wq = symmetric_weights(cx, n, 4, 5, cols);
  if (!aq || !yq || !wq) return false;
  const int64_t rows = ir::checked_numel(ad) / k;
  const std::vector<float> scales = requantization(aq->scale, *wq, yq->scale);
  if (passes::int8_products_exact(at, *w))
    return emit_int8_matmul(cx, n, cx.plain(a), {rows, k, cols}, plain_md({k, cols}, dt::s8), *w, nullptr, scales, aq->zero_point,
                            yq->zero_point);
  emit_float_matmul(cx, n, cx.plain(a), rows, *w, nullptr, scales, aq->zero_point, yq->zero_point);
  return true;
}

// com.microsoft's QGemm of 8-bit rows (with transA, the columns of A, made
// rows by a reorder first) by constant int8 weights symmetric about zero
// (B, or with transB its transpose) plus an int32 bias, requantized (as
// fuse_qdq makes it of a dequantized Gemm, and ONNX Runtime's quantizer of a
// Gemm), or without a y_scale scaled into float: an int8 matmul with the
// bias, or where the int8 kernels would not be exact (or oneDNN has only
// its reference one), QLinearMatMul's float form with the sums starting
// from the bias.
bool lower_qgemm(Context& cx, const ir::Node& n) {
  if (n.inputs.size() < 6 || n.inputs.size() > 9 || n.outputs.size() != 1) return false;
  ref::KernelContext ctx(n, {}, nullptr);
  if (ctx.attr_float("alpha", 1) != 1) return false;
  const bool trans_a = ctx.attr_int("transA", 0) != 0, transposed = ctx.attr_int("transB", 0) != 0;
  const std::string &a = n.inputs[0], &y = n.outputs[0];
  const ir::Tensor* w = cx.constant(n.inputs[3]);
  const bool quantized = n.inputs.size() > 7 && !n.inputs[7].empty();
  const DType at = cx.dtype(a), yt = cx.dtype(y);
  if (!is_8bit(at) || !(quantized ? is_8bit(yt) : yt == DType::Float32) || !w || w->dtype() != DType::Int8 ||
      w->dims().size() != 2)
    return false;
  const Dims ad = cx.dims(a);
  const int64_t k = w->dims()[transposed ? 1 : 0], cols = w->dims()[transposed ? 0 : 1];
  if (ad.size() != 2 || ad[trans_a ? 0 : 1] != k) return false;
  const int64_t rows = ad[trans_a ? 1 : 0];
  const auto aq = per_tensor(cx, n, 1, 2, at);
  const auto yq = quantized ? per_tensor(cx, n, 7, 8, yt) : std::optional<Quantization>(Quantization{});
  const auto wq = symmetric_weights(cx, n, 4, 5, cols);
  if (!aq || !yq || !wq) return false;
  const bool has_bias = n.inputs.size() > 6 && !n.inputs[6].empty();
  const ir::Tensor* bias = has_bias ? cx.constant(n.inputs[6]) : nullptr;
  // The bias per column ([N] or [1, N]), or one for all (made one per
  // column).
  if (has_bias && (!bias || bias->dtype() != DType::Int32 ||
                   (bias->dims() != Dims{cols} && bias->dims() != Dims{1, cols} && !(bias->numel() == 1 && bias->rank() <= 2))))
    return false;
  std::shared_ptr<ir::Tensor> per_column;
  if (bias && bias->numel() != cols) {
    per_column = std::make_shared<ir::Tensor>(ir::Tensor::uninitialized(DType::Int32, {cols}));
    std::fill_n(per_column->data<int32_t>(), cols, bias->data<int32_t>()[0]);
    bias = per_column.get();
  }
  const std::vector<float> scales = requantization(aq->scale, *wq, yq->scale);
  int src = cx.plain(a);
  if (trans_a) {
    const dt type = *onednn_type(at);
    const md from({rows, k}, type, dnnl::memory::format_tag::ba), to = plain_md({rows, k}, type);
    const int rows_of_a = cx.add_buffer(Buffer::Kind::Arena, 0, int64_t(to.get_size()), a + "#transposed");
    cx.add_reorder(n.describe() + " (A transposed)", src, rows_of_a, from, to);
    src = rows_of_a;
  }
  if (passes::int8_products_exact(at, *w)) {
    const md user_w = transposed ? md({k, cols}, dt::s8, dnnl::memory::format_tag::ba) : plain_md({k, cols}, dt::s8);
    if (emit_int8_matmul(cx, n, src, {rows, k, cols}, user_w, *w, bias, scales, aq->zero_point, yq->zero_point, per_column))
      return true;
  }
  if (!transposed) {
    emit_float_matmul(cx, n, src, rows, *w, bias, scales, aq->zero_point, yq->zero_point);
    return true;
  }
  ir::Tensor b = ir::Tensor::uninitialized(DType::Int8, {k, cols});
  for (int64_t r = 0; r < k; ++r)
    for (int64_t c = 0; c < cols; ++c) b.data<int8_t>()[r * cols + c] = w->data<int8_t>()[c * k + r];
  emit_float_matmul(cx, n, src, rows, b, bias, scales, aq->zero_point, yq->zero_point);
  return true;
}

bool lower_dynamic_quantize(Context& cx, const ir::Node& n) {
  // A native bundle has no host kernels: it calls the portable one.
  if (!cx.host_kernels) return portable_dynamic_quantize(cx, n);
  std::vector<int> args;
  if (!dynamic_quantize_args(cx, n, args)) return false;
  cx.compiled();
  cx.add_kernel(n.describe(), std::move(args), {0, 1, 1, 1},
                std::make_unique<DynamicQuantizeKernel>(ir::checked_numel(cx.dims(n.inputs[0]))));
  return true;
}

// MatMulInteger of 8-bit rows (a stack of them) by constant int8 weights
// symmetric about zero, into int32. The zero point of A may be a constant or
// come from the run (DynamicQuantizeLinear). Where the int8 kernels are not
// exact (int8_products_exact), float products are, over chunks of K whose
// sums stay below 2^24, added up in int32.
bool lower_matmul_integer(Context& cx, const ir::Node& n) {
  if (n.inputs.size() < 2 || n.outputs.size() != 1) return false;
  const std::string &a = n.inputs[0], &y = n.outputs[0];
  const ir::Tensor* w = cx.constant(n.inputs[1]);
  const DType at = cx.dtype(a);
  if (!is_8bit(at) || !w || w->dtype() != DType::Int8 || w->dims().size() != 2) return false;
  const Dims ad = cx.dims(a);
  const int64_t k = w->dims()[0], cols = w->dims()[1];
  if (ad.size() < 2 || ad.back() != k || cx.dims(y) != [&] {
        Dims o = ad;
        o.back() = cols;
        return o;
      }())
    return false;
  if (n.inputs.size() > 3 && !n.inputs[3].empty()) {
    const ir::Tensor* z = cx.constant(n.inputs[3]);
    if (!z) return false;
    for (int64_t i = 0; i < z->numel(); ++i)
      if (z->as_int64(i) != 0) return false;
  }
  // A's zero point: none, a constant scalar, or a scalar of the run.
  const std::string zp = n.inputs.size() > 2 ? n.inputs[2] : "";
  const ir::Tensor* zp_constant = zp.empty() ? nullptr : cx.constant(zp);
  if (!zp.empty() && (cx.dtype(zp) != at || ir::checked_numel(cx.dims(zp)) != 1)) return false;
  const int64_t rows = ir::checked_numel(ad) / k;
  const md a_md = plain_md({rows, k}, *onednn_type(at)), out_md = plain_md({rows, cols}, dt::s32);
  if (!passes::int8_products_exact(at, *w)) {
    ZeroPointArg shift;
    if (zp_constant) shift.value = int32_t(zp_constant->as_int64(0));
    if (!zp.empty() && !zp_constant) shift.buffer = runtime_zero_point(cx, zp);
    exact_float_products(cx, n, cx.plain(a), a_md, shift, *w, cx.define_plain(y));
    cx.compiled();
    return true;
  }
  std::unordered_map<int, dnnl::memory> constants;
  dnnl::primitive_attr attr = user_scratchpad();
  if (zp_constant)
    zero_point_arg(cx, constants, attr, DNNL_ARG_SRC, int32_t(zp_constant->as_int64(0)));
  else if (!zp.empty())
    attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  dnnl::matmul::primitive_desc pd;
  try {
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, md({k, cols}, dt::s8, dnnl::memory::format_tag::any), out_md),
                                      attr, cpu_engine());
  } catch (const dnnl::error&) {
    return false;
  }
  constants[DNNL_ARG_WEIGHTS] = cx.constant_memory(plain_md({k, cols}, dt::s8), w->raw(), pd.weights_desc());
  std::vector<int> bufs{cx.plain(a)};
  std::vector<std::pair<int, md>> rt{{DNNL_ARG_SRC, a_md}};
  if (!zp.empty() && !zp_constant) {
    bufs.push_back(runtime_zero_point(cx, zp));
    rt.push_back({DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, md({1}, dt::s32, dnnl::memory::format_tag::x)});
  }
  bufs.push_back(cx.define_plain(y));
  rt.push_back({DNNL_ARG_DST, out_md});
  std::vector<char> writes(bufs.size(), 0);
  writes.back() = 1;
  cx.compiled();
  cx.add_primitive(n.describe(), pd, std::move(bufs), std::move(writes), std::move(rt), std::move(constants));
  return true;
}

// QLinearAdd of two 8-bit tensors: a oneDNN binary add, each source scaled
// by its scale over the output's, the zero points folded into one shift,
// rounded and saturated into the output type:
// sa/sc (a - za) + sb/sc (b - zb) + zc = sa/sc a + sb/sc b + (zc - (sa za + sb zb)/sc).
// One linear post-op: oneDNN 2.6's jit binary applies the first of two
// linear post-ops twice on integer destinations (measured: 0 6 12 18 where
// 11.5 14.5 17.5 20.5 were due).
// The binary broadcasts its second source into the first's shape only: the
// operand of the result's shape goes first (the sum commutes), and a result
// larger than both (fuse_qdq makes none) is the reference kernel's.
bool lower_qlinear_add(Context& cx, const ir::Node& n) {
  if (n.inputs.size() != 8 || n.outputs.size() != 1) return false;
  const std::string& y = n.outputs[0];
  const Dims out = cx.dims(y);
  const size_t first = cx.dims(n.inputs[0]) == out ? 0 : 3, second = 3 - first;
  const std::string &a = n.inputs[first], &b = n.inputs[second];
  const DType at = cx.dtype(a), bt = cx.dtype(b), yt = cx.dtype(y);
  if (!is_8bit(at) || !is_8bit(bt) || !is_8bit(yt) || cx.dims(a) != out || cx.dims(b).size() > out.size()) return false;
  const auto aq = per_tensor(cx, n, first + 1, first + 2, at), bq = per_tensor(cx, n, second + 1, second + 2, bt);
  const auto yq = per_tensor(cx, n, 6, 7, yt);
  if (!aq || !bq || !yq) return false;
  const md a_md = cx.val(a).layout;
  const auto y_md = retyped(a_md, *onednn_type(yt));
  if (!y_md) return false;
  // A broadcast operand in its plain bytes, its dims padded with leading 1s
  // to the result's rank.
  const bool broadcast = cx.dims(b) != out;
  Dims b_dims(out.size() - cx.dims(b).size(), 1);
  for (int64_t d : cx.dims(b)) b_dims.push_back(d);
  const auto b_md = broadcast ? std::optional<md>(plain_md(b_dims, *onednn_type(bt))) : retyped(a_md, *onednn_type(bt));
  if (!b_md) return false;
  const double sc = yq->scale;
  dnnl::primitive_attr attr = user_scratchpad();
  attr.set_scales(DNNL_ARG_SRC_0, 0, {float(aq->scale / sc)});
  attr.set_scales(DNNL_ARG_SRC_1, 0, {float(bq->scale / sc)});
  dnnl::post_ops shift;
  const double offset = yq->zero_point - (aq->scale * aq->zero_point + bq->scale * bq->zero_point) / sc;
  shift.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, 1.0f, float(offset));
  attr.set_post_ops(shift);
  dnnl::binary::primitive_desc pd;
  try {
    pd = dnnl::binary::primitive_desc(dnnl::binary::desc(dnnl::algorithm::binary_add, a_md, *b_md, *y_md), attr, cpu_engine());
  } catch (const dnnl::error&) {
    return false;
  }
  if (reference_kernel(pd)) return false;
  const int src1 = broadcast ? cx.plain(b) : cx.as_layout(b, *b_md);
  const int dst = cx.define(y, *y_md, is_plain(*y_md, out));
  cx.compiled();
  cx.add_primitive(n.describe(), pd, {cx.val(a).buffer, src1, dst}, {0, 0, 1},
                   {{DNNL_ARG_SRC_0, a_md}, {DNNL_ARG_SRC_1, *b_md}, {DNNL_ARG_DST, *y_md}}, {});
  return true;
}

}  // namespace kiln::cpu::lowering
