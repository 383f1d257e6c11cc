// kiln_pk_reduce: x as [outer, len, inner] reduced over len. With inner == 1
// each output is a contiguous row; otherwise W-wide columns of the inner axis
// are accumulated row after row of len.
#include "backends/cpu/portable/config.hpp"
#include "backends/cpu/portable/parallel.hpp"
#include "backends/cpu/portable/simd.hpp"
#include "backends/cpu/portable/vmath.hpp"

#include <math.h>

namespace kiln::pk {
namespace {

// What an op does to each element, how it combines, where it starts and what
// it does to the total.
template <int Op>
struct Reducer {
  static constexpr bool is_max = Op == KILN_PK_REDUCE_MAX || Op == KILN_PK_REDUCE_LOG_SUM_EXP;
  static constexpr bool is_min = Op == KILN_PK_REDUCE_MIN;
  static constexpr bool is_prod = Op == KILN_PK_REDUCE_PROD;

  static KILN_PK_INLINE float init() { return is_max ? -__builtin_inff() : is_min ? __builtin_inff() : is_prod ? 1.0f : 0.0f; }
  template <class V>
  static KILN_PK_INLINE V pre(V x) {
    if constexpr (Op == KILN_PK_REDUCE_SUM_SQUARE || Op == KILN_PK_REDUCE_L2) return x * x;
    if constexpr (Op == KILN_PK_REDUCE_L1) return x < 0.0f ? -x : x;
    return x;
  }
  template <int W>
  static KILN_PK_INLINE Vec<W> combine(Vec<W> acc, Vec<W> x) {
    if constexpr (is_max) return vmax_nan<W>(acc, x);
    if constexpr (is_min) return vmin_nan<W>(acc, x);
    if constexpr (is_prod) return acc * x;
    return acc + x;
  }
  static KILN_PK_INLINE float combine(float acc, float x) {
    if constexpr (is_max) return max_nan(acc, x);
    if constexpr (is_min) return min_nan(acc, x);
    if constexpr (is_prod) return acc * x;
    return acc + x;
  }
  template <int W>
  static KILN_PK_INLINE float horizontal(Vec<W> v) {
    if constexpr (is_max) return hmax_nan<W>(v);
    if constexpr (is_min) return hmin_nan<W>(v);
    if constexpr (is_prod) {
      float r = v[0];
      for (int l = 1; l < W; ++l) r *= v[l];
      return r;
    }
    return hsum<W>(v);
  }
  static KILN_PK_INLINE float post(float acc, int64_t len) {
    if constexpr (Op == KILN_PK_REDUCE_MEAN) return acc / float(len);
    if constexpr (Op == KILN_PK_REDUCE_L2) return sqrtf(acc);
    return acc;
  }
};

// op over n contiguous floats, U vectors in flight, combined in a fixed order.
template <int W, int Op>
KILN_PK_INLINE float reduce_row(const float* x, int64_t n) {
  using R = Reducer<Op>;
  constexpr int U = 4;
  Vec<W> acc[U];
  for (int u = 0; u < U; ++u) acc[u] = splat<W>(R::init());
  int64_t i = 0;
  for (; i + U * W <= n; i += U * W)
    for (int u = 0; u < U; ++u) acc[u] = R::template combine<W>(acc[u], R::pre(load<W>(x + i + u * W)));
  for (; i + W <= n; i += W) acc[0] = R::template combine<W>(acc[0], R::pre(load<W>(x + i)));
  acc[0] = R::template combine<W>(R::template combine<W>(acc[0], acc[1]), R::template combine<W>(acc[2], acc[3]));
  float r = R::template horizontal<W>(acc[0]);
  for (; i < n; ++i) r = R::combine(r, R::pre(x[i]));
  return r;
}

// log(sum(exp(x - max))) + max over a row; an infinite (or NaN) max is the
// result, as in the reference backend.
template <int W>
KILN_PK_INLINE float log_sum_exp_row(const float* x, int64_t n) {
  const float m = reduce_row<W, KILN_PK_REDUCE_MAX>(x, n);
  if (!(m - m == 0.0f)) return m;
  Vec<W> acc = Vec<W>{};
  int64_t i = 0;
  for (; i + W <= n; i += W) acc += vexp<W>(load<W>(x + i) - m);
  float s = hsum<W>(acc);
  for (; i < n; ++i) s += exp_approx(x[i] - m);
  return m + logf(s);
}

template <int W, int Op>
void reduce_rows(const kiln_pk_threads* threads, int64_t outer, int64_t len, const float* x, float* y) {
  parallel_for_grain(threads, outer, grain_for(len), [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      if constexpr (Op == KILN_PK_REDUCE_LOG_SUM_EXP)
        y[o] = log_sum_exp_row<W>(x + o * len, len);
      else
        y[o] = Reducer<Op>::post(reduce_row<W, Op>(x + o * len, len), len);
    }
  });
}

// Columns [j0, j0 + B * W) of the inner axis, B vectors in registers.
template <int W, int Op, int B>
KILN_PK_INLINE void reduce_columns(const float* x, int64_t len, int64_t inner, float* y) {
  using R = Reducer<Op>;
  Vec<W> acc[B];
  for (int b = 0; b < B; ++b) acc[b] = splat<W>(R::init());
  for (int64_t l = 0; l < len; ++l)
    for (int b = 0; b < B; ++b) acc[b] = R::template combine<W>(acc[b], R::pre(load<W>(x + l * inner + b * W)));
  if constexpr (Op == KILN_PK_REDUCE_LOG_SUM_EXP) {
    Vec<W> sum[B];
    for (int b = 0; b < B; ++b) sum[b] = Vec<W>{};
    for (int64_t l = 0; l < len; ++l)
      for (int b = 0; b < B; ++b) sum[b] += vexp<W>(load<W>(x + l * inner + b * W) - acc[b]);
    for (int b = 0; b < B; ++b)
      for (int lane = 0; lane < W; ++lane) {
        const float m = acc[b][lane];
        y[b * W + lane] = m - m == 0.0f ? m + logf(sum[b][lane]) : m;
      }
  } else {
    for (int b = 0; b < B; ++b)
      for (int lane = 0; lane < W; ++lane) y[b * W + lane] = R::post(acc[b][lane], len);
  }
}

template <int Op>
KILN_PK_INLINE void reduce_column_scalar(const float* x, int64_t len, int64_t inner, float* y) {
  using R = Reducer<Op>;
  float acc = R::init();
  for (int64_t l = 0; l < len; ++l) acc = R::combine(acc, R::pre(x[l * inner]));
  if constexpr (Op == KILN_PK_REDUCE_LOG_SUM_EXP) {
    if (!(acc - acc == 0.0f)) {
      *y = acc;
      return;
    }
    float s = 0.0f;
    for (int64_t l = 0; l < len; ++l) s += exp_approx(x[l * inner] - acc);
    *y = acc + logf(s);
  } else {
    *y = R::post(acc, len);
  }
}

template <int W, int Op>
void reduce_strided(const kiln_pk_threads* threads, int64_t outer, int64_t len, int64_t inner, const float* x, float* y) {
  constexpr int B = 4, block = B * W;
  const int64_t blocks = ceil_div(inner, block);
  parallel_for_grain(threads, outer * blocks, grain_for(len * block), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / blocks, j0 = (t - o * blocks) * block;
      const float* xs = x + o * len * inner + j0;
      float* ys = y + o * inner + j0;
      const int64_t cols = min64(block, inner - j0);
      if (cols == block) {
        reduce_columns<W, Op, B>(xs, len, inner, ys);
        continue;
      }
      int64_t j = 0;
      for (; j + W <= cols; j += W) reduce_columns<W, Op, 1>(xs + j, len, inner, ys + j);
      for (; j < cols; ++j) reduce_column_scalar<Op>(xs + j, len, inner, ys + j);
    }
  });
}

