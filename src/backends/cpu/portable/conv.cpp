// kiln_pk_conv2d: 1x1 convolutions as plain products, depthwise ones as a
// direct kernel, everything else as a product whose B operand is the image
// seen through im2col, materialised sliver by sliver straight into the
// packed layout (so the scratch holds packed panels, never a whole im2col
// matrix).
#include "backends/cpu/portable/gemm_matrix.hpp"
#include "backends/cpu/portable/testing.hpp"
#include "backends/cpu/portable/window.hpp"

namespace kiln::pk {
namespace {

struct ConvShape {
  int64_t c, h, w;  // input channels of one group, input plane
  int64_t oh, ow;
  int64_t kh, kw, sh, sw, pt, pl, dh, dw;
};

// Valid output columns [lo, hi) for which ix = ox * stride + offset lies in
// [0, w), clamped to [0, n).
KILN_PK_INLINE void valid_range(int64_t offset, int64_t stride, int64_t w, int64_t n, int64_t& lo, int64_t& hi) {
  if (stride == 2) {  // stride-2 stems pack rows by the thousand: shifts, not divisions
    lo = offset >= 0 ? 0 : (1 - offset) >> 1;
    hi = w - 1 - offset < 0 ? 0 : ((w - 1 - offset) >> 1) + 1;
  } else {
    lo = offset >= 0 ? 0 : ceil_div(-offset, stride);
    hi = w - 1 - offset < 0 ? 0 : (w - 1 - offset) / stride + 1;
  }
  if (hi > n) hi = n;
  if (lo > hi) lo = hi;
}

// B(p, j) = x[ci, oy * sh - pt + r * dh, ox * sw - pl + t * dw] for
// p = (ci * kh + r) * kw + t and j = oy * ow + ox, zero in the padding.
// W: the vector width stride-2 rows are deinterleaved with.
template <int W>
struct Im2colB {
  const float* x;  // this image's first channel of the group
  ConvShape s;

