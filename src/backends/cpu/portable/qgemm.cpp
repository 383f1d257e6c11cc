// 8-bit products for quantized models: kiln_pk_qconv2d, kiln_pk_qmatmul and
// kiln_pk_qgemm. Every product of an 8-bit activation less its zero point
// and an int8 weight is summed exactly in int32 (no 16-bit pairs that
// saturate), then requantized to 8 bits, scaled to float or kept as int32.
//
// The product is C[m x n] = A[m x k] B[k x n] as in gemm_impl.hpp, but
// smaller: B is packed into int16 slivers of NR columns (an activation less
// its zero point fits: -255..255), rows in pairs, A into int16 pairs of
// columns, and a micro-kernel keeps MR x NR int32 sums in registers, each
// step a broadcast pair of A values times a pair of sliver rows, two
// products per lane added into it (madd_pairs: pmaddwd on x86, widened
// multiply-adds elsewhere). A convolution's A is its weights and its B the
// image through im2col; a matmul's A is the activations and its B the
// weights.
#include "backends/cpu/portable/config.hpp"
#include "backends/cpu/portable/int8.hpp"
#include "backends/cpu/portable/parallel.hpp"
#include "backends/cpu/portable/testing.hpp"

namespace kiln::pk {
namespace {

constexpr int kMR = 4;
// Columns packed per task: a multiple of every variant's NR, so that the
// scratch (chunks of kNC columns) does not depend on the target.
constexpr int64_t kNC = 128;

// Where the sums go: C(i, j) plus bias(i, j) = bias[i * bias_rs + j *
// bias_cs] at y[i * ldc + j], int32 as they are, or times scale(i, j) =
// scales[i * scale_rs + j * scale_cs], requantized or (KILN_PK_FLOAT32) as
// floats.
struct Output {
  int32_t type;
  void* y;
  int64_t ldc;
  const int32_t* bias;  // or NULL
  int64_t bias_rs, bias_cs;
  const float* scales;
  int64_t scale_rs, scale_cs;
  Requantize rq;
};

// Rows of B in a sliver: k rounded up to pairs.
KILN_PK_INLINE int64_t paired(int64_t k) { return (k + 1) & ~int64_t(1); }

// Rows [i0, i0 + MR) of A (those past `m` zero) less its zero point, as
// the int16 pairs madd_pairs reads (the first value in the low half): for
// each pair of columns, MR pairs, ready to be broadcast. A(i, p) is at
// a[i * rs + p * cs] (a transposed A: rs 1).
template <class TA>
void pack_a(int32_t* __restrict dst, const TA* a, int64_t rs, int64_t cs, int32_t zero, int64_t m, int64_t k, int64_t i0) {
  for (int64_t p = 0; p < k; p += 2)
    for (int r = 0; r < kMR; ++r) {
      const int64_t i = i0 + r;
      const TA* row = a + i * rs;
      const int32_t lo = i < m ? int32_t(row[p * cs]) - zero : 0, hi = i < m && p + 1 < k ? int32_t(row[(p + 1) * cs]) - zero : 0;
      dst[p / 2 * kMR + r] = int32_t(uint32_t(lo) & 0xffffu) | int32_t(uint32_t(hi) << 16);
    }
}

// The MR x NR tile at (i0, j0) of C: `rows` and `cols` of it are real. A's
// rows packed at ap (pack_a), B's sliver at bp: paired(k) rows of NR
// columns, each pair of rows stored as NR int16 pairs (the second row of a
// last odd one zero).
template <int W, int NV>
KILN_PK_INLINE void tile(const Output& o, const int32_t* __restrict ap, const int16_t* __restrict bp, int64_t k, int64_t i0,
                         int64_t rows, int64_t j0, int64_t cols) {
  constexpr int NR = W * NV;
  VecI32<W> acc[kMR][NV];
  for (int r = 0; r < kMR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = VecI32<W>{};
  const int32_t* bq = reinterpret_cast<const int32_t*>(bp);
  for (int64_t q = 0; q < paired(k) / 2; ++q) {
    VecI32<W> b[NV];
    for (int v = 0; v < NV; ++v) b[v] = load_i32<W>(bq + q * NR + v * W);
    for (int r = 0; r < kMR; ++r) {
      const VecI32<W> av = splat_i32<W>(ap[q * kMR + r]);
      for (int v = 0; v < NV; ++v) acc[r][v] += madd_pairs<W>(av, b[v]);
    }
  }
  for (int r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    for (int v = 0; v < NV; ++v) {
      const int64_t j = j0 + v * W, n = min64(W, cols - v * W);
      if (n <= 0) break;
      VecI32<W> sum = acc[r][v];
      if (o.bias) {
        const int32_t* bp = o.bias + i * o.bias_rs + j * o.bias_cs;
        if (!o.bias_cs)
          sum += bp[0];
        else if (n == W)
          sum += load_i32<W>(bp);
        else
          for (int64_t l = 0; l < n; ++l) sum[l] += bp[l];
      }
      if (o.type == KILN_PK_INT32) {
        int32_t* yp = static_cast<int32_t*>(o.y) + i * o.ldc + j;
        if (n == W)
          __builtin_memcpy(yp, &sum, sizeof sum);
        else
          for (int64_t l = 0; l < n; ++l) yp[l] = sum[l];
        continue;
      }
      const float* sp = o.scales + i * o.scale_rs + j * o.scale_cs;
      const Vec<W> scale = o.scale_cs ? (n == W ? load<W>(sp) : load_partial<W>(sp, n, 0.0f)) : splat<W>(sp[0]);
      if (o.type == KILN_PK_FLOAT32) {
        const Vec<W> f = __builtin_convertvector(sum, Vec<W>) * scale;
        float* yp = static_cast<float*>(o.y) + i * o.ldc + j;
        if (n == W)
          __builtin_memcpy(yp, &f, sizeof f);
        else
          for (int64_t l = 0; l < n; ++l) yp[l] = f[l];
        continue;
      }
      const VecI32<W> q = o.rq.vec<W>(__builtin_convertvector(sum, Vec<W>) * scale);
      char* yp = static_cast<char*>(o.y) + i * o.ldc + j;
      if (n == W)
        store_8bit<W>(o.type, yp, q);
      else
        for (int64_t l = 0; l < n; ++l) store_8bit_one(o.type, yp, l, q[l]);
    }
  }
}

// C's columns [j0, j0 + cols) (cols <= kNC) for rows [i_begin, i_end)
// (i_begin a multiple of MR), from A packed at `ap` (row blocks of MR from
// row 0) and B at `bp` (slivers of NR columns).
template <int W, int NV>
void product_chunk(const Output& o, const int32_t* ap, const int16_t* bp, int64_t k, int64_t i_begin, int64_t i_end, int64_t j0,
                   int64_t cols) {
  constexpr int NR = W * NV;
  const int64_t block = paired(k) / 2 * kMR;
  for (int64_t s = 0; s * NR < cols; ++s)
    for (int64_t i = i_begin; i < i_end; i += kMR)
      tile<W, NV>(o, ap + i / kMR * block, bp + s * NR * paired(k), k, i, min64(kMR, i_end - i), j0 + s * NR,
                  min64(NR, cols - s * NR));
}

// --- B sources ------------------------------------------------------------------

struct ConvShape {
  int64_t c, h, w, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw;
};

// Where B(p, l) of a sliver goes: rows in pairs, each column's two values
// side by side.
KILN_PK_INLINE int64_t at(int64_t p, int64_t l, int NR) { return (p >> 1) * NR * 2 + l * 2 + (p & 1); }

// Clears the second row of a last odd pair.
KILN_PK_INLINE void pad_odd_row(int16_t* d, int64_t k, int NR) {
  if (k & 1)
    for (int64_t l = 0; l < NR; ++l) d[at(k, l, NR)] = 0;
}

// B(p, j) = x[ci, oy * sh - pt + r * dh, ox * sw - pl + t * dw] - zero for
// p = (ci * kh + r) * kw + t, j = oy * ow + ox; 0 in the padding (where x
// holds its zero point).
template <class TX>
void pack_im2col(int16_t* __restrict dst, int NR, const TX* x, int32_t zero, const ConvShape& s, int64_t j0, int64_t cols) {
  const int64_t k = s.c * s.kh * s.kw, plane = s.h * s.w;
  for (int64_t s0 = 0; s0 < cols; s0 += NR) {
    int16_t* d = dst + s0 * paired(k);
    int64_t base_y[64], base_x[64];  // NR <= 64
    const int64_t n = min64(NR, cols - s0);
    for (int64_t l = 0; l < NR; ++l) {
      const int64_t j = j0 + s0 + (l < n ? l : 0);
      base_y[l] = j / s.ow * s.sh - s.pt;
      base_x[l] = j % s.ow * s.sw - s.pl;
    }
    int64_t p = 0;
    for (int64_t ci = 0; ci < s.c; ++ci)
      for (int64_t r = 0; r < s.kh; ++r)
        for (int64_t t = 0; t < s.kw; ++t, ++p) {
          const TX* xc = x + ci * plane;
          for (int64_t l = 0; l < NR; ++l) {
            const int64_t iy = base_y[l] + r * s.dh, ix = base_x[l] + t * s.dw;
            const bool inside = l < n && iy >= 0 && iy < s.h && ix >= 0 && ix < s.w;
            d[at(p, l, NR)] = inside ? int16_t(int32_t(xc[iy * s.w + ix]) - zero) : int16_t(0);
          }
        }
    pad_odd_row(d, k, NR);
  }
}

// A 1x1 convolution of stride 1 without padding: B is x itself.
template <class TX>
void pack_rows(int16_t* __restrict dst, int NR, const TX* x, int64_t ldx, int32_t zero, int64_t k, int64_t j0, int64_t cols) {
  for (int64_t s0 = 0; s0 < cols; s0 += NR) {
    int16_t* d = dst + s0 * paired(k);
    const int64_t n = min64(NR, cols - s0);
    for (int64_t p = 0; p < k; ++p) {
      const TX* src = x + p * ldx + j0 + s0;
      int16_t* row = d + (p >> 1) * NR * 2 + (p & 1);
      if (n == NR)
        for (int64_t l = 0; l < NR; ++l) row[l * 2] = int16_t(int32_t(src[l]) - zero);
      else
        for (int64_t l = 0; l < NR; ++l) row[l * 2] = l < n ? int16_t(int32_t(src[l]) - zero) : int16_t(0);
    }
    pad_odd_row(d, k, NR);
  }
}

// --- depthwise ------------------------------------------------------------------

// One output channel of a depthwise convolution straight from its input
// plane: each row of sums is built tap by tap over the columns the tap
// keeps inside the image.
template <int W, class TX>
void depthwise_plane(const Output& o, int64_t channel, const TX* x, int32_t zero, const int8_t* w, const ConvShape& s,
                     int64_t out_row0) {
  constexpr int64_t kCols = 64;
  int32_t acc[kCols];
  const int32_t bias = o.bias ? o.bias[channel] : 0;
  for (int64_t oy = 0; oy < s.oh; ++oy)
    for (int64_t ox0 = 0; ox0 < s.ow; ox0 += kCols) {
      const int64_t cols = min64(kCols, s.ow - ox0);
      for (int64_t l = 0; l < cols; ++l) acc[l] = bias;
      for (int64_t r = 0; r < s.kh; ++r) {
        const int64_t iy = oy * s.sh - s.pt + r * s.dh;
        if (iy < 0 || iy >= s.h) continue;
        const TX* row = x + iy * s.w;
        for (int64_t t = 0; t < s.kw; ++t) {
          const int32_t wv = w[r * s.kw + t];
          const int64_t offset = t * s.dw - s.pl;  // ix = ox * sw + offset
          // Columns whose ix lies in [0, w).
          int64_t lo = offset >= 0 ? 0 : ceil_div(-offset, s.sw), hi = s.w - 1 - offset < 0 ? 0 : (s.w - 1 - offset) / s.sw + 1;
          lo = max64(lo - ox0, 0);
          hi = min64(hi - ox0, cols);
          const TX* src = row + ox0 * s.sw + offset;
          if (s.sw == 1)
            for (int64_t l = lo; l < hi; ++l) acc[l] += wv * (int32_t(src[l]) - zero);
          else
            for (int64_t l = lo; l < hi; ++l) acc[l] += wv * (int32_t(src[l * s.sw]) - zero);
        }
      }
      const int64_t at = (out_row0 + oy) * s.ow + ox0;
      if (o.type == KILN_PK_INT32) {
        for (int64_t l = 0; l < cols; ++l) static_cast<int32_t*>(o.y)[at + l] = acc[l];
        continue;
      }
      const float scale = o.scales[channel * o.scale_rs];
      int64_t l = 0;
      for (; l + W <= cols; l += W)
        store_8bit<W>(o.type, static_cast<char*>(o.y) + at + l,
                      o.rq.vec<W>(__builtin_convertvector(load_i32<W>(acc + l), Vec<W>) * scale));
      for (; l < cols; ++l) store_8bit_one(o.type, o.y, at + l, o.rq.one(float(acc[l]) * scale));
    }
}

// Scratch of the 8-bit products: A packed (int32 pairs, rows in blocks of
// MR), then B (int16 slivers, columns in chunks of kNC).
KILN_PK_INLINE int64_t packed_a_ints(int64_t groups, int64_t rows, int64_t k) {
  return groups * round_up(rows, kMR) * paired(k) / 2;
}
KILN_PK_INLINE int64_t packed_b_shorts(int64_t groups, int64_t cols, int64_t k) {
  return groups * ceil_div(cols, kNC) * kNC * paired(k);
}

template <int W, int NV, class TX>
void qconv(const kiln_pk_threads* threads, int64_t n, int64_t c, int64_t k, int64_t group, const ConvShape& s, const TX* x,
           int32_t x_zero, const int8_t* weights, Output o, void* scratch) {
  constexpr int NR = W * NV;
  const int64_t cg = c / group, kg = k / group, kk = cg * s.kh * s.kw, cols = s.oh * s.ow;
  const int64_t in_image = c * s.h * s.w, out_image = k * cols;
  if (cg == 1 && kg == 1) {  // depthwise: no product, no scratch
    parallel_for_grain(threads, n * k, grain_for(cols * s.kh * s.kw * 2), [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const int64_t img = p / k, ch = p % k;
        depthwise_plane<W>(o, ch, x + img * in_image + ch * s.h * s.w, x_zero, weights + ch * s.kh * s.kw, s, p * s.oh);
      }
    });
    return;
  }
  const bool plain = s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.pt == 0 && s.pl == 0 && s.oh == s.h && s.ow == s.w;
  const int64_t chunks = ceil_div(cols, kNC), blocks = ceil_div(kg, kMR), block = paired(kk) / 2 * kMR;
  int32_t* pa = static_cast<int32_t*>(scratch);
  int16_t* packed = reinterpret_cast<int16_t*>(pa + packed_a_ints(group, kg, kk));
  // The weights once for every image.
  parallel_for_grain(threads, group * blocks, grain_for(kMR * kk), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      pack_a(pa + t * block, weights + t / blocks * kg * kk, kk, 1, 0, kg, kk, t % blocks * kMR);
  });
  // Row blocks of C per task: whole ones, about 64 rows.
  const int64_t row_blocks = ceil_div(kg, 16 * kMR);
  for (int64_t img = 0; img < n; ++img) {
    const TX* xi = x + img * in_image;
    parallel_for_grain(threads, group * chunks, grain_for(kk * kNC * 4), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const int64_t g = t / chunks, j0 = t % chunks * kNC;
        int16_t* dst = packed + t * kNC * paired(kk);
        const TX* xg = xi + g * cg * s.h * s.w;
        if (plain)
          pack_rows(dst, NR, xg, cols, x_zero, kk, j0, min64(kNC, cols - j0));
        else
          pack_im2col(dst, NR, xg, x_zero, s, j0, min64(kNC, cols - j0));
      }
    });
    parallel_for_grain(
        threads, group * chunks * row_blocks, grain_for(kg * kk * kNC / row_blocks), [&](int64_t begin, int64_t end) {
          for (int64_t t = begin; t < end; ++t) {
            const int64_t rb = t % row_blocks, chunk = t / row_blocks, g = chunk / chunks, j0 = chunk % chunks * kNC;
            const int64_t rows_per = ceil_div(blocks, row_blocks) * kMR;
            const int64_t i_begin = rb * rows_per, i_end = min64(kg, i_begin + rows_per);
            if (i_begin >= i_end) continue;
            Output og = o;
            const int64_t elem = o.type == KILN_PK_INT32 ? 4 : 1;
            og.y = static_cast<char*>(o.y) + (img * out_image + g * kg * cols) * elem;
            if (og.bias) og.bias += g * kg;
            og.scales += g * kg * o.scale_rs;
            product_chunk<W, NV>(og, pa + g * blocks * block, packed + chunk * kNC * paired(kk), kk, i_begin, i_end, j0,
                                 min64(kNC, cols - j0));
          }
        });
  }
}

