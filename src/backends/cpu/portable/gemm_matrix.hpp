// The whole product for a B that is a plain matrix: the packed path of
// gemm_impl.hpp, or, for at most kSmallM rows (or columns), a path that
// streams the operands once without packing. Internal to kiln_pk_gemm and
// kiln_pk_conv2d.
#ifndef KILN_PORTABLE_GEMM_MATRIX_HPP
#define KILN_PORTABLE_GEMM_MATRIX_HPP

#include "backends/cpu/portable/gemm_impl.hpp"

namespace kiln::pk {
namespace small {

// A product with at most kSmallM rows, in general strides: the rows and
// columns of C may be swapped (C^T = B^T A^T) to serve few columns too.
// Packing would cost as much as the product and a micro-tile would be
// mostly padding, so this streams the operands once instead.
struct Small {
  int64_t ms, ns, k;
  const float* a;
  int64_t a_rs, a_cs;
  const float* b;
  int64_t b_rs, b_cs;
  float* c;
  int64_t c_rs, c_cs;
  const float* residual;  // C's strides
  const float* bias;
  int64_t bias_rs, bias_cs;
  float alpha, beta;
  Activation act;
};

KILN_PK_INLINE void finish_scalar(const Small& s, int64_t i, int64_t j, float sum) {
  float v = sum * s.alpha;
  if (s.bias) v += s.beta * s.bias[i * s.bias_rs + j * s.bias_cs];
  const int64_t at = i * s.c_rs + j * s.c_cs;
  if (s.residual) v += s.residual[at];
  s.c[at] = activate(v, s.act);
}

template <int W>
KILN_PK_INLINE void finish_small_vector(const Small& s, int64_t i, int64_t j, Vec<W> v) {
  v *= s.alpha;
  if (s.bias) {
    const float* row = s.bias + i * s.bias_rs;
    if (s.bias_cs == 0) {
      v += splat<W>(row[0] * s.beta);
    } else if (s.bias_cs == 1) {
      v += load<W>(row + j) * s.beta;
    } else {
      Vec<W> bv;
      for (int l = 0; l < W; ++l) bv[l] = row[(j + l) * s.bias_cs];
      v += bv * s.beta;
    }
  }
  float* cp = s.c + i * s.c_rs + j * s.c_cs;
  if (s.c_cs == 1) {
    if (s.residual) v += load<W>(s.residual + i * s.c_rs + j);
    store<W>(cp, activate<W>(v, s.act));
    return;
  }
  if (s.residual) {
    const float* rp = s.residual + i * s.c_rs + j * s.c_cs;
    Vec<W> rv;
    for (int l = 0; l < W; ++l) rv[l] = rp[l * s.c_cs];
    v += rv;
  }
  v = activate<W>(v, s.act);
  for (int l = 0; l < W; ++l) cp[l * s.c_cs] = v[l];
}

// B rows contiguous (b_cs == 1): each task owns a block of columns and
// streams B's rows through it, four at a time, into sums kept in a stack
// tile (L1): B is read once, sequentially, which is what matters for a
// matrix-vector product.
constexpr int64_t kSmallBlock = 512;  // columns per task
constexpr int kSmallDepth = 8;        // rows of B per pass over the tile

template <int W, int MS>
void small_axpy_block(const Small& s, int64_t j0, int64_t cols) {
  float tile[MS * kSmallBlock] __attribute__((aligned(64)));
  const int64_t vec_cols = cols / W * W;
  for (int i = 0; i < MS; ++i)
    for (int64_t j = 0; j < cols; ++j) tile[i * kSmallBlock + j] = 0.0f;
  for (int64_t p0 = 0; p0 < s.k; p0 += kSmallDepth) {
    const int depth = int(min64(kSmallDepth, s.k - p0));
    const float* brow[kSmallDepth];
    float av[MS][kSmallDepth];
    for (int q = 0; q < kSmallDepth; ++q) {
      brow[q] = s.b + (p0 + (q < depth ? q : 0)) * s.b_rs + j0;
      for (int i = 0; i < MS; ++i) av[i][q] = q < depth ? s.a[i * s.a_rs + (p0 + q) * s.a_cs] : 0.0f;
    }
    if (depth == kSmallDepth) {
      for (int64_t j = 0; j < vec_cols; j += W) {
        Vec<W> bv[kSmallDepth];
        for (int q = 0; q < kSmallDepth; ++q) bv[q] = load<W>(brow[q] + j);
        for (int i = 0; i < MS; ++i) {
          Vec<W> acc = load<W>(tile + i * kSmallBlock + j);
          for (int q = 0; q < kSmallDepth; ++q) acc += bv[q] * av[i][q];
          store<W>(tile + i * kSmallBlock + j, acc);
        }
      }
    } else {
      for (int64_t j = 0; j < vec_cols; j += W)
        for (int q = 0; q < depth; ++q) {
          const Vec<W> bv = load<W>(brow[q] + j);
          for (int i = 0; i < MS; ++i) store<W>(tile + i * kSmallBlock + j, load<W>(tile + i * kSmallBlock + j) + bv * av[i][q]);
        }
    }
    for (int64_t j = vec_cols; j < cols; ++j)
      for (int i = 0; i < MS; ++i) {
        float acc = tile[i * kSmallBlock + j];
        for (int q = 0; q < depth; ++q) acc += brow[q][j] * av[i][q];
        tile[i * kSmallBlock + j] = acc;
      }
  }
  for (int i = 0; i < MS; ++i) {
    for (int64_t j = 0; j < vec_cols; j += W) finish_small_vector<W>(s, i, j0 + j, load<W>(tile + i * kSmallBlock + j));
    for (int64_t j = vec_cols; j < cols; ++j) finish_scalar(s, i, j0 + j, tile[i * kSmallBlock + j]);
  }
}

template <int W, int MS>
void small_axpy(const kiln_pk_threads* threads, const Small& s) {
  // Blocks of kSmallBlock columns, narrower when that leaves fewer than
  // four tasks, but not under 8 vectors: the longer the run of each B row,
  // the better it streams.
  const int64_t block = max64(8 * W, min64(kSmallBlock, round_up(ceil_div(s.ns, 4), W)));
  parallel_for_grain(threads, ceil_div(s.ns, block), grain_for(2 * MS * block * s.k), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) small_axpy_block<W, MS>(s, t * block, min64(block, s.ns - t * block));
  });
}