  template <int NRE>
  void pack(float* __restrict dst, int64_t p0, int64_t kc, int64_t j0, int64_t cols) const {
    // The sliver's columns as runs that stay within one output row.
    struct Run {
      int64_t col, len, oy, ox;
    } runs[NRE];
    int nruns = 0;
    for (int64_t col = 0, oy = j0 / s.ow, ox = j0 % s.ow; col < cols; ++oy, ox = 0) {
      const int64_t len = min64(cols - col, s.ow - ox);
      runs[nruns++] = Run{col, len, oy, ox};
      col += len;
    }
    const int64_t taps = s.kh * s.kw;
    int64_t ci = p0 / taps, r = p0 % taps / s.kw, t = p0 % s.kw;
    // Stride 1 and as many output columns as input ones (the "same" padded
    // convolutions): consecutive outputs read consecutive inputs even across
    // rows, so a sliver row whose rows are all inside the image is one copy,
    // after which the few columns that the tap puts in the left or right
    // padding are cleared.
    const bool linear = s.sh == 1 && s.sw == 1 && s.ow == s.w;
    auto copy_linear = [&](float* d, const float* plane) {
      const int64_t first_iy = runs[0].oy - s.pt + r * s.dh, last_iy = runs[nruns - 1].oy - s.pt + r * s.dh;
      const int64_t start = first_iy * s.w + runs[0].ox - s.pl + t * s.dw;
      if (first_iy < 0 || last_iy >= s.h || start < 0 || start + cols > s.h * s.w) return false;
      if (cols == NRE)
        __builtin_memcpy(d, plane + start, sizeof(float) * NRE);
      else
        memcpy(d, plane + start, sizeof(float) * size_t(cols));
      for (int q = 0; q < nruns; ++q) {
        const int64_t ix0 = runs[q].ox - s.pl + t * s.dw;
        float* dd = d + runs[q].col;
        for (int64_t j = 0; j < -ix0 && j < runs[q].len; ++j) dd[j] = 0.0f;
        for (int64_t j = max64(s.w - ix0, 0); j < runs[q].len; ++j) dd[j] = 0.0f;
      }
      return true;
    };
    auto copy_runs = [&](float* d, const float* plane) {
      for (int q = 0; q < nruns; ++q) {
        const Run& run = runs[q];
        float* dd = d + run.col;
        const int64_t iy = run.oy * s.sh - s.pt + r * s.dh;
        if (iy < 0 || iy >= s.h) {
          for (int64_t j = 0; j < run.len; ++j) dd[j] = 0.0f;
          continue;
        }
        const float* row = plane + iy * s.w;
        const int64_t ix0 = run.ox * s.sw - s.pl + t * s.dw;
        int64_t lo, hi;
        if (s.sw == 1) {
          lo = min64(max64(-ix0, 0), run.len);
          hi = max64(min64(s.w - ix0, run.len), lo);
        } else {
          valid_range(ix0, s.sw, s.w, run.len, lo, hi);
        }
        for (int64_t j = 0; j < lo; ++j) dd[j] = 0.0f;
        int64_t j = lo;
        if (s.sw == 1) {
          memcpy(dd + lo, row + ix0 + lo, sizeof(float) * size_t(hi - lo));
          j = hi;
        } else if (s.sw == 2) {
          // The even lanes of vector pairs (stride-2 stems), while the pair stays in the row.
          for (; j + W <= hi && ix0 + 2 * (j + W) <= s.w; j += W)
            store<W>(dd + j, even_lanes<W>(load<W>(row + ix0 + 2 * j), load<W>(row + ix0 + 2 * j + W)));
        }
        for (; j < hi; ++j) dd[j] = row[ix0 + j * s.sw];
        for (int64_t j = hi; j < run.len; ++j) dd[j] = 0.0f;
      }
    };
    for (int64_t p = 0; p < kc; ++p) {
      float* d = dst + p * NRE;
      const float* plane = x + ci * s.h * s.w;
      if (!linear || !copy_linear(d, plane)) copy_runs(d, plane);
      for (int64_t j = cols; j < NRE; ++j) d[j] = 0.0f;
      if (++t == s.kw) {
        t = 0;
        if (++r == s.kh) r = 0, ++ci;
      }
    }
  }
};

// Depthwise (one input channel per group, a few outputs per group) on the
// window engine: each output is bias and residual, then the taps in (r, t)
// order (a tap in the padding adds an exact zero), then the activation.
struct DepthwiseOp {
  static constexpr bool kWeighted = true;
  const float* w;    // this output channel's kh x kw weights
  const float* res;  // residual plane or NULL (may be y)
  float* y;          // output plane
  int64_t ow, kw;
  float bias;
  Activation act;

