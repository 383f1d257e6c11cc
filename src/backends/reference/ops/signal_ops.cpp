// Signal processing: window functions, DFT and STFT. Complex tensors are
// represented ONNX-style as a trailing dimension of size 2 (real, imaginary);
// real input may also carry a trailing dimension of size 1.
#include <cmath>
#include <complex>
#include <numbers>
#include <string>
#include <vector>

#include "backends/reference/kernel_registry.hpp"
#include "backends/reference/ops/op_util.hpp"

namespace kiln::ref {
namespace {

using cd = std::complex<double>;

void require_numeric(const KernelContext& ctx, DType dtype) {
  if (!ir::dtype_is_float(dtype) && !ir::dtype_is_int(dtype) && dtype != DType::Bool)
    ctx.fail(std::string("unsupported output type ") + ir::dtype_name(dtype) + ", expected a numeric type");
}

// Writes v(i) for every element i into a new tensor of `dtype`, which must be
// numeric. The tensor is made first: its size is checked before any work.
template <typename F>
Tensor tensor_from_function(const KernelContext& ctx, DType dtype, const Dims& dims, F&& v) {
  require_numeric(ctx, dtype);
  Tensor out(dtype, dims);
  ir::dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      if constexpr (std::is_same_v<T, ir::Half> || std::is_same_v<T, ir::BFloat16>)
        p[i] = T(float(v(i)));
      else
        p[i] = static_cast<T>(v(i));
    }
  });
  return out;
}

Tensor tensor_from_doubles(const KernelContext& ctx, DType dtype, const Dims& dims, const std::vector<double>& v) {
  return tensor_from_function(ctx, dtype, dims, [&](int64_t i) { return v[size_t(i)]; });
}

int64_t scalar_int(const KernelContext& ctx, const Tensor& t, const char* what) {
  if (t.numel() != 1 || !ir::dtype_is_int(t.dtype()))
    ctx.fail(std::string(what) + " must be a single integer, got shape " + ir::dims_to_string(t.dims()) + " of " +
             ir::dtype_name(t.dtype()));
  return t.as_int64(0);
}

// Generalized cosine window: sum_k (-1)^k a_k cos(2 pi k n / N).
void cosine_window(KernelContext& ctx, const std::vector<double>& a) {
  int64_t size = scalar_int(ctx, ctx.input(0), "size");
  if (size < 0) ctx.fail("window size is " + std::to_string(size) + ", expected a non-negative value");
  bool periodic = ctx.attr_int("periodic", 1) != 0;
  // A symmetric window of length 1 would divide by zero; numpy returns [1].
  const int64_t denom = periodic ? size : size - 1;
  auto dtype = DType(ctx.attr_int("output_datatype", int64_t(DType::Float32)));
  ctx.set_output(0, tensor_from_function(ctx, dtype, {size}, [&](int64_t n) {
                   if (denom <= 0) return 1.0;
                   double v = 0, sign = 1;
                   for (size_t k = 0; k < a.size(); ++k, sign = -sign)
                     v += sign * a[k] * std::cos(2 * std::numbers::pi * double(k) * double(n) / double(denom));
                   return v;
                 }));
}

void hann_window(KernelContext& ctx) { cosine_window(ctx, {0.5, 0.5}); }
void hamming_window(KernelContext& ctx) { cosine_window(ctx, {25.0 / 46.0, 21.0 / 46.0}); }
void blackman_window(KernelContext& ctx) { cosine_window(ctx, {0.42, 0.5, 0.08}); }

// Naive DFT of length n of `x` (already truncated to at most n values; the
// rest of the n are zeros, which cost nothing), returning `out_len` bins.
std::vector<cd> dft_1d(const std::vector<cd>& x, size_t n, bool inverse, size_t out_len) {
  std::vector<cd> y(out_len);
  double sign = inverse ? 1.0 : -1.0;
  for (size_t k = 0; k < out_len; ++k) {
    cd acc = 0;
    for (size_t j = 0; j < x.size(); ++j) {
      // Reducing k*j modulo n keeps the angle small and the result accurate.
      double angle = sign * 2 * std::numbers::pi * double((k * j) % n) / double(n);
      acc += x[j] * cd(std::cos(angle), std::sin(angle));
    }
    y[k] = inverse ? acc / double(n) : acc;
  }
  return y;
}

// Reads element i of a tensor whose last dim holds 1 (real) or 2 (complex) values.
cd complex_at(const Tensor& t, int64_t i, bool complex) {
  return complex ? cd(t.as_double(2 * i), t.as_double(2 * i + 1)) : cd(t.as_double(i), 0.0);
}