// A(i, p) at a[i * a_rs + p * a_cs].
template <int W, int NV, class TA>
void qmatmul(const kiln_pk_threads* threads, int64_t m, int64_t n, int64_t k, const TA* a, int64_t a_rs, int64_t a_cs,
             int32_t a_zero, const int8_t* b, const Output& o, void* scratch) {
  constexpr int NR = W * NV;
  const int64_t chunks = ceil_div(n, kNC), blocks = ceil_div(m, kMR), block = paired(k) / 2 * kMR;
  int32_t* pa = static_cast<int32_t*>(scratch);
  int16_t* packed = reinterpret_cast<int16_t*>(pa + packed_a_ints(1, m, k));
  parallel_for_grain(threads, blocks, grain_for(kMR * k), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) pack_a(pa + t * block, a, a_rs, a_cs, a_zero, m, k, t * kMR);
  });
  parallel_for_grain(threads, chunks, grain_for(k * kNC * 4), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      pack_rows(packed + t * kNC * paired(k), NR, b, n, 0, k, t * kNC, min64(kNC, n - t * kNC));
  });
  const int64_t row_blocks = ceil_div(m, 8 * kMR);
  parallel_for_grain(threads, chunks * row_blocks, grain_for(8 * kMR * k * kNC), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t rb = t % row_blocks, chunk = t / row_blocks;
      const int64_t i_begin = rb * 8 * kMR, i_end = min64(m, i_begin + 8 * kMR);
      product_chunk<W, NV>(o, pa, packed + chunk * kNC * paired(k), k, i_begin, i_end, chunk * kNC, min64(kNC, n - chunk * kNC));
    }
  });
}

