// The GEMM engine shared by kiln_pk_gemm and kiln_pk_conv2d: operand
// packing, register-blocked micro-kernels with the epilogue fused into their
// stores, cache blocking and the parallel schedule. Internal: the C ABI is
// kernels.h.
//
// Layout of one product (all row-major): C[m x n] (ldc) from A[m x k] and a
// B source [k x n] that knows how to pack itself (a matrix, or an image seen
// through im2col).
#ifndef KILN_PORTABLE_GEMM_IMPL_HPP
#define KILN_PORTABLE_GEMM_IMPL_HPP

#include "backends/cpu/portable/activation.hpp"
#include "backends/cpu/portable/config.hpp"
#include "backends/cpu/portable/parallel.hpp"
#include "backends/cpu/portable/simd.hpp"

#define KILN_PK_UNROLL _Pragma("GCC unroll 16")

namespace kiln::pk {

// Blocking. These bound the scratch of every variant, so they are constants
// and not functions of the target: a scratch size must not depend on it.
constexpr int64_t kMaxMR = 8;   // tallest micro-tile of any variant
constexpr int64_t kMaxNR = 48;  // widest micro-tile of any variant
constexpr int64_t kKC = 384;    // depth of a packed panel (k is split into equal panels of at most this)
constexpr int64_t kMC = 448;    // rows of A packed at once: kc x MC stays in L2
constexpr int64_t kNC = 3072;   // columns of B packed at once: kc x NC stays in L3
constexpr int64_t kSmallM = 4;  // at most this many rows (or columns): no packing, see gemm_small

struct Problem {
  int64_t m, n, k;
  const float* a;
  int64_t lda;
  bool trans_a;
  float alpha;
  float* c;
  int64_t ldc;
  const float* residual;  // NULL or C's layout (ldc); may be c itself
  const float* bias;      // bias(i, j) = bias[i * bias_rs + j * bias_cs]
  int64_t bias_rs, bias_cs;
  float beta;
  Activation act;
  // Tiles row by row (each task a range of C's rows) instead of sliver by
  // sliver: see KILN_PK_SPLIT_CHANNELS.
  bool rows_first = false;
};

// A B of at most kWholeBColumns columns (the 7x7 and 14x14 planes of late
// convolutions) is packed whole, every panel at once, when that takes at
// most kWholeBFloats: see gemm_whole_b. With more columns a panel no longer
// stays in L2 while the tiles walk it (28x28 planes ran at half the speed).
constexpr int64_t kWholeBColumns = 256;
constexpr int64_t kWholeBFloats = int64_t(1) << 20;

// Floats of the whole packed B of an n x k product, for every variant:
// panels of at most kc_max = ceil(k / panels) rows, slivers of NR <=
// kMaxNR columns. 0 when B is not packed whole.
KILN_PK_INLINE int64_t whole_b_floats(int64_t n, int64_t k) {
  if (n <= 0 || k <= 0) return 0;
  const int64_t panels = ceil_div(k, kKC);
  const int64_t floats = panels * ceil_div(k, panels) * (n + kMaxNR);
  return n <= kWholeBColumns && floats <= kWholeBFloats ? floats : 0;
}

// Floats of scratch the packed path needs for an m x n x k product, for
// every variant (see the layout in gemm_packed).
KILN_PK_INLINE int64_t packed_scratch_floats(int64_t m, int64_t n, int64_t k) {
  const int64_t kc = min64(k, kKC);
  return max64(round_up((min64(m, kMC) + kMaxMR) * kc, 16) + (min64(n, kNC) + kMaxNR) * kc, whole_b_floats(n, k));
}

// --- packing -----------------------------------------------------------------

// rows (<= MRE) rows of A from row i0, columns p0 .. p0 + kc, as kc groups of
// MRE values (the rows of one k step), zero-padded, scaled by alpha (so the
// micro-kernel needs no multiply at the end).
template <int MRE>
inline void pack_a(float* __restrict dst, const Problem& pr, int64_t i0, int64_t rows, int64_t p0, int64_t kc) {
  const float alpha = pr.alpha;
  if (pr.trans_a) {
    for (int64_t p = 0; p < kc; ++p) {
      const float* src = pr.a + (p0 + p) * pr.lda + i0;
      float* d = dst + p * MRE;
      if (rows == MRE) {
        KILN_PK_UNROLL
        for (int i = 0; i < MRE; ++i) d[i] = src[i] * alpha;
      } else {
        for (int64_t i = 0; i < rows; ++i) d[i] = src[i] * alpha;
        for (int64_t i = rows; i < MRE; ++i) d[i] = 0.0f;
      }
    }
    return;
  }
  const float* rowp[MRE];
  for (int64_t i = 0; i < MRE; ++i) rowp[i] = pr.a + (i0 + (i < rows ? i : 0)) * pr.lda + p0;
  if (rows == MRE) {
    for (int64_t p = 0; p < kc; ++p) {
      KILN_PK_UNROLL
      for (int i = 0; i < MRE; ++i) dst[p * MRE + i] = rowp[i][p] * alpha;
    }
  } else {
    for (int64_t p = 0; p < kc; ++p) {
      for (int64_t i = 0; i < rows; ++i) dst[p * MRE + i] = rowp[i][p] * alpha;
      for (int64_t i = rows; i < MRE; ++i) dst[p * MRE + i] = 0.0f;
    }
  }
}

// B as a matrix: B(p, j) = b[p * ldb + j], or b[j * ldb + p] when trans.
struct MatrixB {
  const float* b;
  int64_t ldb;
  bool trans;