void dft(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  require_float(ctx, x, "input");
  int r = x.rank();
  if (r < 2 || (x.dim(-1) != 1 && x.dim(-1) != 2))
    ctx.fail("input shape " + ir::dims_to_string(x.dims()) + " must end in a dimension of 1 (real) or 2 (complex)");
  bool complex = x.dim(-1) == 2;

  // Opset 20 moved axis from an attribute to input 2 and counts it from the
  // full rank; both forms exclude the trailing real/imaginary dimension.
  int64_t axis = ctx.opset() >= 20 ? (ctx.has_input(2) ? scalar_int(ctx, ctx.input(2), "axis") : -2) : ctx.attr_int("axis", 1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r - 1)
    ctx.fail("axis " + std::to_string(axis) + " is out of range, expected a signal axis in [0, " + std::to_string(r - 2) + "]");

  int64_t in_len = x.dim(int(axis));
  int64_t n = in_len;
  if (ctx.has_input(1) && ctx.input(1).numel() > 0) {
    n = scalar_int(ctx, ctx.input(1), "dft_length");
    if (n <= 0) ctx.fail("dft_length is " + std::to_string(n) + ", expected a positive value");
  }
  bool inverse = ctx.attr_int("inverse", 0) != 0;
  bool onesided = ctx.attr_int("onesided", 0) != 0;
  int64_t out_len = onesided ? n / 2 + 1 : n;

  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= x.dim(i);
  for (int i = int(axis) + 1; i < r - 1; ++i) inner *= x.dim(i);

  Dims out_dims = x.dims();
  out_dims[size_t(axis)] = out_len;
  out_dims.back() = 2;
  // Made before any work: a dft_length too large for memory fails here.
  Tensor result(DType::Float64, out_dims);
  double* out = result.data<double>();
  // Signals shorter than dft_length are zero-padded, longer ones truncated.
  std::vector<cd> sig(static_cast<size_t>(std::min(n, in_len)));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      for (size_t j = 0; j < sig.size(); ++j) sig[j] = complex_at(x, (o * in_len + int64_t(j)) * inner + in, complex);
      std::vector<cd> y = dft_1d(sig, size_t(n), inverse, size_t(out_len));
      for (int64_t k = 0; k < out_len; ++k) {
        size_t at = size_t(((o * out_len + k) * inner + in) * 2);
        out[at] = y[size_t(k)].real();
        out[at + 1] = y[size_t(k)].imag();
      }
    }
  ctx.set_output(0, result.cast(x.dtype()));
}

void stft(KernelContext& ctx) {
  const Tensor& signal = ctx.input(0);
  require_float(ctx, signal, "signal");
  if (signal.rank() != 3 || (signal.dim(2) != 1 && signal.dim(2) != 2))
    ctx.fail("signal shape " + ir::dims_to_string(signal.dims()) +
             " must be [batch, length, 1] (real) or [batch, length, 2] (complex)");
  bool complex = signal.dim(2) == 2;
  int64_t batch = signal.dim(0), length = signal.dim(1);
  int64_t step = scalar_int(ctx, ctx.input(1), "frame_step");
  if (step <= 0) ctx.fail("frame_step is " + std::to_string(step) + ", expected a positive value");

  bool has_window = ctx.has_input(2) && ctx.input(2).numel() > 0;
  int64_t frame_length = -1;
  if (ctx.has_input(3)) frame_length = scalar_int(ctx, ctx.input(3), "frame_length");
  if (has_window) {
    const Tensor& w = ctx.input(2);
    if (w.rank() != 1) ctx.fail("window shape " + ir::dims_to_string(w.dims()) + " must be 1-D");
    if (frame_length >= 0 && frame_length != w.dim(0))
      ctx.fail("frame_length " + std::to_string(frame_length) + " does not match the window length " + std::to_string(w.dim(0)));
    frame_length = w.dim(0);
  }
  if (frame_length <= 0 || frame_length > length)
    ctx.fail("frame length " + std::to_string(frame_length) + " must be given (as window or frame_length) and lie in [1, " +
             std::to_string(length) + "]");
  std::vector<double> window(size_t(frame_length), 1.0);
  if (has_window)
    for (int64_t i = 0; i < frame_length; ++i) window[size_t(i)] = ctx.input(2).as_double(i);

  bool onesided = ctx.attr_int("onesided", 1) != 0;
  if (onesided && complex) ctx.fail("onesided output requires a real signal, got a complex one");
  int64_t frames = (length - frame_length) / step + 1;
  int64_t bins = onesided ? frame_length / 2 + 1 : frame_length;

  std::vector<double> out(size_t(batch * frames * bins * 2));
  std::vector<cd> frame(static_cast<size_t>(frame_length));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t f = 0; f < frames; ++f) {
      for (int64_t j = 0; j < frame_length; ++j)
        frame[size_t(j)] = complex_at(signal, b * length + f * step + j, complex) * window[size_t(j)];
      std::vector<cd> y = dft_1d(frame, frame.size(), false, size_t(bins));
      for (int64_t k = 0; k < bins; ++k) {
        size_t at = size_t(((b * frames + f) * bins + k) * 2);
        out[at] = y[size_t(k)].real();
        out[at + 1] = y[size_t(k)].imag();
      }
    }
  ctx.set_output(0, tensor_from_doubles(ctx, signal.dtype(), {batch, frames, bins, 2}, out));
}

}  // namespace

void register_signal_ops(KernelRegistry& r) {
  r.add("HannWindow", &hann_window);
  r.add("HammingWindow", &hamming_window);
  r.add("BlackmanWindow", &blackman_window);
  r.add("DFT", &dft);
  r.add("STFT", &stft);
}

}  // namespace kiln::ref