template <int W_, int NV_>
struct IntVariant {
  static constexpr int kW = W_, kNV = NV_;
};

// The variant for the target: W int32 lanes, NV vectors of sums per row
// (8 or 16 accumulators, by register count).
template <class F>
KILN_PK_INLINE void with_int_variant(Config cfg, F&& f) {
  if (cfg.vector_bytes >= 64) {
    f(IntVariant<16, 4>{});
  } else if (cfg.vector_bytes >= 32) {
    if (cfg.vector_registers >= 32)
      f(IntVariant<8, 4>{});
    else
      f(IntVariant<8, 2>{});
  } else {
    if (cfg.vector_registers >= 32)
      f(IntVariant<4, 4>{});
    else
      f(IntVariant<4, 2>{});
  }
}

Output output_of(int32_t y_type, const void* y_zero, void* y, int64_t ldc, const int32_t* bias, int64_t bias_rs, int64_t bias_cs,
                 const float* scales, int64_t rs, int64_t cs) {
  Output o{y_type, y, ldc, bias, bias_rs, bias_cs, scales, rs, cs, {}};
  if (y_type == KILN_PK_UINT8 || y_type == KILN_PK_INT8) o.rq = Requantize::to(y_type, zero_point(y_type, y_zero));
  return o;
}

void qgemm_with_config(Config cfg, const kiln_pk_threads* threads, int64_t m, int64_t n, int64_t k, int32_t trans_a,
                       int32_t a_type, const void* a, const void* a_zero, const int8_t* b, const int32_t* bias, int64_t bias_rs,
                       int64_t bias_cs, const float* scales, int64_t scale_count, int32_t y_type, const void* y_zero, void* y,
                       void* scratch) {
  if (m <= 0 || n <= 0) return;
  const Output o = output_of(y_type, y_zero, y, n, bias, bias_rs, bias_cs, scales, 0, scale_count > 1 ? 1 : 0);
  const int32_t zero = zero_point(a_type, a_zero);
  const int64_t a_rs = trans_a ? 1 : k, a_cs = trans_a ? m : 1;
  with_int_variant(cfg, [&](auto v) {
    constexpr int W = decltype(v)::kW, NV = decltype(v)::kNV;
    if (a_type == KILN_PK_INT8)
      qmatmul<W, NV>(threads, m, n, k, static_cast<const int8_t*>(a), a_rs, a_cs, zero, b, o, scratch);
    else
      qmatmul<W, NV>(threads, m, n, k, static_cast<const uint8_t*>(a), a_rs, a_cs, zero, b, o, scratch);
  });
}

}  // namespace