  // kc x cols of B from (p0, j0) as kc rows of NRE floats, zero-padded.
  template <int NRE>
  void pack(float* __restrict dst, int64_t p0, int64_t kc, int64_t j0, int64_t cols) const {
    if (!trans) {
      const float* src = b + p0 * ldb + j0;
      if (cols == NRE) {
        for (int64_t p = 0; p < kc; ++p) memcpy(dst + p * NRE, src + p * ldb, sizeof(float) * NRE);
      } else {
        for (int64_t p = 0; p < kc; ++p) {
          memcpy(dst + p * NRE, src + p * ldb, sizeof(float) * size_t(cols));
          memset(dst + p * NRE + cols, 0, sizeof(float) * size_t(NRE - cols));
        }
      }
      return;
    }
    // Column by column: reads stay sequential, the writes are strided but
    // within the kc x NRE sliver, which is cache-resident.
    for (int64_t j = 0; j < cols; ++j) {
      const float* src = b + (j0 + j) * ldb + p0;
      for (int64_t p = 0; p < kc; ++p) dst[p * NRE + j] = src[p];
    }
    if (cols < NRE)
      for (int64_t p = 0; p < kc; ++p)
        for (int64_t j = cols; j < NRE; ++j) dst[p * NRE + j] = 0.0f;
  }
};

// B's rows as the micro-kernel can read them in place, or NULL: only a
// plain matrix, and only when a sliver of kc rows stays in L1 (the small
// depths of mobile networks' 1x1 convolutions, where packing B cost as much
// as the product), or when C has so few rows (mobile networks'
// projections: 24 to 64 outputs from up to 384 channels) that a packed
// sliver would serve only a few tiles: 144->24 at 56x56 went from 165 to
// 190-240 GFLOP/s on 2 threads, 384->64 at 14x14 from 190 to 240. With 128
// rows it was slower on 28x28 planes.
constexpr int64_t kDirectBDepth = 64;
constexpr int64_t kDirectBRows = 64;
KILN_PK_INLINE const float* direct_rows(const MatrixB& b, int64_t k, int64_t m) {
  return !b.trans && (k <= kDirectBDepth || (m <= kDirectBRows && k <= kKC)) ? b.b : nullptr;
}
template <class BSource>
KILN_PK_INLINE const float* direct_rows(const BSource&, int64_t, int64_t) {
  return nullptr;
}
KILN_PK_INLINE int64_t direct_ld(const MatrixB& b) { return b.ldb; }
template <class BSource>
KILN_PK_INLINE int64_t direct_ld(const BSource&) {
  return 0;
}

// --- micro-kernel and epilogue -----------------------------------------------

enum : int { kFirstPanel = 1, kLastPanel = 2 };

// bias(i, j .. j + W) * beta for one vector of a row.
template <int W>
KILN_PK_INLINE Vec<W> bias_vector(const Problem& pr, int64_t i, int64_t j, int64_t count) {
  const float* row = pr.bias + i * pr.bias_rs;
  if (pr.bias_cs == 0) return splat<W>(row[0] * pr.beta);
  Vec<W> v;
  if (pr.bias_cs == 1 && count == W) {
    v = load<W>(row + j);
  } else {
    v = Vec<W>{};
    for (int64_t l = 0; l < count; ++l) v[l] = row[(j + l) * pr.bias_cs];
  }
  return v * pr.beta;
}

// Finishes `count` (<= W) values of row i from column j: the panel's sum
// `acc`, plus what the phase says, stored to C.
template <int W>
KILN_PK_INLINE void finish_vector(const Problem& pr, int phase, int64_t i, int64_t j, int64_t count, Vec<W> v) {
  float* cp = pr.c + i * pr.ldc + j;
  const bool full = count == W;
  if (phase & kFirstPanel) {
    if (pr.bias) v += bias_vector<W>(pr, i, j, count);
    if (pr.residual) {
      const float* rp = pr.residual + i * pr.ldc + j;
      v += full ? load<W>(rp) : load_partial<W>(rp, count, 0.0f);
    }
  } else {
    v += full ? load<W>(cp) : load_partial<W>(cp, count, 0.0f);
  }
  if (phase & kLastPanel) v = activate<W>(v, pr.act);
  if (full)
    store<W>(cp, v);
  else
    store_partial<W>(cp, v, count);
}

// ReLU or Clip (lo, hi: 0 or alpha, beta) on a whole vector, with the
// comparisons of activate(), so that NaNs come out the same.
template <int W>
KILN_PK_INLINE Vec<W> relu_or_clip(Vec<W> v, int32_t act, Vec<W> lo, Vec<W> hi) {
  if (act == KILN_PK_ACT_RELU) v = v > lo ? v : lo;
  if (act == KILN_PK_ACT_CLIP) {
    v = v < lo ? lo : v;
    v = v > hi ? hi : v;
  }
  return v;
}

// finish_tile's whole-vector path for one activation (ACT: none, ReLU or
// Clip; the only ones applied here).
template <int W, int ACT>
KILN_PK_INLINE void finish_whole(const Problem& pr, bool first, const float* tile, int64_t ld, int64_t i0, int64_t rows,
                                 int64_t j0, int64_t cols) {
  const Vec<W> lo = splat<W>(ACT == KILN_PK_ACT_CLIP ? pr.act.alpha : 0.0f);
  const Vec<W> hi = splat<W>(pr.act.beta);
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t gi = i0 + i;
    float* cp = pr.c + gi * pr.ldc + j0;
    const float* src = tile + i * ld;
    const float* rp = first && pr.residual ? pr.residual + gi * pr.ldc + j0 : nullptr;
    const bool bias_row = first && pr.bias && pr.bias_cs == 0;
    const float* bias_cols = first && pr.bias && pr.bias_cs == 1 ? pr.bias + gi * pr.bias_rs + j0 : nullptr;
    const Vec<W> bias = splat<W>(bias_row ? pr.bias[gi * pr.bias_rs] * pr.beta : 0.0f);
    for (int64_t j = 0; j < cols; j += W) {
      Vec<W> v = load<W>(src + j);
      if (first) {
        if (bias_row) v += bias;
        if (bias_cols) v += load<W>(bias_cols + j) * pr.beta;
        if (rp) v += load<W>(rp + j);
      } else {
        v += load<W>(cp + j);
      }
      store<W>(cp + j, relu_or_clip<W>(v, ACT, lo, hi));
    }
  }
}

