// The elementwise kernels of quantized models: QuantizeLinear,
// DequantizeLinear (and Cast of integers to float), DynamicQuantizeLinear,
// com.microsoft's QLinearAdd, and max pooling of 8-bit values. Each gives
// the reference kernels' bits (quantize_ops.cpp): the same float or double
// operations in the same order.
#include "backends/cpu/portable/config.hpp"
#include "backends/cpu/portable/int8.hpp"
#include "backends/cpu/portable/parallel.hpp"

namespace kiln::pk {
namespace {

constexpr int64_t kBlock = 4096;  // elements per task of a long row

// fn(row, begin, end) over the rows of x viewed as [rows, inner], long
// rows in blocks.
template <class F>
KILN_PK_INLINE void for_blocks(const kiln_pk_threads* threads, int64_t rows, int64_t inner, F&& fn) {
  const int64_t blocks = ceil_div(inner, kBlock);
  parallel_for_grain(threads, rows * blocks, grain_for(min64(inner, kBlock) * 4), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t row = t / blocks, b = t % blocks * kBlock;
      fn(row, b, min64(inner, b + kBlock));
    }
  });
}

template <int W>
void quantize(const kiln_pk_threads* threads, int64_t outer, int64_t channels, int64_t inner, const float* x, const float* scale,
              const void* zero, int32_t y_type, void* y) {
  for_blocks(threads, outer * channels, inner, [&](int64_t row, int64_t begin, int64_t end) {
    const int64_t c = row % channels;
    const float s = scale[c];
    const Requantize rq = Requantize::to(y_type, zero ? element(y_type, zero, c) : 0);
    const float* xr = x + row * inner;
    char* yr = static_cast<char*>(y) + row * inner;
    int64_t i = begin;
    // x / scale in float, as the reference divides float32 inputs.
    for (; i + W <= end; i += W) store_8bit<W>(y_type, yr + i, rq.vec<W>(load<W>(xr + i) / s));
    for (; i < end; ++i) store_8bit_one(y_type, yr, i, rq.one(xr[i] / s));
  });
}

// (x - zero) * scale: exact in float for 8-bit x (a product of at most 9
// and 24 significant bits, rounded once, as the reference's double is when
// it becomes float); int32 in double, likewise.
template <class T>
void dequantize(const kiln_pk_threads* threads, int64_t outer, int64_t channels, int64_t inner, const T* x, const float* scale,
                const void* zero, int32_t type, float* y) {
  for_blocks(threads, outer * channels, inner, [&](int64_t row, int64_t begin, int64_t end) {
    const int64_t c = row % channels;
    const int32_t z = zero ? element(type, zero, c) : 0;
    const float s = scale ? scale[c] : 1.0f;
    const T* xr = x + row * inner;
    float* yr = y + row * inner;
    if (sizeof(T) == 4)
      for (int64_t i = begin; i < end; ++i) yr[i] = float((double(xr[i]) - double(z)) * double(s));
    else
      for (int64_t i = begin; i < end; ++i) yr[i] = float(int32_t(xr[i]) - z) * s;
  });
}

template <int W>
void dynamic_quantize(const kiln_pk_threads* threads, int64_t count, const float* x, uint8_t* y, float* y_scale,
                      uint8_t* y_zero) {
  // The range, always including 0; a NaN is skipped, as std::min and
  // std::max skip it in the reference.
  Vec<W> lo = Vec<W>{}, hi = Vec<W>{};
  int64_t i = 0;
  for (; i + W <= count; i += W) {
    const Vec<W> v = load<W>(x + i);
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
  }
  float l = 0, h = 0;
  for (int j = 0; j < W; ++j) {
    l = lo[j] < l ? lo[j] : l;
    h = hi[j] > h ? hi[j] : h;
  }
  for (; i < count; ++i) {
    l = x[i] < l ? x[i] : l;
    h = x[i] > h ? x[i] : h;
  }
  const float scale = (h - l) / 255.0f;
  const int32_t zero = scale == 0 ? 0 : Requantize::to(KILN_PK_UINT8, 0).one(0.0f - l / scale);
  *y_scale = scale;
  *y_zero = uint8_t(zero);
  if (scale == 0) {
    for_blocks(threads, 1, count, [&](int64_t, int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) y[j] = uint8_t(zero);
    });
    return;
  }
  quantize<W>(threads, 1, 1, count, x, &scale, y_zero, KILN_PK_UINT8, y);
}

