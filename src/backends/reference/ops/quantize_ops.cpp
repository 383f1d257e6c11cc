// Reference kernels for quantization (QuantizeLinear, DequantizeLinear,
// DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, QLinearConv, and
// ONNX Runtime's QLinearAdd and QGemm) and the
// two linear-algebra ops Einsum and Det. Integer arithmetic is exact (int64);
// requantization rounds half to even, as the spec's numpy reference does.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "backends/reference/kernel_registry.hpp"
#include "backends/reference/ops/op_util.hpp"

namespace kiln::ref {
namespace {

double round_half_even(double v) { return std::nearbyint(v); }  // default FE_TONEAREST

// Saturates to the range of the quantized type.
double clamp_to(DType t, double v) {
  if (t == DType::UInt8) return std::clamp(v, 0.0, 255.0);
  if (t == DType::Int8) return std::clamp(v, -128.0, 127.0);
  if (t == DType::Int32) return std::clamp(v, -2147483648.0, 2147483647.0);
  return v;
}

// A per-tensor parameter (scale or zero point): exactly one value.
double scalar_param(const KernelContext& ctx, size_t input, const char* what) {
  const Tensor& t = ctx.input(input);
  if (t.numel() != 1) ctx.fail(std::string(what) + " must hold one value, has shape " + ir::dims_to_string(t.dims()));
  return t.as_double(0);
}

// A per-tensor or per-channel parameter: 1 or `channels` values.
std::vector<double> channel_param(const KernelContext& ctx, size_t input, int64_t channels, const char* what) {
  std::vector<double> v = to_doubles(ctx.input(input));
  if (v.size() != 1 && int64_t(v.size()) != channels)
    ctx.fail(std::string(what) + " must hold one value or one per channel (" + std::to_string(channels) + "), holds " +
             std::to_string(v.size()));
  return v;
}

void require_quantized(const KernelContext& ctx, const Tensor& t, const char* what) {
  if (t.dtype() != DType::UInt8 && t.dtype() != DType::Int8)
    ctx.fail(std::string(what) + " must be uint8 or int8, is " + ir::dtype_name(t.dtype()));
}

// Per-tensor (scalar) or per-axis (1-D of the axis' size) parameters,
// expanded to one value per element of `x`.
std::vector<double> per_element(const KernelContext& ctx, const Tensor* p, const Dims& x, int64_t axis, const char* what,
                                double fallback) {
  const int64_t n = ir::checked_numel(x);
  std::vector<double> out(size_t(n), fallback);
  if (!p) return out;
  std::vector<double> v = to_doubles(*p);
  if (p->numel() == 1) {
    std::fill(out.begin(), out.end(), v[0]);
    return out;
  }
  if (p->rank() != 1 || x.empty())
    ctx.fail(std::string(what) + " must be a scalar or a 1-D tensor, has shape " + ir::dims_to_string(p->dims()));
  axis = normalize_axis(ctx, axis, int64_t(x.size()));
  if (p->dims()[0] != x[size_t(axis)])
    ctx.fail(std::string(what) + " has " + std::to_string(p->dims()[0]) + " values for axis " + std::to_string(axis) +
             " of size " + std::to_string(x[size_t(axis)]));
  int64_t inner = 1;
  for (size_t d = size_t(axis) + 1; d < x.size(); ++d) inner *= x[d];
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = v[size_t((i / inner) % x[size_t(axis)])];
  return out;
}

void quantize_linear(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  DType out_type = zp ? zp->dtype() : DType::UInt8;
  if (out_type != DType::UInt8 && out_type != DType::Int8)
    ctx.unsupported(std::string("quantizing to ") + ir::dtype_name(out_type) + " (uint8 and int8 are supported)");
  const int64_t axis = ctx.attr_int("axis", 1);
  auto scale = per_element(ctx, &ctx.input(1), x.dims(), axis, "y_scale", 1);
  auto zero = per_element(ctx, zp, x.dims(), axis, "y_zero_point", 0);
  auto xv = to_doubles(x);
  // float32 inputs divide in float32, as the spec's numpy reference does:
  // a double quotient can round the other way at .5 boundaries.
  const bool single = x.dtype() == DType::Float32;
  for (size_t i = 0; i < xv.size(); ++i) {
    double q = single ? double(float(xv[i]) / float(scale[i])) : xv[i] / scale[i];
    xv[i] = clamp_to(out_type, round_half_even(q) + zero[i]);
  }
  ctx.set_output(0, from_doubles(out_type, x.dims(), xv));
}

void dequantize_linear(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& scale_t = ctx.input(1);
  const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  if (x.dtype() == DType::Int32 && zp && ir::checked_numel(zp->dims()) &&
      to_doubles(*zp) != std::vector<double>(size_t(zp->numel()), 0.0))
    ctx.fail("an int32 input must have no zero point (or zero)");
  const int64_t axis = ctx.attr_int("axis", 1);
  auto scale = per_element(ctx, &scale_t, x.dims(), axis, "x_scale", 1);
  auto zero = per_element(ctx, zp, x.dims(), axis, "x_zero_point", 0);
  auto xv = to_doubles(x);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = (xv[i] - zero[i]) * scale[i];
  ctx.set_output(0, from_doubles(scale_t.dtype(), x.dims(), xv));
}

void dynamic_quantize_linear(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  require_float(ctx, x, "x");
  auto xv = to_doubles(x);
  // The range always includes 0 so that 0 is exactly representable.
  double lo = 0, hi = 0;
  for (double v : xv) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  // float32 arithmetic throughout, matching the spec's definition.
  const float scale = (float(hi) - float(lo)) / 255.0f;
  const double zero = scale == 0 ? 0 : clamp_to(DType::UInt8, round_half_even(0.0f - float(lo) / scale));
  for (double& v : xv) v = scale == 0 ? zero : clamp_to(DType::UInt8, round_half_even(float(v) / scale) + zero);
  ctx.set_output(0, from_doubles(DType::UInt8, x.dims(), xv));
  ctx.set_output(1, Tensor::scalar<float>(scale));
  ctx.set_output(2, Tensor::scalar<uint8_t>(uint8_t(zero)));
}

// Integer matrix product with numpy batching; zero points are subtracted
// first. Row zero points of A apply per row (axis -2), those of B per column.
std::vector<double> integer_matmul(const KernelContext& ctx, const Tensor& a, const Tensor& b, const Tensor* a_zero,
                                   const Tensor* b_zero, Dims& out_dims) {
  const MatMulShape s = matmul_shape(ctx, a.dims(), b.dims());
  const int64_t m = s.m, k = s.k, n = s.n;
  out_dims = s.out;
  auto av = to_doubles(a), bv = to_doubles(b);
  std::vector<double> az = a_zero ? to_doubles(*a_zero) : std::vector<double>{0};
  std::vector<double> bz = b_zero ? to_doubles(*b_zero) : std::vector<double>{0};
  if (az.size() != 1 && int64_t(az.size()) != m) ctx.fail("a_zero_point must be a scalar or have one value per row of A");
  if (bz.size() != 1 && int64_t(bz.size()) != n) ctx.fail("b_zero_point must be a scalar or have one value per column of B");
  std::vector<double> out;
  out.reserve(size_t(ir::checked_numel(out_dims)));
  for (BroadcastIterator it(s.batch, {s.a_batch_strides, s.b_batch_strides}); !it.done(); it.next()) {
    const double* ma = av.data() + it.offset(0) * m * k;
    const double* mb = bv.data() + it.offset(1) * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        const double za = az.size() == 1 ? az[0] : az[size_t(i)], zb = bz.size() == 1 ? bz[0] : bz[size_t(j)];
        for (int64_t p = 0; p < k; ++p) acc += (ma[i * k + p] - za) * (mb[p * n + j] - zb);
        out.push_back(acc);
      }
  }
  return out;
}

void matmul_integer(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  require_quantized(ctx, a, "A");
  require_quantized(ctx, b, "B");
  Dims dims;
  auto out =
      integer_matmul(ctx, a, b, ctx.has_input(2) ? &ctx.input(2) : nullptr, ctx.has_input(3) ? &ctx.input(3) : nullptr, dims);
  ctx.set_output(0, from_doubles(DType::Int32, dims, out));
}

// com.microsoft's QLinearAdd (ONNX Runtime's contrib operator, which the
// graph passes also make from a dequantized Add):
// C = saturate(round((A_scale (A - A_zero) + B_scale (B - B_zero)) / C_scale) + C_zero),
// parameters per tensor, A and B broadcast against each other as Add's are.
void qlinear_add(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(3);
  require_quantized(ctx, a, "A");
  require_quantized(ctx, b, "B");
  const Dims dims = broadcast_shapes(ctx, a.dims(), b.dims());
  const double sa = scalar_param(ctx, 1, "A_scale"), za = ctx.has_input(2) ? scalar_param(ctx, 2, "A_zero_point") : 0;
  const double sb = scalar_param(ctx, 4, "B_scale"), zb = ctx.has_input(5) ? scalar_param(ctx, 5, "B_zero_point") : 0;
  const double sc = scalar_param(ctx, 6, "C_scale"), zc = ctx.has_input(7) ? scalar_param(ctx, 7, "C_zero_point") : 0;
  const DType out = ctx.has_input(7) ? ctx.input(7).dtype() : DType::UInt8;
  const std::vector<double> av = to_doubles(a), bv = to_doubles(b);
  std::vector<double> cv;
  cv.reserve(size_t(ir::checked_numel(dims)));
  for (BroadcastIterator it(dims, {broadcast_strides(a.dims(), dims), broadcast_strides(b.dims(), dims)}); !it.done(); it.next())
    cv.push_back(
        clamp_to(out, round_half_even((sa * (av[size_t(it.offset(0))] - za) + sb * (bv[size_t(it.offset(1))] - zb)) / sc) + zc));
  ctx.set_output(0, from_doubles(out, dims, cv));
}

// y = saturate(round(acc * a_scale * b_scale / y_scale) + y_zero), where a's
// and y's parameters may be per row and b's per column.
void qlinear_matmul(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(3);
  require_quantized(ctx, a, "a");
  require_quantized(ctx, b, "b");
  const Tensor& y_zero_t = ctx.input(7);
  Dims dims;
  auto acc = integer_matmul(ctx, a, b, &ctx.input(2), &ctx.input(5), dims);
  const int64_t m = a.rank() == 1 ? 1 : a.dim(-2), n = b.rank() == 1 ? 1 : b.dim(-1);
  const auto a_scale = channel_param(ctx, 1, m, "a_scale"), b_scale = channel_param(ctx, 4, n, "b_scale");
  const auto y_scale = channel_param(ctx, 6, m, "y_scale"), y_zero = channel_param(ctx, 7, m, "y_zero_point");
  auto pick = [](const std::vector<double>& v, int64_t i) { return v.size() == 1 ? v[0] : v[size_t(i)]; };
  for (size_t i = 0; i < acc.size(); ++i) {
    const int64_t row = (int64_t(i) / n) % m, col = int64_t(i) % n;
    acc[i] = clamp_to(y_zero_t.dtype(),
                      round_half_even(acc[i] * pick(a_scale, row) * pick(b_scale, col) / pick(y_scale, row)) + pick(y_zero, row));
  }
  ctx.set_output(0, from_doubles(y_zero_t.dtype(), dims, acc));
}

// com.microsoft's QGemm (ONNX Runtime's contrib operator, which the graph
// passes also make from a dequantized Gemm): A (transA) times B (transB),
// less their zero points, plus the int32 bias C at scale
// alpha a_scale b_scale (b's parameters per tensor or per column), times
// that scale; requantized to y_scale and y_zero_point, or float without a
// y_scale.
void qgemm(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(3);
  require_quantized(ctx, a, "A");
  require_quantized(ctx, b, "B");
  if (a.rank() != 2 || b.rank() != 2)
    ctx.fail("A " + ir::dims_to_string(a.dims()) + " and B " + ir::dims_to_string(b.dims()) + " must be matrices");
  const bool ta = ctx.attr_int("transA", 0), tb = ctx.attr_int("transB", 0);
  const int64_t m = a.dim(ta ? 1 : 0), k = a.dim(ta ? 0 : 1), n = b.dim(tb ? 0 : 1);
  if (b.dim(tb ? 1 : 0) != k)
    ctx.fail("inner dimensions differ: A " + ir::dims_to_string(a.dims()) + " and B " + ir::dims_to_string(b.dims()));
  const double alpha = ctx.attr_float("alpha", 1);
  const double sa = scalar_param(ctx, 1, "a_scale"), za = ctx.has_input(2) ? scalar_param(ctx, 2, "a_zero_point") : 0;
  const auto sb = channel_param(ctx, 4, n, "b_scale");
  const auto zb = ctx.has_input(5) ? channel_param(ctx, 5, n, "b_zero_point") : std::vector<double>{0};
  std::vector<double> c;
  Dims c_dims;
  if (ctx.has_input(6)) {
    const Tensor& ct = ctx.input(6);
    if (ct.dtype() != DType::Int32) ctx.fail(std::string("C must be int32, is ") + ir::dtype_name(ct.dtype()));
    c_dims = ct.dims();
    if (broadcast_shapes(ctx, c_dims, {m, n}) != Dims{m, n})
      ctx.fail("C " + ir::dims_to_string(c_dims) + " does not broadcast to the product's shape [" + std::to_string(m) + "," +
               std::to_string(n) + "]");
    c = to_doubles(ct);
  }
  const bool quantized = ctx.has_input(7);
  const double sy = quantized ? scalar_param(ctx, 7, "y_scale") : 1,
               zy = ctx.has_input(8) ? scalar_param(ctx, 8, "y_zero_point") : 0;
  const DType out = !quantized ? DType::Float32 : ctx.has_input(8) ? ctx.input(8).dtype() : DType::UInt8;
  if (quantized && out != DType::UInt8 && out != DType::Int8)
    ctx.fail(std::string("y_zero_point must be uint8 or int8, is ") + ir::dtype_name(out));
  const auto av = to_doubles(a), bv = to_doubles(b);
  const std::vector<int64_t> c_strides = broadcast_strides(c_dims, {m, n});
  auto pick = [](const std::vector<double>& v, int64_t i) { return v.size() == 1 ? v[0] : v[size_t(i)]; };
  std::vector<double> y(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = c.empty() ? 0 : c[size_t(i * c_strides[0] + j * c_strides[1])];
      for (int64_t p = 0; p < k; ++p)
        acc += (av[size_t(ta ? p * m + i : i * k + p)] - za) * (bv[size_t(tb ? j * k + p : p * n + j)] - pick(zb, j));
      const double v = acc * alpha * sa * pick(sb, j);
      y[size_t(i * n + j)] = quantized ? clamp_to(out, round_half_even(v / sy) + zy) : v;
    }
  ctx.set_output(0, from_doubles(out, {m, n}, y));
}

void qlinear_conv(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(3);
  const Tensor& y_zero = ctx.input(7);
  require_quantized(ctx, x, "x");
  require_quantized(ctx, w, "w");
  if (x.rank() < 3 || w.rank() != x.rank())
    ctx.fail("x " + ir::dims_to_string(x.dims()) + " and w " + ir::dims_to_string(w.dims()) +
             " must be N,C,spatial... of equal rank");
  const size_t sp = size_t(x.rank() - 2);
  const int64_t N = x.dim(0), C = x.dim(1), M = w.dim(0), group = ctx.attr_int("group", 1);
  if (group <= 0 || C % group || M % group || w.dim(1) != C / group)
    ctx.fail("channels do not match: x has " + std::to_string(C) + ", w " + ir::dims_to_string(w.dims()) + ", group " +
             std::to_string(group));
  const Dims kernel(w.dims().begin() + 2, w.dims().end());
  const Geometry geo = forward_geometry(ctx, Dims(x.dims().begin() + 2, x.dims().end()), kernel, false);
  const std::vector<int64_t>&strides = geo.strides, &dil = geo.dilations, &pads = geo.pad_begin;
  Dims out_dims{N, M};
  out_dims.insert(out_dims.end(), geo.out.begin(), geo.out.end());
  auto xv = to_doubles(x), wv = to_doubles(w);
  const double xz = scalar_param(ctx, 2, "x_zero_point"), x_scale = scalar_param(ctx, 1, "x_scale");
  const double y_scale = scalar_param(ctx, 6, "y_scale"), yz = scalar_param(ctx, 7, "y_zero_point");
  auto w_scale = channel_param(ctx, 4, M, "w_scale"), w_zero = channel_param(ctx, 5, M, "w_zero_point");
  std::vector<double> bias = ctx.has_input(8) ? to_doubles(ctx.input(8)) : std::vector<double>(size_t(M), 0);
  if (int64_t(bias.size()) != M) ctx.fail("bias must have one value per output channel");
  const Dims x_sp(x.dims().begin() + 2, x.dims().end()), o_sp(out_dims.begin() + 2, out_dims.end());
  const int64_t x_plane = ir::checked_numel(x_sp), o_plane = ir::checked_numel(o_sp), k_plane = ir::checked_numel(kernel);
  const auto x_str = strides_of(x_sp), o_str = strides_of(o_sp), k_str = strides_of(kernel);
  std::vector<double> y(size_t(ir::checked_numel(out_dims)));
  const int64_t cg = C / group, mg = M / group;
  std::vector<int64_t> pos(sp);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) {
      const int64_t g = m / mg;
      const double wz = w_zero.size() == 1 ? w_zero[0] : w_zero[size_t(m)];
      const double ws = w_scale.size() == 1 ? w_scale[0] : w_scale[size_t(m)];
      for (int64_t o = 0; o < o_plane; ++o) {
        double acc = bias[size_t(m)];
        for (int64_t c = 0; c < cg; ++c)
          for (int64_t kk = 0; kk < k_plane; ++kk) {
            int64_t x_off = 0;
            bool inside = true;
            for (size_t d = 0; d < sp && inside; ++d) {
              int64_t p = (o / o_str[d]) % o_sp[d] * strides[d] - pads[d] + (kk / k_str[d]) % kernel[d] * dil[d];
              inside = p >= 0 && p < x_sp[d];
              x_off += p * x_str[d];
            }
            if (!inside) continue;  // padding holds the zero point: contributes 0
            acc += (xv[size_t((n * C + g * cg + c) * x_plane + x_off)] - xz) * (wv[size_t((m * cg + c) * k_plane + kk)] - wz);
          }
        y[size_t((n * M + m) * o_plane + o)] = clamp_to(y_zero.dtype(), round_half_even(acc * x_scale * ws / y_scale) + yz);
      }
    }
  ctx.set_output(0, from_doubles(y_zero.dtype(), out_dims, y));
}