// Finishes rows x cols of C at (i0, j0) from the panel sums in `tile`
// (rows of ld floats). Out of line and not unrolled: one copy per vector
// width instead of one per micro-kernel and per tile row.
template <int W>
void finish_tile(const Problem& pr, int phase, const float* tile, int64_t ld, int64_t i0, int64_t rows, int64_t j0,
                 int64_t cols) {
  const bool first = phase & kFirstPanel, last = phase & kLastPanel;
  const int32_t act = last ? pr.act.kind : KILN_PK_ACT_NONE;
  // The common epilogues (a convolution's per-row bias, a residual, ReLU or
  // Clip) on whole vectors, with every decision taken once per tile: the
  // general path below costs as much as a short k loop.
  if (cols % W == 0 && (!first || !pr.bias || pr.bias_cs == 0 || pr.bias_cs == 1)) {
    switch (act) {
      case KILN_PK_ACT_NONE: return finish_whole<W, KILN_PK_ACT_NONE>(pr, first, tile, ld, i0, rows, j0, cols);
      case KILN_PK_ACT_RELU: return finish_whole<W, KILN_PK_ACT_RELU>(pr, first, tile, ld, i0, rows, j0, cols);
      case KILN_PK_ACT_CLIP: return finish_whole<W, KILN_PK_ACT_CLIP>(pr, first, tile, ld, i0, rows, j0, cols);
      default: break;
    }
  }
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; j += W)
      finish_vector<W>(pr, phase, i0 + i, j0 + j, min64(W, cols - j), load<W>(tile + i * ld + j));
}