void qconv2d_with_config(Config cfg, const kiln_pk_threads* threads, int64_t n, int64_t c, int64_t h, int64_t w, int64_t k,
                         int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t stride_h, int64_t stride_w, int64_t pad_t,
                         int64_t pad_l, int64_t dilation_h, int64_t dilation_w, int64_t group, int32_t x_type, const void* x,
                         const void* x_zero, const int8_t* weights, const int32_t* bias, const float* scales, int64_t scale_count,
                         int32_t y_type, const void* y_zero, void* y, void* scratch) {
  if (n <= 0 || k <= 0 || oh <= 0 || ow <= 0 || group <= 0) return;
  const ConvShape s{c / group, h, w, oh, ow, kh, kw, stride_h, stride_w, pad_t, pad_l, dilation_h, dilation_w};
  const Output o = output_of(y_type, y_zero, y, oh * ow, bias, 1, 0, scales, scale_count > 1 ? 1 : 0, 0);
  const int32_t zero = zero_point(x_type, x_zero);
  with_int_variant(cfg, [&](auto v) {
    constexpr int W = decltype(v)::kW, NV = decltype(v)::kNV;
    if (x_type == KILN_PK_INT8)
      qconv<W, NV>(threads, n, c, k, group, s, static_cast<const int8_t*>(x), zero, weights, o, scratch);
    else
      qconv<W, NV>(threads, n, c, k, group, s, static_cast<const uint8_t*>(x), zero, weights, o, scratch);
  });
}