  float pad() const { return 0.0f; }
  float weight(int64_t r, int64_t t) const { return w[r * kw + t]; }
  // Lanes of an overlapping vector that are already finished may read a
  // residual that is their own output by now: finish() does not store them.
  template <int V>
  KILN_PK_INLINE Vec<V> init(const WindowRows& d, int64_t o, bool /*overlap*/) const {
    Vec<V> acc = splat<V>(bias);
    if (res) acc += load<V>(res + d.oy * ow + d.c0 + o);
    return acc;
  }
  template <int V>
  KILN_PK_INLINE Vec<V> combine(Vec<V> acc, Vec<V> x, float wv) const {
    return acc + x * wv;
  }
  template <int V>
  KILN_PK_INLINE void finish(const WindowRows& d, int64_t o, Vec<V> acc, int from) const {
    const Vec<V> v = activate<V>(acc, act);
    float* yp = y + d.oy * ow + d.c0 + o;
    if (from == 0)
      store<V>(yp, v);
    else
      for (int l = from; l < V; ++l) yp[l] = v[l];
  }
  KILN_PK_INLINE float init_one(const WindowRows& d, int64_t o) const { return res ? bias + res[d.oy * ow + d.c0 + o] : bias; }
  KILN_PK_INLINE float combine_one(float acc, float x, float wv) const { return acc + x * wv; }
  KILN_PK_INLINE void finish_one(const WindowRows& d, int64_t o, float acc) const {
    y[d.oy * ow + d.c0 + o] = activate(acc, act);
  }
  void end_segment(const WindowRows&, int64_t) const {}
};

template <int W>
void depthwise(const kiln_pk_threads* threads, int64_t n, int64_t c, int64_t k, const ConvShape& s, const float* x,
               const float* weights, const float* bias, const float* residual, float* y, const Activation& act) {
  const int64_t kg = k / c, in_plane = s.h * s.w, out_plane = s.oh * s.ow;
  const Window win{s.h, s.w, s.oh, s.ow, s.kh, s.kw, s.sh, s.sw, s.pt, s.pl, s.dh, s.dw};
  window_planes<W>(threads, win, n * k, [&](int64_t plane, const float*& xp) {
    const int64_t img = plane / k, o = plane - img * k;
    xp = x + (img * c + o / kg) * in_plane;
    return DepthwiseOp{weights + o * s.kh * s.kw,
                       residual ? residual + plane * out_plane : nullptr,
                       y + plane * out_plane,
                       s.ow,
                       s.kw,
                       bias ? bias[o] : 0.0f,
                       act};
  });
}

// Depthwise with stride S of 1 or 2 (mobile networks' 3x3 and 5x5): the
// input is split by row and column parity into S x S planes of output-sized
// rows, P(a, b)[u][v] = x[S u + a][S v + b], so that tap (r, t), with
// r - pt = S qr + a and t - pl = S qc + b, reads P(a, b)[oy + qr][ox + qc]:
// for a band of output rows that is one contiguous read, shifted, for every
// output of the band, across its rows. Where ox + qc leaves [0, ow) the
// read lands in a neighbouring row, so that tap column's sum is masked; this
// is only right when those columns are padding, hence S * ow >= w. The
// planes are rebuilt per band, with zero rows outside the image. This beats
// the row engine most on small planes (14x14, 7x7), where per-row work
// dominated. Outputs go two vectors at a time.
constexpr int64_t kFlatBand = 1024;  // outputs per band (whole rows, at least one)
constexpr int64_t kFlatMaxWidth = 128;
constexpr int64_t kFlatMaxTaps = 5;                   // kh and kw
constexpr int64_t kFlatExtraRows = kFlatMaxTaps - 1;  // rows a band reads beyond its own, per plane
constexpr int64_t kFlatMargin = kFlatMaxTaps + 2 * 16;

template <int S>
constexpr int64_t flat_buffer_floats() {
  return S * S * (kFlatBand / S + kFlatExtraRows * kFlatMaxWidth / S + kFlatMargin);
}

KILN_PK_INLINE int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

bool is_flat_depthwise(const ConvShape& s) {
  return (s.sh == 1 || s.sh == 2) && s.sw == s.sh && s.dh == 1 && s.dw == 1 && s.sw * s.ow >= s.w && s.w <= kFlatMaxWidth &&
         s.kh <= kFlatMaxTaps && s.kw <= kFlatMaxTaps && s.pt >= 0 && s.pl >= 0 && s.pt < s.kh && s.pl < s.kw;
}

template <int K>
struct ActKind {
  static constexpr int kind = K;
};

// Byte masks of the tap columns that can leave a row, per band position.
constexpr int64_t kFlatMaskLength = kFlatBand + kFlatMaxWidth + 2 * 16;

// KH / KW: the window when known at compile time (0: s.kh / s.kw); P: the
// top and left pads (-1: s.pt / s.pl).
template <int W, int S, int KH, int KW, int P>
struct FlatPlane {
  const ConvShape& s;
  // masks[mask_slot(qc) * kFlatMaskLength + j]: -1 where band position j's
  // output column plus qc stays in [0, ow), else 0.
  const int8_t* masks;
  float* buf;          // flat_buffer_floats<S>()
  const float* x_end;  // the end of the input tensor: no read may pass it

  KILN_PK_INLINE int64_t kh() const { return KH ? KH : s.kh; }
  KILN_PK_INLINE int64_t kw() const { return KW ? KW : s.kw; }
  KILN_PK_INLINE int64_t pt() const { return P >= 0 ? P : s.pt; }
  KILN_PK_INLINE int64_t pl() const { return P >= 0 ? P : s.pl; }
  int64_t qr_lo() const { return floor_div(-pt(), S); }
  int64_t qc_lo() const { return floor_div(-pl(), S); }
  int64_t qc_hi() const { return floor_div(kw() - 1 - pl(), S); }
  // The tap column offsets other than 0, at most kFlatMaxTaps - 1 of them.
  int64_t mask_slot(int64_t qc) const { return qc - qc_lo() - (qc > 0 ? 1 : 0); }
  // Rows of each plane a band of `rows` output rows reads.
  int64_t plane_rows(int64_t rows) const { return rows + floor_div(kh() - 1 - pt(), S) - qr_lo(); }
  int64_t lead() const { return -qc_lo(); }
  // Output rows per band (see kFlatBand).
  int64_t band_rows() const { return max64(1, kFlatBand / S / s.ow); }
  int64_t plane_floats(int64_t rows) const { return lead() + plane_rows(rows) * s.ow + kFlatMargin; }

