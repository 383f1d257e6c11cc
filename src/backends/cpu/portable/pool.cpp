// Max / average pooling over planes (window.hpp), and global pooling.
#include "backends/cpu/portable/config.hpp"
#include "backends/cpu/portable/parallel.hpp"
#include "backends/cpu/portable/simd.hpp"
#include "backends/cpu/portable/window.hpp"

namespace kiln::pk {
namespace {

// Max over the window, NaN-propagating; the padding is -inf, so it never
// wins. A window entirely in the padding gives -inf, as the reference
// backend does.
struct MaxOp {
  static constexpr bool kWeighted = false;
  float* y;  // output plane
  int64_t ow;

  float pad() const { return -__builtin_inff(); }
  template <int V>
  KILN_PK_INLINE Vec<V> init(const WindowRows&, int64_t, bool) const {
    return splat<V>(-__builtin_inff());
  }
  template <int V>
  KILN_PK_INLINE Vec<V> combine(Vec<V> acc, Vec<V> x) const {
    return vmax_nan<V>(acc, x);
  }
  template <int V>
  KILN_PK_INLINE void finish(const WindowRows& d, int64_t o, Vec<V> acc, int from) const {
    float* yp = y + d.oy * ow + d.c0 + o;
    if (from == 0)
      store<V>(yp, acc);
    else
      for (int l = from; l < V; ++l) yp[l] = acc[l];
  }
  KILN_PK_INLINE float init_one(const WindowRows&, int64_t) const { return -__builtin_inff(); }
  KILN_PK_INLINE float combine_one(float acc, float x) const { return max_nan(acc, x); }
  KILN_PK_INLINE void finish_one(const WindowRows& d, int64_t o, float acc) const { y[d.oy * ow + d.c0 + o] = acc; }
  void end_segment(const WindowRows&, int64_t) const {}
};

// Sum over the window (the padding adds zeros), divided per output by the
// window size or, without count_include_pad, by the taps inside the image.
struct AvgOp {
  static constexpr bool kWeighted = false;
  float* y;
  const Window* s;
  bool include_pad;

  float pad() const { return 0.0f; }
  template <int V>
  KILN_PK_INLINE Vec<V> init(const WindowRows&, int64_t, bool) const {
    return Vec<V>{};
  }
  template <int V>
  KILN_PK_INLINE Vec<V> combine(Vec<V> acc, Vec<V> x) const {
    return acc + x;
  }
  template <int V>
  KILN_PK_INLINE void finish(const WindowRows& d, int64_t o, Vec<V> acc, int from) const {
    float* yp = y + d.oy * s->ow + d.c0 + o;
    if (from == 0)
      store<V>(yp, acc);
    else
      for (int l = from; l < V; ++l) yp[l] = acc[l];
  }
  KILN_PK_INLINE float init_one(const WindowRows&, int64_t) const { return 0.0f; }
  KILN_PK_INLINE float combine_one(float acc, float x) const { return acc + x; }
  KILN_PK_INLINE void finish_one(const WindowRows& d, int64_t o, float acc) const { y[d.oy * s->ow + d.c0 + o] = acc; }
  void end_segment(const WindowRows& d, int64_t cols) const {
    float* yr = y + d.oy * s->ow + d.c0;
    if (include_pad) {
      // The lowering keeps ceil mode (windows past the trailing pads) away,
      // so every window counts kh * kw.
      const float count = float(s->kh * s->kw);
      for (int64_t o = 0; o < cols; ++o) yr[o] /= count;
      return;
    }
    for (int64_t o = 0; o < cols; ++o) {
      const int64_t start = (d.c0 + o) * s->sw - s->pl;
      const int64_t inside = d.rows * (min64(start + s->kw, s->w) - max64(start, 0));
      yr[o] = inside > 0 ? yr[o] / float(inside) : 0.0f;
    }
  }
};

template <int W>
void global_pool(const kiln_pk_threads* threads, int64_t planes, int64_t size, bool is_max, const float* x, float* y) {
  parallel_for_grain(threads, planes, grain_for(size), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const float* xp = x + p * size;
      // Four independent accumulators hide the latency; their order of
      // combination is fixed.
      constexpr int U = 4;
      int64_t i = 0;
      float result;
      if (is_max) {
        Vec<W> acc[U];
        for (int u = 0; u < U; ++u) acc[u] = splat<W>(-__builtin_inff());
        for (; i + U * W <= size; i += U * W)
          for (int u = 0; u < U; ++u) acc[u] = vmax_nan<W>(acc[u], load<W>(xp + i + u * W));
        for (; i + W <= size; i += W) acc[0] = vmax_nan<W>(acc[0], load<W>(xp + i));
        for (int u = 1; u < U; ++u) acc[0] = vmax_nan<W>(acc[0], acc[u]);
        result = hmax_nan<W>(acc[0]);
        for (; i < size; ++i) result = max_nan(result, xp[i]);
      } else {
        Vec<W> acc[U];
        for (int u = 0; u < U; ++u) acc[u] = Vec<W>{};
        for (; i + U * W <= size; i += U * W)
          for (int u = 0; u < U; ++u) acc[u] += load<W>(xp + i + u * W);
        for (; i + W <= size; i += W) acc[0] += load<W>(xp + i);
        result = hsum<W>((acc[0] + acc[1]) + (acc[2] + acc[3]));
        for (; i < size; ++i) result += xp[i];
        result = size > 0 ? result / float(size) : 0.0f;
      }
      y[p] = result;
    }
  });
}

