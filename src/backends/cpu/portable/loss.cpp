// kiln_pk_nll_loss: NegativeLogLikelihoodLoss, and SoftmaxCrossEntropyLoss
// as a LogSoftmax before it. Targets are checked before anything is written,
// so a bad one is reported by position.
#include "backends/cpu/portable/kernels.h"

namespace {

int64_t target_at(const void* target, bool is_64, int64_t i) {
  return is_64 ? static_cast<const int64_t*>(target)[i] : int64_t(static_cast<const int32_t*>(target)[i]);
}

}  // namespace

extern "C" int64_t kiln_pk_nll_loss(const kiln_pk_threads* threads, int64_t n, int64_t c, int64_t d, const float* scores,
                                    float* logp, int32_t target_is_64, const void* target, const float* weight,
                                    int32_t has_ignore, int64_t ignore_index, int32_t reduction, float* out) {
  const bool is_64 = target_is_64 != 0;
  const auto ignored = [&](int64_t t) { return has_ignore && t == ignore_index; };
  for (int64_t i = 0; i < n * d; ++i) {
    const int64_t t = target_at(target, is_64, i);
    if (!ignored(t) && (t < 0 || t >= c)) return 1 + i;
  }
  if (scores) kiln_pk_softmax(threads, n, c, d, 1, scores, logp);
  // Summed in double, as the reference does: a mean over many terms.
  double loss_sum = 0, weight_sum = 0;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t j = 0; j < d; ++j) {
      const int64_t i = b * d + j, t = target_at(target, is_64, i);
      double loss = 0;
      if (!ignored(t)) {
        const double w = weight ? double(weight[t]) : 1.0;
        loss = -double(logp[(b * c + t) * d + j]) * w;
        loss_sum += loss;
        weight_sum += w;
      }
      if (reduction == KILN_PK_LOSS_NONE) out[i] = float(loss);
    }
  if (reduction == KILN_PK_LOSS_SUM) out[0] = float(loss_sum);
  if (reduction == KILN_PK_LOSS_MEAN) out[0] = float(loss_sum / weight_sum);
  return 0;
}