// One MR x (NV * W) tile of C over one kc panel: a and b are the packed
// slivers, or, when lda (ldb) is not 0, A's rows (B's rows) themselves that
// far apart, from the panel's first column (row). rows / cols <= the tile say how
// much of it is inside C.
template <int W, int MR, int NV>
__attribute__((noinline)) void compute_tile(const Problem& pr, int phase, int64_t kc, const float* __restrict a, int64_t lda,
                                            const float* __restrict b, int64_t ldb, int64_t i0, int64_t rows, int64_t j0,
                                            int64_t cols) {
  constexpr int NR = NV * W;
  Vec<W> acc[MR][NV];
  KILN_PK_UNROLL
  for (int i = 0; i < MR; ++i) KILN_PK_UNROLL
  for (int v = 0; v < NV; ++v) acc[i][v] = Vec<W>{};
  // Packed A: MR values per k step. Direct A: rows past the edge of C
  // repeat its last row (their sums are never stored).
  const float* row[MR];
  KILN_PK_UNROLL
  for (int i = 0; i < MR; ++i) row[i] = a + (lda == 0 ? i : (i < rows ? i : rows - 1) * lda);
  const int64_t a_step = lda == 0 ? MR : 1, b_step = ldb == 0 ? NR : ldb;
  for (int64_t p = 0; p < kc; ++p) {
    Vec<W> bv[NV];
    KILN_PK_UNROLL
    for (int v = 0; v < NV; ++v) bv[v] = load<W>(b + v * W);
    KILN_PK_UNROLL
    for (int i = 0; i < MR; ++i) {
      const float av = *row[i];
      row[i] += a_step;
      KILN_PK_UNROLL
      for (int v = 0; v < NV; ++v) acc[i][v] += bv[v] * av;
    }
    b += b_step;
  }
  // A whole tile whose sums are complete (one panel: the small depths of
  // 1x1 convolutions) is finished from the registers, as finish_whole would
  // from memory, without the round trip through `tile`.
  const int32_t act = pr.act.kind;
  if (phase == (kFirstPanel | kLastPanel) && rows == MR && cols == NR && (!pr.bias || pr.bias_cs == 0) &&
      (act == KILN_PK_ACT_NONE || act == KILN_PK_ACT_RELU || act == KILN_PK_ACT_CLIP)) {
    const Vec<W> lo = splat<W>(act == KILN_PK_ACT_CLIP ? pr.act.alpha : 0.0f);
    const Vec<W> hi = splat<W>(pr.act.beta);
    KILN_PK_UNROLL
    for (int i = 0; i < MR; ++i) {
      const int64_t gi = i0 + i;
      float* cp = pr.c + gi * pr.ldc + j0;
      const float* rp = pr.residual ? pr.residual + gi * pr.ldc + j0 : nullptr;
      const Vec<W> bias = splat<W>(pr.bias ? pr.bias[gi * pr.bias_rs] * pr.beta : 0.0f);
      KILN_PK_UNROLL
      for (int v = 0; v < NV; ++v) {
        Vec<W> x = acc[i][v];
        if (pr.bias) x += bias;
        if (rp) x += load<W>(rp + v * W);
        store<W>(cp + v * W, relu_or_clip<W>(x, act, lo, hi));
      }
    }
    return;
  }
  float tile[MR * NR] __attribute__((aligned(64)));
  KILN_PK_UNROLL
  for (int i = 0; i < MR; ++i) KILN_PK_UNROLL
  for (int v = 0; v < NV; ++v) store<W>(tile + i * NR + v * W, acc[i][v]);
  finish_tile<W>(pr, phase, tile, NR, i0, rows, j0, cols);
}

