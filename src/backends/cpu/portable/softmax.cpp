// kiln_pk_softmax: x as [outer, len, inner], normalised along len. Three
// passes (max, exp and sum, scale); contiguous rows when inner == 1,
// otherwise W-wide columns of the inner axis.
#include "backends/cpu/portable/config.hpp"
#include "backends/cpu/portable/parallel.hpp"
#include "backends/cpu/portable/simd.hpp"
#include "backends/cpu/portable/vmath.hpp"

#include <math.h>

namespace kiln::pk {
namespace {

template <int W>
void softmax_row(const float* x, float* y, int64_t n, bool is_log) {
  Vec<W> mv = splat<W>(-__builtin_inff());
  int64_t i = 0;
  for (; i + W <= n; i += W) mv = vmax_nan<W>(mv, load<W>(x + i));
  float m = hmax_nan<W>(mv);
  for (; i < n; ++i) m = max_nan(m, x[i]);

  Vec<W> sv = Vec<W>{};
  i = 0;
  if (is_log) {
    for (; i + W <= n; i += W) sv += vexp<W>(load<W>(x + i) - m);
    float s = hsum<W>(sv);
    for (; i < n; ++i) s += exp_approx(x[i] - m);
    // (x - m) - log(s), not x - (m + log(s)): next to a large m, m + log(s)
    // rounds away most of log(s).
    const float log_s = logf(s);
    i = 0;
    for (; i + W <= n; i += W) store<W>(y + i, (load<W>(x + i) - m) - log_s);
    for (; i < n; ++i) y[i] = (x[i] - m) - log_s;
    return;
  }
  // The exponentials go to y and are scaled there.
  for (; i + W <= n; i += W) {
    const Vec<W> e = vexp<W>(load<W>(x + i) - m);
    store<W>(y + i, e);
    sv += e;
  }
  float s = hsum<W>(sv);
  for (; i < n; ++i) {
    y[i] = exp_approx(x[i] - m);
    s += y[i];
  }
  const float inv = 1.0f / s;
  i = 0;
  for (; i + W <= n; i += W) store<W>(y + i, load<W>(y + i) * inv);
  for (; i < n; ++i) y[i] *= inv;
}

// B vectors of columns of the inner axis, `lanes` of the last one valid.
template <int W, int B>
KILN_PK_INLINE void softmax_columns(const float* x, float* y, int64_t len, int64_t inner, bool is_log, int lanes) {
  auto ld = [&](const float* p, int b) {
    return b == B - 1 && lanes < W ? load_partial<W>(p + b * W, lanes, 0.0f) : load<W>(p + b * W);
  };
  auto st = [&](float* p, int b, Vec<W> v) {
    if (b == B - 1 && lanes < W)
      store_partial<W>(p + b * W, v, lanes);
    else
      store<W>(p + b * W, v);
  };
  Vec<W> m[B], s[B];
  for (int b = 0; b < B; ++b) m[b] = splat<W>(-__builtin_inff()), s[b] = Vec<W>{};
  for (int64_t l = 0; l < len; ++l)
    for (int b = 0; b < B; ++b) m[b] = vmax_nan<W>(m[b], ld(x + l * inner, b));
  for (int64_t l = 0; l < len; ++l)
    for (int b = 0; b < B; ++b) {
      const Vec<W> e = vexp<W>(ld(x + l * inner, b) - m[b]);
      if (!is_log) st(y + l * inner, b, e);
      s[b] += e;
    }
  if (is_log) {
    for (int b = 0; b < B; ++b)
      for (int lane = 0; lane < W; ++lane) s[b][lane] = logf(s[b][lane]);
    for (int64_t l = 0; l < len; ++l)
      for (int b = 0; b < B; ++b) st(y + l * inner, b, (ld(x + l * inner, b) - m[b]) - s[b]);
    return;
  }
  Vec<W> inv[B];
  for (int b = 0; b < B; ++b) inv[b] = 1.0f / s[b];
  for (int64_t l = 0; l < len; ++l)
    for (int b = 0; b < B; ++b) st(y + l * inner, b, ld(y + l * inner, b) * inv[b]);
}

template <int W>
void softmax(const kiln_pk_threads* threads, int64_t outer, int64_t len, int64_t inner, bool is_log, const float* x, float* y) {
  if (inner == 1) {
    parallel_for_grain(threads, outer, grain_for(len * 8), [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) softmax_row<W>(x + o * len, y + o * len, len, is_log);
    });
    return;
  }
  constexpr int B = 2, block = B * W;
  const int64_t blocks = ceil_div(inner, block);
  parallel_for_grain(threads, outer * blocks, grain_for(len * block * 8), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / blocks, j0 = (t - o * blocks) * block;
      const float* xs = x + o * len * inner + j0;
      float* ys = y + o * len * inner + j0;
      const int64_t cols = min64(block, inner - j0);
      if (cols == block) {
        softmax_columns<W, B>(xs, ys, len, inner, is_log, W);
        continue;
      }
      int64_t j = 0;
      for (; j + W <= cols; j += W) softmax_columns<W, 1>(xs + j, ys + j, len, inner, is_log, W);
      if (j < cols) softmax_columns<W, 1>(xs + j, ys + j, len, inner, is_log, int(cols - j));
    }
  });
}

}  // namespace
}  // namespace kiln::pk

extern "C" void kiln_pk_softmax(const kiln_pk_threads* threads, int64_t outer, int64_t len, int64_t inner, int32_t is_log,
                                const float* x, float* y) {
  using namespace kiln::pk;
  if (outer <= 0 || len <= 0 || inner <= 0) return;
  const Config cfg = target_config();
  if (cfg.vector_bytes >= 64)
    softmax<16>(threads, outer, len, inner, is_log != 0, x, y);
  else if (cfg.vector_bytes >= 32)
    softmax<8>(threads, outer, len, inner, is_log != 0, x, y);
  else
    softmax<4>(threads, outer, len, inner, is_log != 0, x, y);
}