  // Outputs j .. j + count (count <= NB * W) of the band; base[a * S + b] is
  // plane (a, b) at the band's first output.
  // ACT: the activation's kind when known at compile time (-1: op.act's).
  template <int NB, int ACT>
  KILN_PK_INLINE void vectors(const float* const* base, const DepthwiseOp& op, float* y0, const float* res0, int64_t j,
                              int64_t count) const {
    Vec<W> out[NB];
    for (int b = 0; b < NB; ++b) {
      out[b] = splat<W>(op.bias);
      const int64_t n = min64(W, count - b * W);
      if (res0 && n > 0) out[b] += n == W ? load<W>(res0 + j + b * W) : load_partial<W>(res0 + j + b * W, n, 0.0f);
    }
    for (int64_t t = 0; t < kw(); ++t) {
      const int64_t qc = floor_div(t - pl(), S), pb = t - pl() - S * qc;
      Vec<W> acc[NB];
      for (int b = 0; b < NB; ++b) acc[b] = Vec<W>{};
      for (int64_t r = 0; r < kh(); ++r) {
        const int64_t qr = floor_div(r - pt(), S), pa = r - pt() - S * qr;
        const float* xp = base[pa * S + pb] + j + qr * s.ow + qc;
        const float wv = op.w[r * kw() + t];
        for (int b = 0; b < NB; ++b) acc[b] += load<W>(xp + b * W) * wv;
      }
      if (qc == 0) {
        for (int b = 0; b < NB; ++b) out[b] += acc[b];
        continue;
      }
      const int8_t* m = masks + mask_slot(qc) * kFlatMaskLength + j;
      for (int b = 0; b < NB; ++b) out[b] += keep<W>(acc[b], m + b * W);
    }
    for (int b = 0; b < NB; ++b) {
      const Vec<W> v = activate<W>(out[b], ACT >= 0 ? Activation{ACT, op.act.alpha, op.act.beta} : op.act);
      const int64_t n = min64(W, count - b * W);
      if (n == W)
        store<W>(y0 + j + b * W, v);
      else if (n > 0)
        store_partial<W>(y0 + j + b * W, v, n);
    }
  }