// B columns contiguous (b_rs == 1) and A rows contiguous (a_cs == 1): each
// output is a dot product along k; four columns at a time share the A loads.
template <int W, int MS>
void small_dot(const kiln_pk_threads* threads, const Small& s) {
  constexpr int NB = 4;
  const int64_t kv = s.k / W * W;
  const int64_t items = ceil_div(s.ns, NB);
  parallel_for_grain(threads, items, grain_for(2 * MS * NB * s.k), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t j0 = t * NB, nb = min64(NB, s.ns - j0);
      const float* bc[NB];
      for (int v = 0; v < NB; ++v) bc[v] = s.b + (j0 + (v < nb ? v : 0)) * s.b_cs;
      Vec<W> acc[MS][NB];
      for (int i = 0; i < MS; ++i)
        for (int v = 0; v < NB; ++v) acc[i][v] = Vec<W>{};
      for (int64_t p = 0; p < kv; p += W) {
        Vec<W> bv[NB];
        for (int v = 0; v < NB; ++v) bv[v] = load<W>(bc[v] + p);
        for (int i = 0; i < MS; ++i) {
          const Vec<W> av = load<W>(s.a + i * s.a_rs + p);
          for (int v = 0; v < NB; ++v) acc[i][v] += av * bv[v];
        }
      }
      for (int i = 0; i < MS; ++i)
        for (int v = 0; v < nb; ++v) {
          float sum = hsum<W>(acc[i][v]);
          for (int64_t p = kv; p < s.k; ++p) sum += s.a[i * s.a_rs + p] * bc[v][p];
          finish_scalar(s, i, j0 + v, sum);
        }
    }
  });
}

