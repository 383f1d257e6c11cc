// exp on vectors. libm's expf is one call per lane; softmax, LogSumExp and
// the sigmoid family spend most of their time there, so they use this
// instead: Cody-Waite reduction to r in [-ln2/2, ln2/2], a degree-6 Taylor
// polynomial (error ~1e-7 relative, a couple of ulp) and the power of two
// put into the exponent bits.
#ifndef KILN_PORTABLE_VMATH_HPP
#define KILN_PORTABLE_VMATH_HPP

#include "backends/cpu/portable/simd.hpp"

namespace kiln::pk {

template <int W>
KILN_PK_INLINE Vec<W> vexp(Vec<W> x) {
  // Below lo the result is under 2^-125 and is returned as 0 (the two-step
  // scaling below needs n >= -125); above hi it overflows.
  const float lo = -86.6433525f, hi = 88.7228394f;
  Vec<W> xc = x < lo ? splat<W>(lo) : x;
  xc = xc > hi ? splat<W>(hi) : xc;
  // Round to nearest through the float mantissa: adding 1.5 * 2^23 leaves n
  // in the low bits.
  const float magic = 12582912.0f;
  const Vec<W> t = xc * 1.44269504088896341f + magic;
  const Vec<W> n = t - magic;
  const Mask<W> ni = (Mask<W>)t - (Mask<W>)splat<W>(magic);
  Vec<W> r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  Vec<W> p = splat<W>(1.0f / 720.0f);
  p = p * r + (1.0f / 120.0f);
  p = p * r + (1.0f / 24.0f);
  p = p * r + (1.0f / 6.0f);
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n as 2^(n - 1) * 2 so that n = 128 (x near hi) stays finite.
  const Vec<W> scale = (Vec<W>)((ni + 126) << 23);
  Vec<W> y = p * scale * 2.0f;
  y = x < lo ? Vec<W>{} : y;
  y = x > hi ? splat<W>(__builtin_inff()) : y;
  return x != x ? x : y;
}

KILN_PK_INLINE float exp_approx(float x) { return vexp<4>(splat<4>(x))[0]; }

// tanh on vectors: an odd Taylor polynomial below 0.4 (relative error under
// 1e-7 there), 1 - 2 / (e^2|x| + 1) with the sign of x above (1 once e^2|x|
// overflows). The generated loops' Tanh computes the same steps.
template <int W>
KILN_PK_INLINE Vec<W> vtanh(Vec<W> x) {
  const Vec<W> x2 = x * x;
  Vec<W> p = splat<W>(21844.0f / 6081075);
  p = p * x2 + (-1382.0f / 155925);
  p = p * x2 + (62.0f / 2835);
  p = p * x2 + (-17.0f / 315);
  p = p * x2 + (2.0f / 15);
  p = p * x2 + (-1.0f / 3);
  p = p * x2 + 1.0f;
  const Vec<W> ax = x < 0.0f ? -x : x;
  const Vec<W> far = 1.0f - 2.0f / (vexp<W>(ax + ax) + 1.0f);
  return ax < 0.4f ? x * p : (x < 0.0f ? -far : far);
}

}  // namespace kiln::pk

#endif