void qmatmul_with_config(Config cfg, const kiln_pk_threads* threads, int64_t m, int64_t n, int64_t k, int32_t a_type,
                         const void* a, const void* a_zero, const int8_t* b, const float* scales, int64_t scale_count,
                         int32_t y_type, const void* y_zero, void* y, void* scratch) {
  qgemm_with_config(cfg, threads, m, n, k, 0, a_type, a, a_zero, b, nullptr, 0, 0, scales, scale_count, y_type, y_zero, y,
                    scratch);
}

}  // namespace kiln::pk

extern "C" {

void kiln_pk_qconv2d(const kiln_pk_threads* threads, int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t oh,
                     int64_t ow, int64_t kh, int64_t kw, int64_t stride_h, int64_t stride_w, int64_t pad_t, int64_t pad_l,
                     int64_t dilation_h, int64_t dilation_w, int64_t group, int32_t x_type, const void* x, const void* x_zero,
                     const int8_t* weights, const int32_t* bias, const float* scales, int64_t scale_count, int32_t y_type,
                     const void* y_zero, void* y, void* scratch) {
  kiln::pk::qconv2d_with_config(kiln::pk::target_config(), threads, n, c, h, w, k, oh, ow, kh, kw, stride_h, stride_w, pad_t,
                                pad_l, dilation_h, dilation_w, group, x_type, x, x_zero, weights, bias, scales, scale_count,
                                y_type, y_zero, y, scratch);
}

size_t kiln_pk_qconv2d_scratch_bytes(int64_t c, int64_t k, int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t group) {
  using namespace kiln::pk;
  if (k <= 0 || oh <= 0 || ow <= 0 || group <= 0) return 0;
  if (c == group && k == group) return 0;  // depthwise
  const int64_t kk = c / group * kh * kw;
  return size_t(packed_a_ints(group, k / group, kk)) * sizeof(int32_t) +
         size_t(packed_b_shorts(group, oh * ow, kk)) * sizeof(int16_t);
}

void kiln_pk_qmatmul(const kiln_pk_threads* threads, int64_t m, int64_t n, int64_t k, int32_t a_type, const void* a,
                     const void* a_zero, const int8_t* b, const float* scales, int64_t scale_count, int32_t y_type,
                     const void* y_zero, void* y, void* scratch) {
  kiln::pk::qmatmul_with_config(kiln::pk::target_config(), threads, m, n, k, a_type, a, a_zero, b, scales, scale_count, y_type,
                                y_zero, y, scratch);
}

void kiln_pk_qgemm(const kiln_pk_threads* threads, int64_t m, int64_t n, int64_t k, int32_t trans_a, int32_t a_type,
                   const void* a, const void* a_zero, const int8_t* b, const int32_t* bias, int64_t bias_rs, int64_t bias_cs,
                   const float* scales, int64_t scale_count, int32_t y_type, const void* y_zero, void* y, void* scratch) {
  kiln::pk::qgemm_with_config(kiln::pk::target_config(), threads, m, n, k, trans_a, a_type, a, a_zero, b, bias, bias_rs, bias_cs,
                              scales, scale_count, y_type, y_zero, y, scratch);
}

size_t kiln_pk_qmatmul_scratch_bytes(int64_t m, int64_t n, int64_t k) {
  using namespace kiln::pk;
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  return size_t(packed_a_ints(1, m, k)) * sizeof(int32_t) + size_t(packed_b_shorts(1, n, k)) * sizeof(int16_t);
}

}  // extern "C"