// The output's dims and each operand's element strides along them (0
// where it broadcasts).
struct Broadcast {
  int64_t rank;
  const int64_t *dims, *a_strides, *b_strides;
};

// saturate(round_half_even((sa (a - za) + sb (b - zb)) / sc) + zc), in
// double as the reference computes it; 1.5 * 2^52 added and subtracted
// rounds half to even there. The output as rows of its last dim, each row
// finding where it starts in a and b.
template <class TA, class TB, class TY>
void qadd(const kiln_pk_threads* threads, const Broadcast& s, const TA* a, double sa, int32_t za, const TB* b, double sb,
          int32_t zb, double sc, int32_t zc, TY* y) {
  const double lo = (TY(-1) < 0 ? -128.0 : 0.0) - zc, hi = (TY(-1) < 0 ? 127.0 : 255.0) - zc;
  const int64_t last = s.rank - 1, inner = s.dims[last], as = s.a_strides[last], bs = s.b_strides[last];
  int64_t rows = 1;
  for (int64_t d = 0; d < last; ++d) rows *= s.dims[d];
  for_blocks(threads, rows, inner, [&](int64_t row, int64_t begin, int64_t end) {
    int64_t ao = 0, bo = 0;
    for (int64_t d = last - 1, r = row; d >= 0; --d) {
      const int64_t at = r % s.dims[d];
      r /= s.dims[d];
      ao += at * s.a_strides[d];
      bo += at * s.b_strides[d];
    }
    const TA* ar = a + ao;
    const TB* br = b + bo;
    TY* yr = y + row * inner;
    for (int64_t i = begin; i < end; ++i) {
      double v = (sa * double(int32_t(ar[i * as]) - za) + sb * double(int32_t(br[i * bs]) - zb)) / sc;
      v = v > lo ? v : lo;
      v = v < hi ? v : hi;
      v = (v + 6755399441055744.0) - 6755399441055744.0;
      yr[i] = TY(int32_t(v) + zc);
    }
  });
}

template <class TA, class TB>
void qadd_to(const kiln_pk_threads* threads, const Broadcast& s, const TA* a, double sa, int32_t za, const TB* b, double sb,
             int32_t zb, double sc, int32_t y_type, int32_t zc, void* y) {
  if (y_type == KILN_PK_INT8)
    qadd(threads, s, a, sa, za, b, sb, zb, sc, zc, static_cast<int8_t*>(y));
  else
    qadd(threads, s, a, sa, za, b, sb, zb, sc, zc, static_cast<uint8_t*>(y));
}

template <class TA>
void qadd_b(const kiln_pk_threads* threads, const Broadcast& s, const TA* a, double sa, int32_t za, int32_t b_type, const void* b,
            double sb, int32_t zb, double sc, int32_t y_type, int32_t zc, void* y) {
  if (b_type == KILN_PK_INT8)
    qadd_to(threads, s, a, sa, za, static_cast<const int8_t*>(b), sb, zb, sc, y_type, zc, y);
  else
    qadd_to(threads, s, a, sa, za, static_cast<const uint8_t*>(b), sb, zb, sc, y_type, zc, y);
}

// Max pooling of 8-bit planes; window positions outside the input are
// skipped.
template <class T>
void max_pool(const kiln_pk_threads* threads, int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow, int64_t kh,
              int64_t kw, int64_t sh, int64_t sw, int64_t pt, int64_t pl, int64_t dh, int64_t dw, const T* x, T* y) {
  constexpr int64_t kCols = 64;
  const T lowest = T(-1) < 0 ? T(-128) : T(0);
  parallel_for_grain(threads, planes, grain_for(oh * ow * kh * kw), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const T* xp = x + p * h * w;
      T* yp = y + p * oh * ow;
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox0 = 0; ox0 < ow; ox0 += kCols) {
          const int64_t cols = min64(kCols, ow - ox0);
          T acc[kCols];
          for (int64_t l = 0; l < cols; ++l) acc[l] = lowest;
          for (int64_t r = 0; r < kh; ++r) {
            const int64_t iy = oy * sh - pt + r * dh;
            if (iy < 0 || iy >= h) continue;
            for (int64_t t = 0; t < kw; ++t) {
              const int64_t offset = t * dw - pl;
              int64_t lo = offset >= 0 ? 0 : ceil_div(-offset, sw), hi = w - 1 - offset < 0 ? 0 : (w - 1 - offset) / sw + 1;
              lo = max64(lo - ox0, 0);
              hi = min64(hi - ox0, cols);
              const T* src = xp + iy * w + ox0 * sw + offset;
              for (int64_t l = lo; l < hi; ++l) acc[l] = src[l * sw] > acc[l] ? src[l * sw] : acc[l];
            }
          }
          for (int64_t l = 0; l < cols; ++l) yp[oy * ow + ox0 + l] = acc[l];
        }
    }
  });
}