// Einsum by enumeration: every combination of every label's index, products
// of the operands' elements accumulated into the output element. Labels are
// letters; the dims an ellipsis covers get labels -1, -2, ... so that they
// can never collide with a letter.
void einsum(KernelContext& ctx) {
  std::string eq = ctx.attr_string("equation", "");
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != ctx.num_inputs())
    ctx.fail("equation '" + eq + "' names " + std::to_string(terms.size()) + " operands, got " +
             std::to_string(ctx.num_inputs()));
  const DType dt = ctx.input(0).dtype();
  auto label_name = [](int l) { return l < 0 ? std::string("...") : std::string(1, char(l)); };

  // Parses one term; the ellipsis stands for `ellipsis_rank` dims (the last ones of it).
  auto parse = [&](const std::string& term, int64_t ellipsis_rank) {
    std::vector<int> out;
    for (size_t i = 0; i < term.size();) {
      if (term.compare(i, 3, "...") == 0) {
        for (int64_t e = ellipsis_rank; e > 0; --e) out.push_back(-int(e));
        i += 3;
      } else if (std::isalpha(static_cast<unsigned char>(term[i]))) {
        out.push_back(term[i++]);
      } else {
        ctx.fail("invalid character '" + std::string(1, term[i]) + "' in equation '" + eq + "'");
      }
    }
    return out;
  };

  std::map<int, int64_t> size;
  int64_t ellipsis_rank = 0;
  std::vector<std::vector<int>> labels(terms.size());
  for (size_t t = 0; t < terms.size(); ++t) {
    const Tensor& x = ctx.input(t);
    if (x.dtype() != dt) ctx.fail("operands have different element types");
    const bool has_dots = terms[t].find("...") != std::string::npos;
    const int64_t named = int64_t(terms[t].size()) - (has_dots ? 3 : 0);
    const int64_t er = has_dots ? x.rank() - named : 0;
    if (er < 0 || (!has_dots && named != x.rank()))
      ctx.fail("term '" + terms[t] + "' does not match operand " + std::to_string(t) + " of shape " +
               ir::dims_to_string(x.dims()));
    ellipsis_rank = std::max(ellipsis_rank, er);
    labels[t] = parse(terms[t], er);
    for (size_t d = 0; d < labels[t].size(); ++d) {
      const int l = labels[t][d];
      const int64_t s = x.dims()[d];
      auto it = size.find(l);
      // Ellipsis dims broadcast; letters must agree.
      if (it == size.end() || (l < 0 && it->second == 1))
        size[l] = s;
      else if (s != it->second && !(l < 0 && s == 1))
        ctx.fail("label '" + label_name(l) + "' has sizes " + std::to_string(it->second) + " and " + std::to_string(s));
    }
  }
  std::vector<int> out_labels;
  if (arrow != std::string::npos) {
    out_labels = parse(eq.substr(arrow + 2), ellipsis_rank);
    std::set<int> seen;
    for (int l : out_labels) {
      if (!size.count(l)) ctx.fail("output label '" + label_name(l) + "' is not in any operand");
      if (!seen.insert(l).second) ctx.fail("output label '" + label_name(l) + "' appears twice");
    }
  } else {
    // Implicit output: the ellipsis, then the letters used exactly once, alphabetically.
    for (int64_t e = ellipsis_rank; e > 0; --e) out_labels.push_back(-int(e));
    std::map<int, int> count;
    for (const auto& ls : labels)
      for (int l : ls) count[l]++;
    for (const auto& [l, c] : count)
      if (c == 1 && l > 0) out_labels.push_back(l);
  }
  std::vector<int> all = out_labels;
  for (const auto& [l, s] : size)
    if (std::find(all.begin(), all.end(), l) == all.end()) all.push_back(l);
  Dims all_dims, out_dims;
  for (int l : all) all_dims.push_back(size[l]);
  for (int l : out_labels) out_dims.push_back(size[l]);

  std::vector<std::vector<double>> values;
  std::vector<std::vector<int64_t>> strides;  // per operand, its stride along each label of `all`
  for (size_t t = 0; t < terms.size(); ++t) {
    const Tensor& x = ctx.input(t);
    values.push_back(to_doubles(x));
    const auto own = strides_of(x.dims());
    std::vector<int64_t> st(all.size(), 0);
    for (size_t d = 0; d < labels[t].size(); ++d) {
      const size_t pos = size_t(std::find(all.begin(), all.end(), labels[t][d]) - all.begin());
      // Repeated labels add up (the diagonal); broadcast ellipsis dims stay 0.
      if (x.dims()[d] != 1 || size[labels[t][d]] == 1) st[pos] += own[d];
    }
    strides.push_back(st);
  }
  std::vector<double> out(size_t(ir::checked_numel(out_dims)), 0.0);
  const int64_t total = ir::checked_numel(all_dims);
  const int64_t inner = out.empty() ? 1 : total / int64_t(out.size());  // combinations summed per output element
  std::vector<int64_t> idx(all.size(), 0);
  for (int64_t flat = 0; flat < total; ++flat) {
    int64_t rem = flat;
    for (size_t d = all.size(); d-- > 0;) {
      idx[d] = rem % all_dims[d];
      rem /= all_dims[d];
    }
    double prod = 1;
    for (size_t t = 0; t < values.size(); ++t) {
      int64_t off = 0;
      for (size_t d = 0; d < all.size(); ++d) off += idx[d] * strides[t][d];
      prod *= values[t][size_t(off)];
    }
    out[size_t(flat / inner)] += prod;
  }
  ctx.set_output(0, from_doubles(dt, out_dims, out));
}