// The last sliver of C when it has only a few columns (7x7 planes: 49 = 48
// + 1) and A's rows are read in place: a W-lane tile would spend W lanes on
// each of them, so each element is instead a dot product of A's row and B's
// column, vectorized along k. `cols_t`: the sliver's columns, kc apart.
template <int W>
KILN_PK_INLINE bool dot_edge(bool direct_a, int64_t cols) {
  return direct_a && cols * 4 <= W;
}

template <int W>
__attribute__((noinline)) void compute_dot_edge(const Problem& pr, int phase, int64_t kc, const float* a, int64_t lda,
                                                const float* cols_t, int64_t i0, int64_t rows, int64_t j0, int64_t cols) {
  float tile[kMaxMR * W] __attribute__((aligned(64)));
  for (int64_t i = 0; i < rows; ++i) {
    const float* arow = a + i * lda;
    for (int64_t j = 0; j < cols; ++j) {
      const float* bcol = cols_t + j * kc;
      Vec<W> acc{};
      int64_t p = 0;
      for (; p + W <= kc; p += W) acc += load<W>(arow + p) * load<W>(bcol + p);
      if (p < kc) acc += load_partial<W>(arow + p, kc - p, 0.0f) * load_partial<W>(bcol + p, kc - p, 0.0f);
      tile[i * W + j] = hsum<W>(acc);
    }
  }
  finish_tile<W>(pr, phase, tile, W, i0, rows, j0, cols);
}

// Edge slivers use shorter tiles so that a few leftover rows or columns do
// not cost a whole tile of multiplications by zero.
template <int MR>
KILN_PK_INLINE int edge_height(int64_t rows) {
  constexpr int half = (MR + 1) / 2, quarter = (MR + 3) / 4;
  return rows <= quarter ? quarter : rows <= half ? half : MR;
}

template <int W, int MR, int NV>
KILN_PK_INLINE void compute_tile_nv(int nv, const Problem& pr, int phase, int64_t kc, const float* a, int64_t lda, const float* b,
                                    int64_t ldb, int64_t i0, int64_t rows, int64_t j0, int64_t cols) {
  if constexpr (NV > 1) {
    if (nv < NV) return compute_tile_nv<W, MR, NV - 1>(nv, pr, phase, kc, a, lda, b, ldb, i0, rows, j0, cols);
  }
  compute_tile<W, MR, NV>(pr, phase, kc, a, lda, b, ldb, i0, rows, j0, cols);
}

template <int W, int MR, int NV>
KILN_PK_INLINE void compute_tile_any(int mr, int nv, const Problem& pr, int phase, int64_t kc, const float* a, int64_t lda,
                                     const float* b, int64_t ldb, int64_t i0, int64_t rows, int64_t j0, int64_t cols) {
  constexpr int half = (MR + 1) / 2, quarter = (MR + 3) / 4;
  if (mr == MR)
    compute_tile_nv<W, MR, NV>(nv, pr, phase, kc, a, lda, b, ldb, i0, rows, j0, cols);
  else if (mr == half)
    compute_tile_nv<W, half, NV>(nv, pr, phase, kc, a, lda, b, ldb, i0, rows, j0, cols);
  else
    compute_tile_nv<W, quarter, NV>(nv, pr, phase, kc, a, lda, b, ldb, i0, rows, j0, cols);
}

template <int MR>
KILN_PK_INLINE void pack_a_any(int mr, float* dst, const Problem& pr, int64_t i0, int64_t rows, int64_t p0, int64_t kc) {
  constexpr int half = (MR + 1) / 2, quarter = (MR + 3) / 4;
  if (mr == MR)
    pack_a<MR>(dst, pr, i0, rows, p0, kc);
  else if (mr == half)
    pack_a<half>(dst, pr, i0, rows, p0, kc);
  else
    pack_a<quarter>(dst, pr, i0, rows, p0, kc);
}