template <int W_>
struct Lanes {
  static constexpr int kW = W_;
};

template <class F>
KILN_PK_INLINE void with_width(Config cfg, F&& f) {
  if (cfg.vector_bytes >= 64)
    f(Lanes<16>{});
  else if (cfg.vector_bytes >= 32)
    f(Lanes<8>{});
  else
    f(Lanes<4>{});
}

}  // namespace
}  // namespace kiln::pk

extern "C" {

void kiln_pk_quantize(const kiln_pk_threads* threads, int64_t outer, int64_t channels, int64_t inner, const float* x,
                      const float* scale, const void* zero, int32_t y_type, void* y) {
  using namespace kiln::pk;
  with_width(target_config(),
             [&](auto lanes) { quantize<decltype(lanes)::kW>(threads, outer, channels, inner, x, scale, zero, y_type, y); });
}

void kiln_pk_dequantize(const kiln_pk_threads* threads, int64_t outer, int64_t channels, int64_t inner, int32_t x_type,
                        const void* x, const float* scale, const void* zero, float* y) {
  using namespace kiln::pk;
  if (x_type == KILN_PK_UINT8)
    dequantize(threads, outer, channels, inner, static_cast<const uint8_t*>(x), scale, zero, x_type, y);
  else if (x_type == KILN_PK_INT8)
    dequantize(threads, outer, channels, inner, static_cast<const int8_t*>(x), scale, zero, x_type, y);
  else
    dequantize(threads, outer, channels, inner, static_cast<const int32_t*>(x), scale, zero, x_type, y);
}

void kiln_pk_dynamic_quantize(const kiln_pk_threads* threads, int64_t count, const float* x, uint8_t* y, float* y_scale,
                              uint8_t* y_zero) {
  using namespace kiln::pk;
  with_width(target_config(), [&](auto lanes) { dynamic_quantize<decltype(lanes)::kW>(threads, count, x, y, y_scale, y_zero); });
}

void kiln_pk_qadd(const kiln_pk_threads* threads, int64_t rank, const int64_t* dims, const int64_t* a_strides,
                  const int64_t* b_strides, int32_t a_type, const void* a, float a_scale, const void* a_zero, int32_t b_type,
                  const void* b, float b_scale, const void* b_zero, float y_scale, int32_t y_type, const void* y_zero, void* y) {
  using namespace kiln::pk;
  if (rank < 1 || rank > KILN_PK_QADD_MAX_RANK) return;
  const Broadcast s{rank, dims, a_strides, b_strides};
  const int32_t za = zero_point(a_type, a_zero), zb = zero_point(b_type, b_zero), zc = zero_point(y_type, y_zero);
  if (a_type == KILN_PK_INT8)
    qadd_b(threads, s, static_cast<const int8_t*>(a), a_scale, za, b_type, b, b_scale, zb, y_scale, y_type, zc, y);
  else
    qadd_b(threads, s, static_cast<const uint8_t*>(a), a_scale, za, b_type, b, b_scale, zb, y_scale, y_type, zc, y);
}

void kiln_pk_max_pool2d_8bit(const kiln_pk_threads* threads, int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow,
                             int64_t kh, int64_t kw, int64_t stride_h, int64_t stride_w, int64_t pad_t, int64_t pad_l,
                             int64_t dilation_h, int64_t dilation_w, int32_t type, const void* x, void* y) {
  using namespace kiln::pk;
  if (type == KILN_PK_INT8)
    max_pool(threads, planes, h, w, oh, ow, kh, kw, stride_h, stride_w, pad_t, pad_l, dilation_h, dilation_w,
             static_cast<const int8_t*>(x), static_cast<int8_t*>(y));
  else
    max_pool(threads, planes, h, w, oh, ow, kh, kw, stride_h, stride_w, pad_t, pad_l, dilation_h, dilation_w,
             static_cast<const uint8_t*>(x), static_cast<uint8_t*>(y));
}

}  // extern "C"