template <int W, int Op>
void reduce_op(const kiln_pk_threads* threads, int64_t outer, int64_t len, int64_t inner, const float* x, float* y) {
  if (inner == 1)
    reduce_rows<W, Op>(threads, outer, len, x, y);
  else
    reduce_strided<W, Op>(threads, outer, len, inner, x, y);
}

template <int W>
void reduce_width(const kiln_pk_threads* threads, int64_t outer, int64_t len, int64_t inner, int32_t op, const float* x,
                  float* y) {
  switch (op) {
    case KILN_PK_REDUCE_SUM: return reduce_op<W, KILN_PK_REDUCE_SUM>(threads, outer, len, inner, x, y);
    case KILN_PK_REDUCE_MEAN: return reduce_op<W, KILN_PK_REDUCE_MEAN>(threads, outer, len, inner, x, y);
    case KILN_PK_REDUCE_MAX: return reduce_op<W, KILN_PK_REDUCE_MAX>(threads, outer, len, inner, x, y);
    case KILN_PK_REDUCE_MIN: return reduce_op<W, KILN_PK_REDUCE_MIN>(threads, outer, len, inner, x, y);
    case KILN_PK_REDUCE_PROD: return reduce_op<W, KILN_PK_REDUCE_PROD>(threads, outer, len, inner, x, y);
    case KILN_PK_REDUCE_SUM_SQUARE: return reduce_op<W, KILN_PK_REDUCE_SUM_SQUARE>(threads, outer, len, inner, x, y);
    case KILN_PK_REDUCE_L1: return reduce_op<W, KILN_PK_REDUCE_L1>(threads, outer, len, inner, x, y);
    case KILN_PK_REDUCE_L2: return reduce_op<W, KILN_PK_REDUCE_L2>(threads, outer, len, inner, x, y);
    case KILN_PK_REDUCE_LOG_SUM_EXP: return reduce_op<W, KILN_PK_REDUCE_LOG_SUM_EXP>(threads, outer, len, inner, x, y);
    default: return;
  }
}

}  // namespace
}  // namespace kiln::pk

extern "C" void kiln_pk_reduce(const kiln_pk_threads* threads, int64_t outer, int64_t len, int64_t inner, int32_t op,
                               const float* x, float* y) {
  using namespace kiln::pk;
  if (outer <= 0 || inner <= 0) return;
  const Config cfg = target_config();
  if (cfg.vector_bytes >= 64)
    reduce_width<16>(threads, outer, len, inner, op, x, y);
  else if (cfg.vector_bytes >= 32)
    reduce_width<8>(threads, outer, len, inner, op, x, y);
  else
    reduce_width<4>(threads, outer, len, inner, op, x, y);
}
