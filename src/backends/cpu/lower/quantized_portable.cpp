// Quantized operators on the portable kernels (portable/qgemm.cpp,
// portable/quantize.cpp), so that quantized models freeze into bundles that
// need only the C library: QLinearConv, ConvInteger, QLinearMatMul,
// MatMulInteger, QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
// Cast of integers to float and com.microsoft's QLinearAdd and QGemm (MaxPool of
// 8-bit values is pool_resize.cpp's). Sums are exact in int32 on every
// target; the requantization of a product is in float, as the native
// kernels' is (a result on a rounding tie may be a step from the
// reference's), everything else gives the reference kernels' bits.
#include <cmath>
#include <optional>

#include "backends/cpu/lower/context.hpp"
#include "backends/cpu/lower/families.hpp"
#include "backends/cpu/lower/portable_conv_shape.hpp"
#include "backends/cpu/lower/quantized_operands.hpp"
#include "backends/cpu/portable/kernels.h"
#include "backends/reference/kernel_context.hpp"
#include "backends/reference/ops/op_util.hpp"

namespace kiln::cpu::lowering {

namespace {

// The kernels' name for an element type, if they take it.
std::optional<int32_t> pk_type(DType t) {
  if (t == DType::UInt8) return KILN_PK_UINT8;
  if (t == DType::Int8) return KILN_PK_INT8;
  if (t == DType::Int32) return KILN_PK_INT32;
  return std::nullopt;
}
bool given(const ir::Node& n, size_t i) { return i < n.inputs.size() && !n.inputs[i].empty(); }

// Constant scales: float32, positive and finite, `1` or `count` of them.
std::optional<std::vector<float>> scales(Context& cx, const std::string& name, int64_t count) {
  const ir::Tensor* t = cx.constant(name);
  if (!t || t->dtype() != DType::Float32 || t->dims().size() > 1 || (t->numel() != 1 && t->numel() != count)) return std::nullopt;
  std::vector<float> v(t->data<float>(), t->data<float>() + t->numel());
  for (float s : v)
    if (!(s > 0) || !std::isfinite(s)) return std::nullopt;
  return v;
}

// A zero point as the kernels read it: a buffer holding one value of
// `type` (a constant, or a value of the run such as DynamicQuantizeLinear's),
// or none (0). False when the input is something else.
bool zero_point(Context& cx, const ir::Node& n, size_t i, DType type, std::vector<int>& args, Call::Arg& arg) {
  arg = Call::null();
  if (!given(n, i)) return true;
  const std::string& z = n.inputs[i];
  if (cx.dtype(z) != type || ir::checked_numel(cx.dims(z)) != 1 || !cx.available(z)) return false;
  args.push_back(cx.plain(z));
  arg = Call::buffer(int(args.size()) - 1);
  return true;
}

bool constant_zeros(Context& cx, const std::string& name) {
  const ir::Tensor* z = cx.constant(name);
  if (!z) return false;
  for (int64_t i = 0; i < z->numel(); ++i)
    if (z->as_int64(i) != 0) return false;
  return true;
}

// Weights the kernels take: int8 and symmetric (zero points absent or
// constant zeros).
bool symmetric_int8(Context& cx, const ir::Node& n, size_t w, size_t zero_point) {
  const ir::Tensor* t = cx.constant(n.inputs[w]);
  return t && t->dtype() == DType::Int8 && (!given(n, zero_point) || constant_zeros(cx, n.inputs[zero_point]));
}

// A buffer of the lowering's own float constants.
Call::Arg float_constant(Context& cx, std::vector<int>& args, const std::vector<float>& v, const std::string& name) {
  args.push_back(cx.add_constant(ir::Tensor::from_vector<float>({int64_t(v.size())}, v), name));
  return Call::buffer(int(args.size()) - 1);
}

Call::Arg input(Context& cx, std::vector<int>& args, const std::string& name) {
  args.push_back(cx.plain(name));
  return Call::buffer(int(args.size()) - 1);
}

// x_scale * w_scale[c] / y_scale per output channel, as the native kernels
// requantize.
std::vector<float> requantization(float x_scale, const std::vector<float>& w_scales, float y_scale) {
  std::vector<float> out;
  for (float w : w_scales) out.push_back(float(double(x_scale) * double(w) / double(y_scale)));
  return out;
}

// A quantized product's output (node output 0): requantized to 8 bits,
// with its zero point and scales as arguments, or the int32 sums; then its
// buffer as the last argument, the only one written.
bool product_output(Context& cx, const ir::Node& n, const std::vector<float>* requantize, size_t y_zero, std::vector<int>& args,
                    Call::Arg& y_zero_arg, Call::Arg& scale_arg, Call::Arg& dst, std::vector<char>& writes) {
  const std::string& y = n.outputs[0];
  const DType yt = cx.dtype(y);
  if (requantize) {
    if (!is_8bit(yt) || !zero_point(cx, n, y_zero, yt, args, y_zero_arg)) return false;
    scale_arg = float_constant(cx, args, *requantize, y + "#scales");
  } else if (yt != DType::Int32) {
    return false;
  }
  args.push_back(cx.define_plain(y));
  dst = Call::buffer(int(args.size()) - 1);
  writes.assign(args.size(), 0);
  writes.back() = 1;
  return true;
}

// QLinearConv (scales given) and ConvInteger (int32 sums): where x's zero
// point, the weights, theirs, the bias and the output's zero point are.
struct ConvInputs {
  size_t x_zero, w, w_zero, bias, y_zero;
};
constexpr size_t kNone = size_t(-1);

bool emit_qconv(Context& cx, const ir::Node& n, const ConvInputs& in, const std::vector<float>* requantize) {
  const std::string &x = n.inputs[0], &y = n.outputs[0];
  const DType xt = cx.dtype(x), yt = cx.dtype(y);
  if (!is_8bit(xt) || !symmetric_int8(cx, n, in.w, in.w_zero)) return false;
  const auto shape = portable_conv_shape(n, cx.dims(x), cx.dims(n.inputs[in.w]), cx.dims(y));
  if (!shape) return false;
  const PortableConvShape& c = *shape;
  std::vector<int> args{cx.plain(x)};
  Call::Arg x_zero, bias = Call::null(), y_zero = Call::null(), scale_arg = Call::null();
  if (!zero_point(cx, n, in.x_zero, xt, args, x_zero)) return false;
  const Call::Arg weights = input(cx, args, n.inputs[in.w]);
  if (given(n, in.bias)) {
    const ir::Tensor* b = cx.constant(n.inputs[in.bias]);
    if (!b || b->dtype() != DType::Int32 || b->numel() != c.k) return false;
    bias = input(cx, args, n.inputs[in.bias]);
  }
  Call::Arg dst;
  std::vector<char> writes;
  if (!product_output(cx, n, requantize, in.y_zero, args, y_zero, scale_arg, dst, writes)) return false;
  const Call::Arg work =
      cx.scratch(args, writes, kiln_pk_qconv2d_scratch_bytes(c.c, c.k, c.oh, c.ow, c.kh, c.kw, c.group), n.describe());
  std::vector<Call::Arg> call_args = c.args();
  call_args.insert(call_args.end(),
                   {Call::i32(*pk_type(xt)), Call::buffer(0), x_zero, weights, bias, scale_arg,
                    Call::i64(requantize ? int64_t(requantize->size()) : 0), Call::i32(*pk_type(yt)), y_zero, dst, work});
  Call call{"kiln_pk_qconv2d", std::move(call_args), false};
  cx.compiled();
  cx.add_call(n.describe(), std::move(args), std::move(writes), std::move(call));
  return true;
}

// A product of 8-bit rows (a stack of them: [..., k]) by constant int8
// weights [k, cols].
bool emit_qmatmul(Context& cx, const ir::Node& n, size_t a_zero, size_t w, size_t w_zero, const std::vector<float>* requantize,
                  size_t y_zero) {
  const std::string &a = n.inputs[0], &y = n.outputs[0];
  const DType at = cx.dtype(a), yt = cx.dtype(y);
  if (!is_8bit(at) || !symmetric_int8(cx, n, w, w_zero)) return false;
  const Dims ad = cx.dims(a), wd = cx.dims(n.inputs[w]);
  if (ad.size() < 2 || wd.size() != 2 || ad.back() != wd[0]) return false;
  Dims od = ad;
  od.back() = wd[1];
  if (cx.dims(y) != od) return false;
  const int64_t k = wd[0], cols = wd[1], rows = ir::checked_numel(ad) / std::max<int64_t>(k, 1);
  std::vector<int> args{cx.plain(a)};
  Call::Arg zero, y_zero_arg = Call::null(), scale_arg = Call::null();
  if (!zero_point(cx, n, a_zero, at, args, zero)) return false;
  const Call::Arg weights = input(cx, args, n.inputs[w]);
  Call::Arg dst;
  std::vector<char> writes;
  if (!product_output(cx, n, requantize, y_zero, args, y_zero_arg, scale_arg, dst, writes)) return false;
  const Call::Arg work = cx.scratch(args, writes, kiln_pk_qmatmul_scratch_bytes(rows, cols, k), n.describe());
  Call call{"kiln_pk_qmatmul",
            {Call::i64(rows), Call::i64(cols), Call::i64(k), Call::i32(*pk_type(at)), Call::buffer(0), zero, weights, scale_arg,
             Call::i64(requantize ? int64_t(requantize->size()) : 0), Call::i32(*pk_type(yt)), y_zero_arg, dst, work},
            false};
  cx.compiled();
  cx.add_call(n.describe(), std::move(args), std::move(writes), std::move(call));
  return true;
}

// A per-tensor scale of an 8-bit operand.
std::optional<float> scalar_scale(Context& cx, const ir::Node& n, size_t i) {
  if (!given(n, i)) return std::nullopt;
  const auto s = scales(cx, n.inputs[i], 1);
  return s && s->size() == 1 ? std::optional<float>((*s)[0]) : std::nullopt;
}

}  // namespace

bool portable_qlinear_conv(Context& cx, const ir::Node& n) {
  if (n.inputs.size() < 8 || n.outputs.size() != 1 || !cx.constant(n.inputs[3])) return false;
  const auto xs = scalar_scale(cx, n, 1), ys = scalar_scale(cx, n, 6);
  const auto ws = scales(cx, n.inputs[4], cx.constant(n.inputs[3])->dims()[0]);
  if (!xs || !ys || !ws) return false;
  const std::vector<float> requantize = requantization(*xs, *ws, *ys);
  return emit_qconv(cx, n, {2, 3, 5, 8, 7}, &requantize);
}

bool portable_conv_integer(Context& cx, const ir::Node& n) {
  if (n.inputs.size() < 2 || n.outputs.size() != 1) return false;
  return emit_qconv(cx, n, {2, 1, 3, kNone, kNone}, nullptr);
}

bool portable_qlinear_matmul(Context& cx, const ir::Node& n) {
  if (n.inputs.size() != 8 || n.outputs.size() != 1 || !cx.constant(n.inputs[3])) return false;
  const ir::Tensor* w = cx.constant(n.inputs[3]);
  if (w->dims().size() != 2) return false;
  const auto as = scalar_scale(cx, n, 1), ys = scalar_scale(cx, n, 6);
  const auto ws = scales(cx, n.inputs[4], w->dims()[1]);
  if (!as || !ys || !ws) return false;
  const std::vector<float> requantize = requantization(*as, *ws, *ys);
  return emit_qmatmul(cx, n, 2, 3, 5, &requantize, 7);
}

bool portable_matmul_integer(Context& cx, const ir::Node& n) {
  if (n.inputs.size() < 2 || n.outputs.size() != 1) return false;
  return emit_qmatmul(cx, n, 2, 1, 3, nullptr, 0);
}

// com.microsoft's QGemm: 8-bit A (or with transA its transpose) less its
// zero point times constant int8 weights symmetric about zero (with transB
// transposed once, here), plus an int32 C broadcast to the product's shape,
// scaled by a_scale b_scale[j] and requantized to y_scale and its zero
// point, or without a y_scale kept as floats.
bool portable_qgemm(Context& cx, const ir::Node& n) {
  if (n.inputs.size() < 6 || n.inputs.size() > 9 || n.outputs.size() != 1) return false;
  ref::KernelContext ctx(n, {}, nullptr);
  if (ctx.attr_float("alpha", 1) != 1) return false;
  const bool trans_a = ctx.attr_int("transA", 0) != 0, trans_b = ctx.attr_int("transB", 0) != 0;
  const std::string &a = n.inputs[0], &y = n.outputs[0];
  const DType at = cx.dtype(a), yt = cx.dtype(y);
  const ir::Tensor* w = cx.constant(n.inputs[3]);
  if (!is_8bit(at) || !w || w->dims().size() != 2 || !symmetric_int8(cx, n, 3, 5)) return false;
  const Dims ad = cx.dims(a);
  if (ad.size() != 2) return false;
  const int64_t m = ad[trans_a ? 1 : 0], k = ad[trans_a ? 0 : 1], cols = w->dims()[trans_b ? 0 : 1];
  if (w->dims()[trans_b ? 1 : 0] != k || cx.dims(y) != Dims{m, cols}) return false;
  const bool quantized = given(n, 7);
  const auto as = scalar_scale(cx, n, 1), ys = quantized ? scalar_scale(cx, n, 7) : std::optional<float>(1.0f);
  const auto ws = scales(cx, n.inputs[4], cols);
  if (!as || !ws || !ys || (quantized ? !is_8bit(yt) : yt != DType::Float32)) return false;
  std::vector<int> args{cx.plain(a)};
  Call::Arg a_zero, bias = Call::null(), y_zero = Call::null();
  if (!zero_point(cx, n, 2, at, args, a_zero)) return false;
  Call::Arg weights;
  if (trans_b) {
    ir::Tensor t = ir::Tensor::uninitialized(DType::Int8, {k, cols});
    for (int64_t r = 0; r < k; ++r)
      for (int64_t c = 0; c < cols; ++c) t.data<int8_t>()[r * cols + c] = w->data<int8_t>()[c * k + r];
    args.push_back(cx.add_constant(std::move(t), n.inputs[3] + "#transposed"));
    weights = Call::buffer(int(args.size()) - 1);
  } else {
    weights = input(cx, args, n.inputs[3]);
  }
  // C(i, j) at bias[i * bias_rs + j * bias_cs]: a scalar, a row, a column
  // or the whole [m, n].
  int64_t bias_rs = 0, bias_cs = 0;
  if (given(n, 6)) {
    const std::string& c = n.inputs[6];
    const Dims cd = cx.dims(c);
    if (cx.dtype(c) != DType::Int32 || cd.size() > 2 || !cx.available(c)) return false;
    const int64_t c_rows = cd.size() == 2 ? cd[0] : 1, c_cols = cd.empty() ? 1 : cd.back();
    if ((c_rows != 1 && c_rows != m) || (c_cols != 1 && c_cols != cols)) return false;
    bias_rs = c_rows == 1 ? 0 : c_cols;
    bias_cs = c_cols == 1 ? 0 : 1;
    bias = input(cx, args, c);
  }
  if (quantized && !zero_point(cx, n, 8, yt, args, y_zero)) return false;
  const std::vector<float> scale = requantization(*as, *ws, *ys);
  const Call::Arg scale_arg = float_constant(cx, args, scale, y + "#scales");
  args.push_back(cx.define_plain(y));
  const Call::Arg dst = Call::buffer(int(args.size()) - 1);
  std::vector<char> writes(args.size(), 0);
  writes.back() = 1;
  const Call::Arg work = cx.scratch(args, writes, kiln_pk_qmatmul_scratch_bytes(m, cols, k), n.describe());
  Call call{"kiln_pk_qgemm",
            {Call::i64(m), Call::i64(cols), Call::i64(k), Call::i32(trans_a), Call::i32(*pk_type(at)), Call::buffer(0), a_zero,
             weights, bias, Call::i64(bias_rs), Call::i64(bias_cs), scale_arg, Call::i64(int64_t(scale.size())),
             Call::i32(quantized ? *pk_type(yt) : KILN_PK_FLOAT32), y_zero, dst, work},
            false};
  cx.compiled();
  cx.add_call(n.describe(), std::move(args), std::move(writes), std::move(call));
  return true;
}

// QuantizeLinear and DequantizeLinear, per tensor or along an axis.
bool portable_quantize(Context& cx, const ir::Node& n) {
  if (n.inputs.size() < 2 || n.outputs.size() != 1) return false;
  const std::string &x = n.inputs[0], &y = n.outputs[0], &scale = n.inputs[1];
  const bool quantize = n.op_type == "QuantizeLinear";
  const DType qt = cx.dtype(quantize ? y : x);
  if (!cx.is_f32(quantize ? x : y) || !cx.is_f32(scale)) return false;
  if (!is_8bit(qt) && (quantize || qt != DType::Int32)) return false;
  ref::KernelContext ctx(n, {}, nullptr);
  if (ctx.attr_int("block_size", 0) != 0) return false;
  // Zero points of int32 values must be 0 (the reference kernel says so).
  if (qt == DType::Int32 && given(n, 2) && !constant_zeros(cx, n.inputs[2])) return false;
  const Dims xd = cx.dims(x), sd = cx.dims(scale);
  int64_t outer = 1, channels = 1, inner = ir::checked_numel(xd);
  if (ir::checked_numel(sd) != 1) {
    int64_t axis = ctx.attr_int("axis", 1);
    if (sd.size() != 1 || !normalize_axis(axis, xd.size()) || sd[0] != xd[size_t(axis)]) return false;
    channels = sd[0];
    outer = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= xd[size_t(d)];
    inner = channels ? ir::checked_numel(xd) / outer / channels : 0;
  }
  std::vector<int> args{cx.plain(x), cx.plain(scale)};
  Call::Arg zero = Call::null();
  if (given(n, 2)) {
    const std::string& z = n.inputs[2];
    if (cx.dtype(z) != qt || ir::checked_numel(cx.dims(z)) != channels) return false;
    zero = input(cx, args, z);
  }
  args.push_back(cx.define_plain(y));
  std::vector<char> writes(args.size(), 0);
  writes.back() = 1;
  const Call::Arg dst = Call::buffer(int(args.size()) - 1);
  Call call = quantize ? Call{"kiln_pk_quantize",
                              {Call::i64(outer), Call::i64(channels), Call::i64(inner), Call::buffer(0), Call::buffer(1), zero,
                               Call::i32(*pk_type(qt)), dst},
                              false}
                       : Call{"kiln_pk_dequantize",
                              {Call::i64(outer), Call::i64(channels), Call::i64(inner), Call::i32(*pk_type(qt)), Call::buffer(0),
                               Call::buffer(1), zero, dst},
                              false};
  cx.compiled();
  cx.add_call(n.describe(), std::move(args), std::move(writes), std::move(call));
  return true;
}

bool dynamic_quantize_args(Context& cx, const ir::Node& n, std::vector<int>& args) {
  if (n.inputs.size() != 1 || n.outputs.size() != 3 || !cx.is_f32(n.inputs[0])) return false;
  for (const auto& out : n.outputs)
    if (out.empty()) return false;
  args = {cx.plain(n.inputs[0])};
  for (const auto& out : n.outputs) args.push_back(cx.define_plain(out));
  return true;
}

bool portable_dynamic_quantize(Context& cx, const ir::Node& n) {
  std::vector<int> args;
  if (!dynamic_quantize_args(cx, n, args)) return false;
  cx.compiled();
  cx.add_call(
      n.describe(), std::move(args), {0, 1, 1, 1},
      {"kiln_pk_dynamic_quantize",
       {Call::i64(ir::checked_numel(cx.dims(n.inputs[0]))), Call::buffer(0), Call::buffer(1), Call::buffer(2), Call::buffer(3)},
       false});
  return true;
}

// Cast of 8-bit and int32 values to float: a dequantization by 1.
bool portable_cast(Context& cx, const ir::Node& n) {
  if (n.inputs.size() != 1 || n.outputs.size() != 1 || !cx.is_f32(n.outputs[0])) return false;
  const auto type = pk_type(cx.dtype(n.inputs[0]));
  if (!type) return false;
  const int src = cx.plain(n.inputs[0]);
  cx.compiled();
  cx.add_call(n.describe(), {src, cx.define_plain(n.outputs[0])}, {0, 1},
              {"kiln_pk_dequantize",
               {Call::i64(1), Call::i64(1), Call::i64(ir::checked_numel(cx.dims(n.inputs[0]))), Call::i32(*type), Call::buffer(0),
                Call::null(), Call::null(), Call::buffer(1)},
               false});
  return true;
}

// The output's dims and the element strides of each of `operands` along
// them (right-aligned, 0 where it broadcasts), adjacent dims merged where
// every operand steps through both alike, so that operands of one shape
// are one long row. Empty beyond KILN_PK_QADD_MAX_RANK dims.
struct BroadcastShape {
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> strides;
};
BroadcastShape broadcast_shape(const Dims& out, const std::vector<Dims>& operands) {
  BroadcastShape s;
  for (const Dims& in : operands) {
    std::vector<int64_t> st(out.size(), 0);
    int64_t step = 1;
    for (size_t i = 0; i < in.size(); ++i) {
      const size_t d = out.size() - 1 - i, from = in.size() - 1 - i;
      st[d] = in[from] == 1 ? 0 : step;
      step *= in[from];
    }
    s.strides.push_back(st);
  }
  s.dims = out.empty() ? std::vector<int64_t>{1} : std::vector<int64_t>(out.begin(), out.end());
  for (auto& st : s.strides)
    if (st.empty()) st = {0};
  // Merged from the last dim back: dim d joins d + 1 where each stride of
  // d is the stride of d + 1 times its length.
  for (size_t d = s.dims.size() - 1; d-- > 0;) {
    bool joins = true;
    for (const auto& st : s.strides) joins &= st[d] == st[d + 1] * s.dims[d + 1];
    if (!joins) continue;
    s.dims[d] *= s.dims[d + 1];
    s.dims.erase(s.dims.begin() + long(d) + 1);
    for (auto& st : s.strides) st.erase(st.begin() + long(d));
  }
  if (s.dims.size() > KILN_PK_QADD_MAX_RANK) return {};
  return s;
}

bool portable_qlinear_add(Context& cx, const ir::Node& n) {
  if (n.inputs.size() != 8 || n.outputs.size() != 1) return false;
  const std::string &a = n.inputs[0], &b = n.inputs[3], &y = n.outputs[0];
  const DType at = cx.dtype(a), bt = cx.dtype(b), yt = cx.dtype(y);
  if (!is_8bit(at) || !is_8bit(bt) || !is_8bit(yt)) return false;
  const BroadcastShape shape = broadcast_shape(cx.dims(y), {cx.dims(a), cx.dims(b)});
  if (shape.dims.empty()) return false;
  const auto as = scalar_scale(cx, n, 1), bs = scalar_scale(cx, n, 4), ys = scalar_scale(cx, n, 6);
  if (!as || !bs || !ys) return false;
  std::vector<int> args{cx.plain(a), cx.plain(b)};
  Call::Arg az, bz, yz;
  if (!zero_point(cx, n, 2, at, args, az) || !zero_point(cx, n, 5, bt, args, bz) || !zero_point(cx, n, 7, yt, args, yz))
    return false;
  args.push_back(cx.define_plain(y));
  std::vector<char> writes(args.size(), 0);
  writes.back() = 1;
  const Call::Arg dst = Call::buffer(int(args.size()) - 1);
  cx.compiled();
  cx.add_call(n.describe(), std::move(args), std::move(writes),
              {"kiln_pk_qadd",
               {Call::i64(int64_t(shape.dims.size())), Call::array(shape.dims), Call::array(shape.strides[0]),
                Call::array(shape.strides[1]), Call::i32(*pk_type(at)), Call::buffer(0), Call::f32(*as), az,
                Call::i32(*pk_type(bt)), Call::buffer(1), Call::f32(*bs), bz, Call::f32(*ys), Call::i32(*pk_type(yt)), yz, dst},
               false});
  return true;
}

}  // namespace kiln::cpu::lowering