  // Planes (a, 0 .. S) for output rows oy0 .. oy0 + rows into dst[b], from
  // their lead. With `pads` false the zeros around the image's rows (lead,
  // rows outside the image, margin) are taken as already there: they sit
  // where the previous plane's fill put them, the band being the same.
  void fill(float* const* dst_planes, const float* xp, int64_t a, int64_t oy0, int64_t rows, bool pads) const {
    const int64_t u0 = oy0 + qr_lo(), urows = plane_rows(rows);
    float* dst[S];
    for (int b = 0; b < S; ++b) {
      if (pads) memset(dst_planes[b], 0, sizeof(float) * size_t(lead()));
      dst[b] = dst_planes[b] + lead();
    }
    if (S == 1 && s.ow == s.w) {
      // Stride 1, as many columns as the input: the rows inside the image
      // are one block.
      const int64_t in_lo = min64(max64(u0, 0), u0 + urows), in_hi = max64(min64(u0 + urows, s.h), in_lo);
      float* d = dst[0];
      memcpy(d + (in_lo - u0) * s.w, xp + in_lo * s.w, sizeof(float) * size_t((in_hi - in_lo) * s.w));
      if (pads) {
        memset(d, 0, sizeof(float) * size_t((in_lo - u0) * s.w));
        memset(d + (in_hi - u0) * s.w, 0, sizeof(float) * size_t((u0 + urows - in_hi) * s.w + kFlatMargin));
      }
      return;
    }
    // Stride 2: where the whole vector pairs end, and from there which
    // lanes hold a column of the row (the others are zeroed).
    const int64_t tail = S == 2 ? W * min64(s.w / (2 * W), s.ow / W) : 0;
    int8_t keep_even[S == 2 ? kFlatMaxWidth + W : 1], keep_odd[S == 2 ? kFlatMaxWidth + W : 1];
    if constexpr (S == 2)
      for (int64_t v = tail; v < s.ow + W - 1 && v - tail < kFlatMaxWidth + W; ++v) {
        keep_even[v - tail] = v < s.ow && 2 * v < s.w ? -1 : 0;
        keep_odd[v - tail] = v < s.ow && 2 * v + 1 < s.w ? -1 : 0;
      }
    for (int64_t u = u0; u < u0 + urows; ++u) {
      const int64_t iy = S * u + a;
      if (iy < 0 || iy >= s.h) {
        if (pads)
          for (int b = 0; b < S; ++b) memset(dst[b], 0, sizeof(float) * size_t(s.ow));
      } else {
        const float* row = xp + iy * s.w;
        int64_t v = 0;
        if constexpr (S == 2) {
          // Even and odd columns, a vector pair at a time.
          for (; 2 * (v + W) <= s.w && v + W <= s.ow; v += W) {
            const Vec<W> lo = load<W>(row + 2 * v), hi = load<W>(row + 2 * v + W);
            store<W>(dst[0] + v, even_lanes<W>(lo, hi));
            store<W>(dst[1] + v, odd_lanes<W>(lo, hi));
          }
          // The rest from whole vectors too, reading on into the next row
          // (never past the tensor) with the lanes beyond it zeroed; what
          // lands past ow is overwritten by the next row or is margin (and
          // is zero, so the margin stays so).
          for (; v < s.ow && row + 2 * v + 2 * W <= x_end; v += W) {
            const Vec<W> lo = load<W>(row + 2 * v), hi = load<W>(row + 2 * v + W);
            store<W>(dst[0] + v, keep<W>(even_lanes<W>(lo, hi), keep_even + (v - tail)));
            store<W>(dst[1] + v, keep<W>(odd_lanes<W>(lo, hi), keep_odd + (v - tail)));
          }
        }
        for (; v < s.ow; ++v)
          for (int b = 0; b < S; ++b) dst[b][v] = S * v + b < s.w ? row[S * v + b] : 0.0f;
      }
      for (int b = 0; b < S; ++b) dst[b] += s.ow;
    }
    if (pads)
      for (int b = 0; b < S; ++b) memset(dst[b], 0, sizeof(float) * size_t(kFlatMargin));
  }

