// kiln_pk_gemm: batching, the small-product path, and the packed path of
// gemm_impl.hpp.
#include "backends/cpu/portable/gemm_matrix.hpp"
#include "backends/cpu/portable/testing.hpp"

namespace kiln::pk {

void gemm_no_k(const Problem& pr) {
  for (int64_t i = 0; i < pr.m; ++i)
    for (int64_t j = 0; j < pr.n; ++j) {
      float v = 0.0f;
      if (pr.bias) v += pr.beta * pr.bias[i * pr.bias_rs + j * pr.bias_cs];
      if (pr.residual) v += pr.residual[i * pr.ldc + j];
      pr.c[i * pr.ldc + j] = activate(v, pr.act);
    }
}

int64_t gemm_scratch_floats(int64_t m, int64_t n, int64_t k) { return max64(packed_scratch_floats(m, n, k), kSmallM * k); }

namespace {

// Batches of products of at most this many flops run a product per task.
constexpr int64_t kSmallProductFlops = int64_t(1) << 21;
constexpr int64_t kBatchGroup = 16;  // products in flight at once (each with its own scratch)

bool batch_parallel(int64_t batch, int64_t m, int64_t n, int64_t k) { return batch > 1 && 2 * m * n * k <= kSmallProductFlops; }

int64_t item_scratch_floats(int64_t m, int64_t n, int64_t k) { return round_up(gemm_scratch_floats(m, n, k), 16); }

}  // namespace

// The batch loop, for one micro-kernel variant V: everything below is a
// template of V, so no runtime configuration crosses the parallel_for
// boundary (where constant propagation could not follow it).
template <class V>
void gemm_batched(const kiln_pk_threads* threads, int64_t batch, const Problem& pr, int64_t stride_a, const float* b, int64_t ldb,
                  int64_t stride_b, bool trans_b, int64_t stride_c, void* scratch) {
  auto item = [&](int64_t i, const kiln_pk_threads* item_threads, float* work) {
    Problem q = pr;
    q.a = pr.a + i * stride_a;
    q.c = pr.c + i * stride_c;
    q.residual = pr.residual ? pr.residual + i * stride_c : nullptr;
    gemm_matrix<V>(item_threads, q, MatrixB{b + i * stride_b, ldb, trans_b}, work);
  };
  if (!batch_parallel(batch, pr.m, pr.n, pr.k)) {
    for (int64_t i = 0; i < batch; ++i) item(i, threads, static_cast<float*>(scratch));
    return;
  }
  // Products too small to split well (attention heads, say): whole products
  // side by side, each serial in its own part of the scratch.
  const int64_t per_item = item_scratch_floats(pr.m, pr.n, pr.k);
  for (int64_t g0 = 0; g0 < batch; g0 += kBatchGroup) {
    const int64_t count = min64(kBatchGroup, batch - g0);
    parallel_for_grain(threads, count, grain_for(2 * pr.m * pr.n * pr.k), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) item(g0 + i, nullptr, static_cast<float*>(scratch) + i * per_item);
    });
  }
}

void gemm_with_config(Config cfg, const kiln_pk_threads* threads, int64_t batch, int64_t m, int64_t n, int64_t k, const float* a,
                      int64_t lda, int64_t stride_a, int32_t trans_a, const float* b, int64_t ldb, int64_t stride_b,
                      int32_t trans_b, float* c, int64_t ldc, int64_t stride_c, float alpha, const float* bias, int64_t bias_rs,
                      int64_t bias_cs, float beta, const float* residual, int32_t act, float act_alpha, float act_beta,
                      void* scratch) {
  if (batch <= 0 || m <= 0 || n <= 0) return;
  // A stack of products against one B whose A and C blocks follow each
  // other is a single taller product (MatMul of [batch, m, k] by [k, n]),
  // unless the bias varies by row.
  if (batch > 1 && stride_b == 0 && !trans_a && stride_a == m * lda && stride_c == m * ldc && (!bias || bias_rs == 0)) {
    m *= batch;
    batch = 1;
  }
  Problem pr;
  pr.m = m, pr.n = n, pr.k = k;
  pr.a = a, pr.lda = lda, pr.trans_a = trans_a != 0, pr.alpha = alpha;
  pr.c = c, pr.ldc = ldc, pr.residual = residual;
  pr.bias = bias, pr.bias_rs = bias_rs, pr.bias_cs = bias_cs, pr.beta = beta;
  pr.act = Activation{act, act_alpha, act_beta};
  with_variant(cfg, [&](auto variant) {
    gemm_batched<decltype(variant)>(threads, batch, pr, stride_a, b, ldb, stride_b, trans_b != 0, stride_c, scratch);
  });
}

}  // namespace kiln::pk

extern "C" {

void kiln_pk_gemm(const kiln_pk_threads* threads, int64_t batch, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  int64_t stride_a, int32_t trans_a, const float* b, int64_t ldb, int64_t stride_b, int32_t trans_b, float* c,
                  int64_t ldc, int64_t stride_c, float alpha, const float* bias, int64_t bias_rs, int64_t bias_cs, float beta,
                  const float* residual, int32_t act, float act_alpha, float act_beta, void* scratch) {
  kiln::pk::gemm_with_config(kiln::pk::target_config(), threads, batch, m, n, k, a, lda, stride_a, trans_a, b, ldb, stride_b,
                             trans_b, c, ldc, stride_c, alpha, bias, bias_rs, bias_cs, beta, residual, act, act_alpha, act_beta,
                             scratch);
}

size_t kiln_pk_gemm_scratch_bytes(int64_t batch, int64_t m, int64_t n, int64_t k) {
  using namespace kiln::pk;
  if (batch <= 0 || m <= 0 || n <= 0 || k <= 0) return 0;
  // Folding the batch into the rows (see gemm_with_config) makes a product
  // up to batch * m tall; small products run several at once.
  int64_t floats = gemm_scratch_floats(batch * m, n, k);
  if (batch_parallel(batch, m, n, k)) floats = max64(floats, min64(batch, kBatchGroup) * item_scratch_floats(m, n, k));
  return size_t(floats) * sizeof(float);
}

}  // extern "C"