template <int W, int NV, class BSource>
KILN_PK_INLINE void pack_b_any(int nv, const BSource& bsrc, float* dst, int64_t p0, int64_t kc, int64_t j0, int64_t cols) {
  if constexpr (NV > 1) {
    if (nv < NV) return pack_b_any<W, NV - 1>(nv, bsrc, dst, p0, kc, j0, cols);
  }
  bsrc.template pack<NV * W>(dst, p0, kc, j0, cols);
}

// --- the packed product ------------------------------------------------------

// Packs kc rows of B from p0, columns j0 .. j0 + c, into one NR-wide
// sliver slot; with an edge for compute_dot_edge, its columns again, each
// contiguous, after the W-wide rows (the slot holds NR >= 2 W columns' worth).
template <int W, int NV, class BSource>
KILN_PK_INLINE void pack_sliver(const BSource& bsrc, float* sliver, bool direct_a, int64_t p0, int64_t kc, int64_t j0,
                                int64_t c) {
  pack_b_any<W, NV>(int(ceil_div(c, W)), bsrc, sliver, p0, kc, j0, c);
  if (dot_edge<W>(direct_a, c)) {
    float* cols_t = sliver + W * kc;
    for (int64_t j = 0; j < c; ++j)
      for (int64_t p = 0; p < kc; ++p) cols_t[j * kc + p] = sliver[p * W + j];
  }
}

// One tile of C from a packed B sliver (or B's rows in place when
// in_place), with A read in place or from its packed sliver.
template <int W, int MR, int NV>
KILN_PK_INLINE void compute_any(const Problem& pr, int phase, int64_t kc, bool direct_a, const float* a, const float* b,
                                bool in_place, int64_t ldb, int64_t i0, int64_t r, int64_t j0, int64_t c) {
  if (!in_place && dot_edge<W>(direct_a, c)) return compute_dot_edge<W>(pr, phase, kc, a, pr.lda, b + W * kc, i0, r, j0, c);
  compute_tile_any<W, MR, NV>(edge_height<MR>(r), int(ceil_div(c, W)), pr, phase, kc, a, direct_a ? pr.lda : 0, b,
                              in_place ? ldb : 0, i0, r, j0, c);
}

// A B of a few columns and many rows (late convolutions: 49 or 196
// columns, thousands of rows) with A read in place: the panel-by-panel
// schedule of gemm_packed would wait for every thread twice per panel and
// row chunk, for little work each time, and pack B's few slivers on as many
// threads. Instead every panel of B is packed in one parallel step, and one
// more computes everything: each task owns row tiles and runs the panels in
// order (so each element's sum is the same as gemm_packed's), within a
// panel sliver by sliver over its tiles, as gemm_packed does. resnet50's
// 7x7 layers on 2 threads: 110-150 -> 200-250 GFLOP/s.
template <int W, int MR, int NV, class BSource>
void gemm_whole_b(const kiln_pk_threads* threads, const Problem& pr, const BSource& bsrc, float* bpack) {
  constexpr int NR = NV * W;
  const int64_t m = pr.m, n = pr.n, k = pr.k;
  const int64_t panels = ceil_div(k, kKC), kc_max = ceil_div(k, panels);
  const int64_t mt = ceil_div(m, MR), nt = ceil_div(n, NR);
  auto sliver = [&](int64_t q, int64_t jt) { return bpack + (q * nt + jt) * NR * kc_max; };
  parallel_for_grain(threads, panels * nt, grain_for(kc_max * NR), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t q = t / nt, jt = t - q * nt;
      const int64_t p0 = q * kc_max;
      pack_sliver<W, NV>(bsrc, sliver(q, jt), true, p0, min64(kc_max, k - p0), jt * NR, min64(NR, n - jt * NR));
    }
  });
  parallel_for_grain(threads, mt, grain_for(2 * MR * n * k), [&](int64_t begin, int64_t end) {
    for (int64_t q = 0; q < panels; ++q) {
      const int64_t p0 = q * kc_max, kc = min64(kc_max, k - p0);
      const int phase = (q == 0 ? kFirstPanel : 0) | (q == panels - 1 ? kLastPanel : 0);
      for (int64_t jt = 0; jt < nt; ++jt)
        for (int64_t it = begin; it < end; ++it) {
          const int64_t i0 = it * MR, r = min64(MR, m - i0);
          compute_any<W, MR, NV>(pr, phase, kc, true, pr.a + i0 * pr.lda + p0, sliver(q, jt), false, 0, i0, r, jt * NR,
                                 min64(NR, n - jt * NR));
        }
    }
  });
}