template <int W, int MS>
void small_rows(const kiln_pk_threads* threads, Small s, float* scratch) {
  if (s.b_cs == 1) return small_axpy<W, MS>(threads, s);
  if (s.b_rs == 1) {
    if (s.a_cs != 1) {
      // The dot products want A's rows contiguous; there are at most
      // kSmallM of them.
      for (int64_t i = 0; i < MS; ++i)
        for (int64_t p = 0; p < s.k; ++p) scratch[i * s.k + p] = s.a[i * s.a_rs + p * s.a_cs];
      s.a = scratch;
      s.a_rs = s.k;
      s.a_cs = 1;
    }
    return small_dot<W, MS>(threads, s);
  }
  // Neither operand layout has a unit stride (degenerate leading dimensions).
  parallel_for_grain(threads, s.ns, grain_for(2 * MS * s.k), [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j)
      for (int64_t i = 0; i < MS; ++i) {
        float sum = 0.0f;
        for (int64_t p = 0; p < s.k; ++p) sum += s.a[i * s.a_rs + p * s.a_cs] * s.b[p * s.b_rs + j * s.b_cs];
        finish_scalar(s, i, j, sum);
      }
  });
}

template <int W>
void gemm_small(const kiln_pk_threads* threads, const Problem& pr, const MatrixB& mb, bool swap, float* scratch) {
  Small s;
  const int64_t a_rs = pr.trans_a ? 1 : pr.lda, a_cs = pr.trans_a ? pr.lda : 1;
  const int64_t b_rs = mb.trans ? 1 : mb.ldb, b_cs = mb.trans ? mb.ldb : 1;
  s.k = pr.k;
  s.c = pr.c;
  s.residual = pr.residual;
  s.bias = pr.bias;
  s.alpha = pr.alpha;
  s.beta = pr.beta;
  s.act = pr.act;
  if (!swap) {
    s.ms = pr.m, s.ns = pr.n;
    s.a = pr.a, s.a_rs = a_rs, s.a_cs = a_cs;
    s.b = mb.b, s.b_rs = b_rs, s.b_cs = b_cs;
    s.c_rs = pr.ldc, s.c_cs = 1;
    s.bias_rs = pr.bias_rs, s.bias_cs = pr.bias_cs;
  } else {
    s.ms = pr.n, s.ns = pr.m;
    s.a = mb.b, s.a_rs = b_cs, s.a_cs = b_rs;
    s.b = pr.a, s.b_rs = a_cs, s.b_cs = a_rs;
    s.c_rs = 1, s.c_cs = pr.ldc;
    s.bias_rs = pr.bias_cs, s.bias_cs = pr.bias_rs;
  }
  switch (s.ms) {
    case 1: return small_rows<W, 1>(threads, s, scratch);
    case 2: return small_rows<W, 2>(threads, s, scratch);
    case 3: return small_rows<W, 3>(threads, s, scratch);
    default: return small_rows<W, 4>(threads, s, scratch);
  }
}

}  // namespace small

// Needs gemm_scratch_floats(m, n, k) of scratch.
template <class V>
void gemm_matrix(const kiln_pk_threads* threads, const Problem& pr, const MatrixB& b, float* scratch) {
  if (pr.m <= 0 || pr.n <= 0) return;
  if (pr.k <= 0) return gemm_no_k(pr);
  if (pr.m <= kSmallM) return small::gemm_small<V::W>(threads, pr, b, false, scratch);
  if (pr.n <= kSmallM) return small::gemm_small<V::W>(threads, pr, b, true, scratch);
  gemm_packed<V::W, V::MR, V::NV>(threads, pr, b, scratch);
}

}  // namespace kiln::pk

#endif
