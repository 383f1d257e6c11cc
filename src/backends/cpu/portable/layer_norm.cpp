// kiln_pk_layer_norm: each row normalised by its own mean and variance. The
// variance is the mean of squared deviations (a second pass over the row,
// which is in cache) rather than E[x^2] - E[x]^2, which cancels badly.
#include "backends/cpu/portable/config.hpp"
#include "backends/cpu/portable/parallel.hpp"
#include "backends/cpu/portable/simd.hpp"

#include <math.h>

namespace kiln::pk {
namespace {

template <int W>
KILN_PK_INLINE float row_sum(const float* x, int64_t n, float shift, bool squares) {
  constexpr int U = 4;
  Vec<W> acc[U];
  for (int u = 0; u < U; ++u) acc[u] = Vec<W>{};
  int64_t i = 0;
  for (; i + U * W <= n; i += U * W)
    for (int u = 0; u < U; ++u) {
      const Vec<W> d = load<W>(x + i + u * W) - shift;
      acc[u] += squares ? d * d : d;
    }
  for (; i + W <= n; i += W) {
    const Vec<W> d = load<W>(x + i) - shift;
    acc[0] += squares ? d * d : d;
  }
  float s = hsum<W>((acc[0] + acc[1]) + (acc[2] + acc[3]));
  for (; i < n; ++i) {
    const float d = x[i] - shift;
    s += squares ? d * d : d;
  }
  return s;
}

template <int W>
void layer_norm(const kiln_pk_threads* threads, int64_t rows, int64_t cols, float epsilon, const float* x, const float* scale,
                const float* bias, float* y, float* means, float* inv_std_devs) {
  parallel_for_grain(threads, rows, grain_for(cols * 4), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
      const float mean = row_sum<W>(xr, cols, 0.0f, false) / float(cols);
      const float var = row_sum<W>(xr, cols, mean, true) / float(cols);
      const float inv = 1.0f / sqrtf(var + epsilon);
      if (means) means[r] = mean;
      if (inv_std_devs) inv_std_devs[r] = inv;
      int64_t i = 0;
      for (; i + W <= cols; i += W) {
        Vec<W> v = (load<W>(xr + i) - mean) * inv;
        if (scale) v *= load<W>(scale + i);
        if (bias) v += load<W>(bias + i);
        store<W>(yr + i, v);
      }
      for (; i < cols; ++i) {
        float v = (xr[i] - mean) * inv;
        if (scale) v *= scale[i];
        if (bias) v += bias[i];
        yr[i] = v;
      }
    }
  });
}

}  // namespace
}  // namespace kiln::pk

extern "C" void kiln_pk_layer_norm(const kiln_pk_threads* threads, int64_t rows, int64_t cols, float epsilon, const float* x,
                                   const float* scale, const float* bias, float* y, float* mean, float* inv_std_dev) {
  using namespace kiln::pk;
  if (rows <= 0 || cols <= 0) return;
  const Config cfg = target_config();
  if (cfg.vector_bytes >= 64)
    layer_norm<16>(threads, rows, cols, epsilon, x, scale, bias, y, mean, inv_std_dev);
  else if (cfg.vector_bytes >= 32)
    layer_norm<8>(threads, rows, cols, epsilon, x, scale, bias, y, mean, inv_std_dev);
  else
    layer_norm<4>(threads, rows, cols, epsilon, x, scale, bias, y, mean, inv_std_dev);
}