// A shallow B that must be packed (a stem's im2col: 27 rows for a 3x3
// window over 3 channels, thousands of columns) with A read in place: each
// task packs one sliver on its stack and computes every row tile with it.
// One parallel step instead of two per column chunk, and the sliver never
// leaves L1. k is one panel, so the sums are gemm_packed's.
template <int W, int MR, int NV, class BSource>
void gemm_sliver_local(const kiln_pk_threads* threads, const Problem& pr, const BSource& bsrc) {
  constexpr int NR = NV * W;
  const int64_t m = pr.m, n = pr.n, k = pr.k;
  const int64_t mt = ceil_div(m, MR), nt = ceil_div(n, NR);
  parallel_for_grain(threads, nt, grain_for(2 * m * NR * k), [&](int64_t begin, int64_t end) {
    float sliver[kDirectBDepth * kMaxNR] __attribute__((aligned(64)));
    for (int64_t jt = begin; jt < end; ++jt) {
      const int64_t j0 = jt * NR, c = min64(NR, n - j0);
      pack_sliver<W, NV>(bsrc, sliver, true, 0, k, j0, c);
      for (int64_t it = 0; it < mt; ++it) {
        const int64_t i0 = it * MR;
        compute_any<W, MR, NV>(pr, kFirstPanel | kLastPanel, k, true, pr.a + i0 * pr.lda, sliver, false, 0, i0, min64(MR, m - i0),
                               j0, c);
      }
    }
  });
}