  // `first`: the first plane into this buffer. A plane of one band puts its
  // zeros where the previous one did, so only the first writes them: on
  // 7x7 and 14x14 planes those memsets were a fifth of the time.
  void plane(const float* xp, const DepthwiseOp& op, bool first) const {
    const int64_t band_rows = this->band_rows();
    const bool pads = first || band_rows < s.oh;
    for (int64_t oy0 = 0; oy0 < s.oh; oy0 += band_rows) {
      const int64_t rows = min64(band_rows, s.oh - oy0), outputs = rows * s.ow;
      const float* base[S * S];
      for (int64_t a = 0; a < S; ++a) {
        float* dst[S];
        for (int64_t b = 0; b < S; ++b) {
          dst[b] = buf + (a * S + b) * plane_floats(band_rows);
          base[a * S + b] = dst[b] + lead() - qr_lo() * s.ow;
        }
        fill(dst, xp, a, oy0, rows, pads);
      }
      float* y0 = op.y + oy0 * s.ow;
      const float* res0 = op.res ? op.res + oy0 * s.ow : nullptr;
      // The activation is chosen once per band, not per vector.
      auto run = [&](auto act) {
        constexpr int ACT = decltype(act)::kind;
        int64_t j = 0;
        for (; j + 2 * W <= outputs; j += 2 * W) vectors<2, ACT>(base, op, y0, res0, j, 2 * W);
        if (j < outputs) vectors<2, ACT>(base, op, y0, res0, j, outputs - j);
      };
      switch (op.act.kind) {
        case KILN_PK_ACT_NONE: run(ActKind<KILN_PK_ACT_NONE>{}); break;
        case KILN_PK_ACT_RELU: run(ActKind<KILN_PK_ACT_RELU>{}); break;
        case KILN_PK_ACT_CLIP: run(ActKind<KILN_PK_ACT_CLIP>{}); break;
        default: run(ActKind<-1>{}); break;
      }
    }
  }
};

template <int W, int S, int KH, int KW, int P>
void flat_depthwise(const kiln_pk_threads* threads, int64_t n, int64_t c, int64_t k, const ConvShape& s, const float* x,
                    const float* weights, const float* bias, const float* residual, float* y, const Activation& act) {
  const int64_t kg = k / c, in_plane = s.h * s.w, out_plane = s.oh * s.ow;
  // The masks depend on the shape alone: made once here and shared by the
  // tasks (made per task, they cost a quarter of a 28x28 convolution).
  static_assert(W <= 16, "kFlatMaskLength");
  int8_t masks[(kFlatMaxTaps - 1) * kFlatMaskLength] __attribute__((aligned(64)));
  {
    const FlatPlane<W, S, KH, KW, P> engine{s, masks, nullptr, nullptr};
    // As many outputs as a band of this plane holds: on small planes (7x7)
    // filling whole tables cost more than the convolution.
    const int64_t band = min64(engine.band_rows(), s.oh) * s.ow;
    for (int64_t qc = engine.qc_lo(); qc <= engine.qc_hi(); ++qc) {
      if (qc == 0) continue;
      int8_t* m = masks + engine.mask_slot(qc) * kFlatMaskLength;
      for (int64_t j = 0, column = 0; j < band + 2 * W; ++j, column = column + 1 == s.ow ? 0 : column + 1)
        m[j] = column + qc >= 0 && column + qc < s.ow ? -1 : 0;  // j % ow, without a division per element
    }
  }
  parallel_for_grain(threads, n * k, grain_for(out_plane * s.kh * s.kw * 2), [&](int64_t begin, int64_t end) {
    float buf[flat_buffer_floats<S>()] __attribute__((aligned(64)));
    const FlatPlane<W, S, KH, KW, P> engine{s, masks, buf, x + n * c * in_plane};
    for (int64_t p = begin; p < end; ++p) {
      const int64_t img = p / k, o = p - img * k;
      engine.plane(x + (img * c + o / kg) * in_plane,
                   DepthwiseOp{weights + o * s.kh * s.kw, residual ? residual + p * out_plane : nullptr, y + p * out_plane, s.ow,
                               s.kw, bias ? bias[o] : 0.0f, act},
                   p == begin);
    }
  });
}

template <int W>
void flat_depthwise_any(const kiln_pk_threads* threads, int64_t n, int64_t c, int64_t k, const ConvShape& s, const float* x,
                        const float* weights, const float* bias, const float* residual, float* y, const Activation& act) {
  // The 3x3 "same" window of mobile networks, every tap offset a constant.
  const bool three = s.kh == 3 && s.kw == 3 && s.pt == 1 && s.pl == 1;
  if (s.sh == 1) {
    if (three) return flat_depthwise<W, 1, 3, 3, 1>(threads, n, c, k, s, x, weights, bias, residual, y, act);
    return flat_depthwise<W, 1, 0, 0, -1>(threads, n, c, k, s, x, weights, bias, residual, y, act);
  }
  if (three) return flat_depthwise<W, 2, 3, 3, 1>(threads, n, c, k, s, x, weights, bias, residual, y, act);
  return flat_depthwise<W, 2, 0, 0, -1>(threads, n, c, k, s, x, weights, bias, residual, y, act);
}

// One input channel per group; with many outputs per group (group == c
// == 1, say) a product is the better shape, and so is a window too large
// for a few outputs' worth of padded rows in the window engine's ring.
bool is_depthwise(int64_t c, int64_t k, int64_t group, int64_t kh, int64_t kw, int64_t sw, int64_t dh, int64_t dw) {
  return group == c && k % c == 0 && k / c <= 4 && window_segment_width(kh, kw, sw, dh, dw) > 0;
}

// For one micro-kernel variant V (see with_variant).
template <class V>
void conv2d_variant(const kiln_pk_threads* threads, int64_t n, int64_t c, int64_t k, int64_t group, const ConvShape& s,
                    const float* x, const float* weights, const float* bias, const float* residual, float* y,
                    const Activation& act, int32_t split, void* scratch) {
  if (is_depthwise(c, k, group, s.kh, s.kw, s.sw, s.dh, s.dw)) {
    if (is_flat_depthwise(s)) return flat_depthwise_any<V::W>(threads, n, c, k, s, x, weights, bias, residual, y, act);
    return depthwise<V::W>(threads, n, c, k, s, x, weights, bias, residual, y, act);
  }
  const int64_t cg = s.c, kg = k / group;
  const int64_t out_plane = s.oh * s.ow, in_plane = s.h * s.w, depth = cg * s.kh * s.kw;
  const bool pointwise = s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.pt == 0 && s.pl == 0 && s.oh == s.h && s.ow == s.w;
  Problem pr;
  pr.m = kg, pr.n = out_plane, pr.k = depth;
  pr.lda = depth, pr.trans_a = false, pr.alpha = 1.0f;
  pr.ldc = out_plane;
  pr.bias_rs = 1, pr.bias_cs = 0, pr.beta = 1.0f;
  pr.act = act;
  pr.rows_first = split == KILN_PK_SPLIT_CHANNELS;
  for (int64_t img = 0; img < n; ++img)
    for (int64_t g = 0; g < group; ++g) {
      pr.a = weights + g * kg * depth;
      pr.c = y + (img * k + g * kg) * out_plane;
      pr.residual = residual ? residual + (img * k + g * kg) * out_plane : nullptr;
      pr.bias = bias ? bias + g * kg : nullptr;
      const float* xg = x + (img * c + g * cg) * in_plane;
      float* work = static_cast<float*>(scratch);
      if (pointwise)
        gemm_matrix<V>(threads, pr, MatrixB{xg, in_plane, false}, work);
      else
        gemm_packed<V::W, V::MR, V::NV>(threads, pr, Im2colB<V::W>{xg, s}, work);
    }
}

}  // namespace

void conv2d_with_config(Config cfg, const kiln_pk_threads* threads, int64_t n, int64_t c, int64_t h, int64_t w, int64_t k,
                        int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t stride_h, int64_t stride_w, int64_t pad_t,
                        int64_t pad_l, int64_t dilation_h, int64_t dilation_w, int64_t group, const float* x,
                        const float* weights, const float* bias, const float* residual, float* y, int32_t act, float act_alpha,
                        float act_beta, int32_t split, void* scratch) {
  if (n <= 0 || k <= 0 || oh <= 0 || ow <= 0 || group <= 0) return;
  const ConvShape s{c / group, h, w, oh, ow, kh, kw, stride_h, stride_w, pad_t, pad_l, dilation_h, dilation_w};
  const Activation a{act, act_alpha, act_beta};
  with_variant(cfg, [&](auto variant) {
    conv2d_variant<decltype(variant)>(threads, n, c, k, group, s, x, weights, bias, residual, y, a, split, scratch);
  });
}

}  // namespace kiln::pk

