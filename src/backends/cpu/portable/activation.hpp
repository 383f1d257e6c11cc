// Activations of the fused epilogues (kernels.h's KILN_PK_ACT_*), on one
// value and on a vector. The sigmoid family uses vexp (the scalar form runs
// the same code on one lane, so a value does not depend on whether it fell
// in a vector or a tail); tanh and erf call libm lane by lane.
#ifndef KILN_PORTABLE_ACTIVATION_HPP
#define KILN_PORTABLE_ACTIVATION_HPP

#include <math.h>

#include "backends/cpu/portable/kernels.h"
#include "backends/cpu/portable/simd.hpp"
#include "backends/cpu/portable/vmath.hpp"

namespace kiln::pk {

struct Activation {
  int32_t kind;
  float alpha;
  float beta;
};

KILN_PK_INLINE float clamp01(float v) { return v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v; }

KILN_PK_INLINE float activate(float x, const Activation& a) {
  switch (a.kind) {
    case KILN_PK_ACT_RELU: return x > 0.0f ? x : 0.0f;
    case KILN_PK_ACT_CLIP: {
      const float lo = x < a.alpha ? a.alpha : x;
      return lo > a.beta ? a.beta : lo;
    }
    case KILN_PK_ACT_LEAKY_RELU: return x >= 0.0f ? x : a.alpha * x;
    case KILN_PK_ACT_SIGMOID: return 1.0f / (1.0f + exp_approx(-x));
    case KILN_PK_ACT_TANH: return tanhf(x);
    case KILN_PK_ACT_HARD_SIGMOID: return clamp01(a.alpha * x + a.beta);
    case KILN_PK_ACT_HARD_SWISH: return x * clamp01(x * (1.0f / 6.0f) + 0.5f);
    case KILN_PK_ACT_SILU: return x / (1.0f + exp_approx(-x));
    case KILN_PK_ACT_GELU_ERF: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    default: return x;
  }
}

template <int W>
KILN_PK_INLINE Vec<W> clamp01(Vec<W> v) {
  return vmin<W>(vmax<W>(v, Vec<W>{}), splat<W>(1.0f));
}

// The activations with an exponential or a libm call, out of line: the
// vector form is inlined into every epilogue of every kernel variant, and
// these are both big and rare.
template <int W>
__attribute__((noinline)) void activate_transcendental(Vec<W>* v, const Activation& a) {
  Vec<W> x = *v;
  switch (a.kind) {
    case KILN_PK_ACT_SIGMOID: x = 1.0f / (1.0f + vexp<W>(-x)); break;
    case KILN_PK_ACT_SILU: x = x / (1.0f + vexp<W>(-x)); break;
    default:
      for (int l = 0; l < W; ++l) x[l] = activate(float(x[l]), a);
      break;
  }
  *v = x;
}

template <int W>
KILN_PK_INLINE Vec<W> activate(Vec<W> x, const Activation& a) {
  switch (a.kind) {
    case KILN_PK_ACT_NONE: return x;
    case KILN_PK_ACT_RELU: return x > 0.0f ? x : Vec<W>{};
    case KILN_PK_ACT_CLIP: {
      const Vec<W> lo = x < a.alpha ? splat<W>(a.alpha) : x;
      return lo > a.beta ? splat<W>(a.beta) : lo;
    }
    case KILN_PK_ACT_LEAKY_RELU: return x >= 0.0f ? x : x * a.alpha;
    case KILN_PK_ACT_HARD_SIGMOID: return clamp01<W>(x * a.alpha + a.beta);
    case KILN_PK_ACT_HARD_SWISH: return x * clamp01<W>(x * (1.0f / 6.0f) + 0.5f);
    default: activate_transcendental<W>(&x, a); return x;
  }
}

}  // namespace kiln::pk

#endif