void det(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  require_float(ctx, x, "X");
  if (x.rank() < 2 || x.dim(-1) != x.dim(-2)) ctx.fail("X must hold square matrices, has shape " + ir::dims_to_string(x.dims()));
  const int64_t n = x.dim(-1);
  Dims batch(x.dims().begin(), x.dims().end() - 2);
  auto v = to_doubles(x);
  std::vector<double> out;
  for (int64_t b = 0; b < ir::checked_numel(batch); ++b) {
    std::vector<double> a(v.begin() + b * n * n, v.begin() + (b + 1) * n * n);
    double d = 1;
    for (int64_t c = 0; c < n; ++c) {
      int64_t pivot = c;
      for (int64_t r = c + 1; r < n; ++r)
        if (std::fabs(a[size_t(r * n + c)]) > std::fabs(a[size_t(pivot * n + c)])) pivot = r;
      if (a[size_t(pivot * n + c)] == 0) {
        d = 0;
        break;
      }
      if (pivot != c) {
        for (int64_t k = 0; k < n; ++k) std::swap(a[size_t(c * n + k)], a[size_t(pivot * n + k)]);
        d = -d;
      }
      d *= a[size_t(c * n + c)];
      for (int64_t r = c + 1; r < n; ++r) {
        double f = a[size_t(r * n + c)] / a[size_t(c * n + c)];
        for (int64_t k = c; k < n; ++k) a[size_t(r * n + k)] -= f * a[size_t(c * n + k)];
      }
    }
    out.push_back(d);
  }
  ctx.set_output(0, from_doubles(x.dtype(), batch, out));
}

}  // namespace

void register_quantize_ops(KernelRegistry& r) {
  r.add("QuantizeLinear", &quantize_linear);
  r.add("DequantizeLinear", &dequantize_linear);
  r.add("DynamicQuantizeLinear", &dynamic_quantize_linear);
  r.add("MatMulInteger", &matmul_integer);
  r.add("QLinearMatMul", &qlinear_matmul);
  r.add("QLinearConv", &qlinear_conv);
  r.add("QLinearAdd", &qlinear_add);
  r.add("QGemm", &qgemm);
  r.add("Einsum", &einsum);
  r.add("Det", &det);
}

}  // namespace kiln::ref