// The window engine needs the ring to fit: a window too large for it (none
// that a network uses) is done one output at a time.
template <bool IsMax>
void pool_direct(const kiln_pk_threads* threads, int64_t planes, const Window& s, bool include_pad, const float* x, float* y) {
  parallel_for_grain(threads, planes, grain_for(s.oh * s.ow * s.kh * s.kw), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p)
      for (int64_t oy = 0; oy < s.oh; ++oy)
        for (int64_t ox = 0; ox < s.ow; ++ox) {
          float acc = IsMax ? -__builtin_inff() : 0.0f;
          int64_t inside = 0;
          for (int64_t r = 0; r < s.kh; ++r)
            for (int64_t t = 0; t < s.kw; ++t) {
              const int64_t iy = oy * s.sh - s.pt + r * s.dh, ix = ox * s.sw - s.pl + t * s.dw;
              if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
              const float v = x[(p * s.h + iy) * s.w + ix];
              acc = IsMax ? max_nan(acc, v) : acc + v;
              ++inside;
            }
          if (!IsMax) {
            const int64_t count = include_pad ? s.kh * s.kw : inside;
            acc = count > 0 ? acc / float(count) : 0.0f;
          }
          y[(p * s.oh + oy) * s.ow + ox] = acc;
        }
  });
}

template <int W>
void pool(const kiln_pk_threads* threads, int64_t planes, const Window& s, bool is_max, bool include_pad, const float* x,
          float* y) {
  if (window_segment_width(s.kh, s.kw, s.sw, s.dh, s.dw) == 0) {
    if (is_max)
      pool_direct<true>(threads, planes, s, include_pad, x, y);
    else
      pool_direct<false>(threads, planes, s, include_pad, x, y);
    return;
  }
  const int64_t in_plane = s.h * s.w, out_plane = s.oh * s.ow;
  if (is_max) {
    window_planes<W>(threads, s, planes, [&](int64_t p, const float*& xp) {
      xp = x + p * in_plane;
      return MaxOp{y + p * out_plane, s.ow};
    });
  } else {
    window_planes<W>(threads, s, planes, [&](int64_t p, const float*& xp) {
      xp = x + p * in_plane;
      return AvgOp{y + p * out_plane, &s, include_pad};
    });
  }
}

void pool_any(const kiln_pk_threads* threads, int64_t planes, const Window& s, bool is_max, bool include_pad, const float* x,
              float* y) {
  if (planes <= 0 || s.oh <= 0 || s.ow <= 0) return;
  const Config cfg = target_config();
  if (cfg.vector_bytes >= 64)
    pool<16>(threads, planes, s, is_max, include_pad, x, y);
  else if (cfg.vector_bytes >= 32)
    pool<8>(threads, planes, s, is_max, include_pad, x, y);
  else
    pool<4>(threads, planes, s, is_max, include_pad, x, y);
}

}  // namespace
}  // namespace kiln::pk

using namespace kiln::pk;

extern "C" {

void kiln_pk_max_pool2d(const kiln_pk_threads* threads, int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow, int64_t kh,
                        int64_t kw, int64_t stride_h, int64_t stride_w, int64_t pad_t, int64_t pad_l, int64_t dilation_h,
                        int64_t dilation_w, const float* x, float* y) {
  pool_any(threads, planes, Window{h, w, oh, ow, kh, kw, stride_h, stride_w, pad_t, pad_l, dilation_h, dilation_w}, true, false,
           x, y);
}

void kiln_pk_avg_pool2d(const kiln_pk_threads* threads, int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow, int64_t kh,
                        int64_t kw, int64_t stride_h, int64_t stride_w, int64_t pad_t, int64_t pad_l, int32_t count_include_pad,
                        const float* x, float* y) {
  pool_any(threads, planes, Window{h, w, oh, ow, kh, kw, stride_h, stride_w, pad_t, pad_l, 1, 1}, false, count_include_pad != 0,
           x, y);
}

void kiln_pk_global_pool(const kiln_pk_threads* threads, int64_t planes, int64_t size, int32_t is_max, const float* x, float* y) {
  const Config cfg = target_config();
  if (cfg.vector_bytes >= 64)
    global_pool<16>(threads, planes, size, is_max != 0, x, y);
  else if (cfg.vector_bytes >= 32)
    global_pool<8>(threads, planes, size, is_max != 0, x, y);
  else
    global_pool<4>(threads, planes, size, is_max != 0, x, y);
}

}  // extern "C"