extern "C" {

void kiln_pk_conv2d(const kiln_pk_threads* threads, int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t oh, int64_t ow,
                    int64_t kh, int64_t kw, int64_t stride_h, int64_t stride_w, int64_t pad_t, int64_t pad_l, int64_t dilation_h,
                    int64_t dilation_w, int64_t group, const float* x, const float* weights, const float* bias,
                    const float* residual, float* y, int32_t act, float act_alpha, float act_beta, int32_t split, void* scratch) {
  kiln::pk::conv2d_with_config(kiln::pk::target_config(), threads, n, c, h, w, k, oh, ow, kh, kw, stride_h, stride_w, pad_t,
                               pad_l, dilation_h, dilation_w, group, x, weights, bias, residual, y, act, act_alpha, act_beta,
                               split, scratch);
}

size_t kiln_pk_conv2d_scratch_bytes(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t oh, int64_t ow, int64_t kh,
                                    int64_t kw, int64_t stride_h, int64_t stride_w, int64_t dilation_h, int64_t dilation_w,
                                    int64_t group) {
  if (n <= 0 || k <= 0 || oh <= 0 || ow <= 0 || group <= 0) return 0;
  if (kiln::pk::is_depthwise(c, k, group, kh, kw, stride_w, dilation_h, dilation_w)) return 0;
  // Pads are not arguments, so this covers both the plain-product path of
  // 1x1 convolutions and the im2col one.
  return size_t(kiln::pk::gemm_scratch_floats(k / group, oh * ow, c / group * kh * kw)) * sizeof(float);
}

}  // extern "C"