// Loops, outer to inner: row chunks of MC, k panels of kc, column chunks of
// NC; per (chunk, panel, chunk) one parallel step packs B's slivers (and, for
// the first column chunk, A's), the next computes the tiles. The tiles of a
// step are independent and each element's sum runs panel after panel in a
// fixed order, so the result is the same however the steps are split.
template <int W, int MR, int NV, class BSource>
void gemm_packed(const kiln_pk_threads* threads, const Problem& pr, const BSource& bsrc, float* scratch) {
  constexpr int NR = NV * W;
  static_assert(MR <= kMaxMR && NR <= kMaxNR, "scratch bounds");
  static_assert(NR >= 2 * W, "an edge sliver's slot has room for its columns transposed (dot_edge)");
  static_assert(kNC % NR == 0, "equal column chunks stay within kNC");
  const int64_t m = pr.m, n = pr.n, k = pr.k;
  const int64_t panels = ceil_div(k, kKC);
  const int64_t kc_max = ceil_div(k, panels);
  const int64_t mc = (kMC / MR) * MR;
  // Column chunks of equal width (whole slivers, at most kNC, which is a
  // multiple of every NR): 56x56 planes were 3072 + 64 columns, the second
  // chunk a pair of steps with a few tiles each.
  const int64_t nc = round_up(ceil_div(n, ceil_div(n, kNC)), NR);
  float* const apack = scratch;
  // A plain, unscaled A is read where it is (the micro-kernel takes its
  // rows as they are): packing it would copy every weight of a
  // convolution on every call.
  const bool direct_a = !pr.trans_a && pr.alpha == 1.0f;
  const float* const direct_b = direct_rows(bsrc, k, m);
  const int64_t ldb = direct_ld(bsrc);
  if (direct_a && !direct_b) {
    // A B to pack whose depth fits the task's stack.
    if (k <= kDirectBDepth) return gemm_sliver_local<W, MR, NV>(threads, pr, bsrc);
    // Whole B only where it saves steps: with one panel and one row chunk the
    // schedule below has as few, and finer tasks (lenet's second convolution
    // ran a third slower on two threads as two tasks).
    if ((k > kKC || m > kMC) && whole_b_floats(n, k) > 0) return gemm_whole_b<W, MR, NV>(threads, pr, bsrc, scratch);
  }
  float* const bpack = scratch + round_up((min64(m, kMC) + kMaxMR) * min64(k, kKC), 16);

  for (int64_t i0 = 0; i0 < m; i0 += mc) {
    const int64_t rows = min64(mc, m - i0);
    const int64_t mt = ceil_div(rows, MR);
    for (int64_t q = 0; q < panels; ++q) {
      const int64_t p0 = q * kc_max;
      const int64_t kc = min64(kc_max, k - p0);
      const int phase = (q == 0 ? kFirstPanel : 0) | (q == panels - 1 ? kLastPanel : 0);
      for (int64_t j0 = 0; j0 < n; j0 += nc) {
        const int64_t cols = min64(nc, n - j0);
        const int64_t nt = ceil_div(cols, NR);
        const int64_t a_items = j0 == 0 && !direct_a ? mt : 0;
        // With B read in place only the last, partial sliver is packed.
        const int64_t full_slivers = cols / NR;
        const int64_t b_first = direct_b ? full_slivers : 0;
        parallel_for_grain(threads, a_items + nt - b_first, grain_for(kc * NR), [&](int64_t begin, int64_t end) {
          for (int64_t t = begin; t < end; ++t) {
            if (t < a_items) {
              const int64_t r = min64(MR, rows - t * MR);
              pack_a_any<MR>(edge_height<MR>(r), apack + t * MR * kc, pr, i0 + t * MR, r, p0, kc);
            } else {
              const int64_t jt = t - a_items + b_first;
              pack_sliver<W, NV>(bsrc, bpack + jt * NR * kc, direct_a, p0, kc, j0 + jt * NR, min64(NR, cols - jt * NR));
            }
          }
        });
        // Column-sliver-major: a thread's consecutive tiles share the B
        // sliver (L1) and walk the A chunk (L2). Row-major with rows_first.
        parallel_for_grain(threads, mt * nt, grain_for(2 * MR * NR * kc), [&](int64_t begin, int64_t end) {
          for (int64_t t = begin; t < end; ++t) {
            const int64_t jt = pr.rows_first ? t % nt : t / mt, it = pr.rows_first ? t / nt : t % mt;
            const int64_t r = min64(MR, rows - it * MR), c = min64(NR, cols - jt * NR);
            const float* a = direct_a ? pr.a + (i0 + it * MR) * pr.lda + p0 : apack + it * MR * kc;
            const bool in_place = direct_b && jt < full_slivers;
            const float* b = in_place ? direct_b + p0 * ldb + j0 + jt * NR : bpack + jt * NR * kc;
            compute_any<W, MR, NV>(pr, phase, kc, direct_a, a, b, in_place, ldb, i0 + it * MR, r, j0 + jt * NR, c);
          }
        });
      }
    }
  }
}

// A micro-kernel variant: W-lane vectors, MR x (NV * W) tiles.
template <int W_, int MR_, int NV_>
struct Variant {
  static constexpr int W = W_, MR = MR_, NV = NV_;
};

// Calls f(Variant<...>{}) with the variant for a target: as many
// accumulators as the registers allow, leaving room for the B vectors and
// the broadcast A value. The one place the configuration is read: below it,
// kernels are templates of the variant.
template <class F>
KILN_PK_INLINE void with_variant(Config cfg, F&& f) {
  if (cfg.vector_bytes >= 64) {
    // 8 x 48 measured ahead of 14 x 32, 12 x 32 and 6 x 64 on Zen 5.
    if (cfg.vector_registers >= 32)
      f(Variant<16, 8, 3>{});  // 24 accumulators
    else
      f(Variant<16, 6, 2>{});
  } else if (cfg.vector_bytes >= 32) {
    if (cfg.vector_registers >= 32)
      f(Variant<8, 8, 3>{});
    else
      f(Variant<8, 6, 2>{});  // 12 accumulators, the AVX2 classic
  } else {
    if (cfg.vector_registers >= 32)
      f(Variant<4, 8, 3>{});  // NEON: 24 accumulators
    else
      f(Variant<4, 6, 2>{});
  }
}

// Every output once, from a zero sum (k == 0).
void gemm_no_k(const Problem& pr);

// Scratch of gemm_matrix (gemm_matrix.hpp) for an m x n x k product.
int64_t gemm_scratch_floats(int64_t m, int64_t n, int64_t k);

}  // namespace kiln::pk

#endif
