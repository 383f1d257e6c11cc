// Generic vectors (GCC's vector_size, which clang also understands) instead
// of target intrinsics: the bitcode is compiled for a baseline target and
// retargeted later, so the code must only say "W lanes", never "AVX-512".
#ifndef KILN_PORTABLE_SIMD_HPP
#define KILN_PORTABLE_SIMD_HPP

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KILN_PK_INLINE inline __attribute__((always_inline))

// Every function that takes or returns a vector by value is always inlined,
// so the baseline target's calling convention for wide vectors (what -Wpsabi
// is about) never applies.
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"
#elif defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace kiln::pk {

template <int W>
struct VecTraits;
template <>
struct VecTraits<4> {
  typedef float type __attribute__((vector_size(16)));
  typedef int32_t mask __attribute__((vector_size(16)));
};
template <>
struct VecTraits<8> {
  typedef float type __attribute__((vector_size(32)));
  typedef int32_t mask __attribute__((vector_size(32)));
};
template <>
struct VecTraits<16> {
  typedef float type __attribute__((vector_size(64)));
  typedef int32_t mask __attribute__((vector_size(64)));
};
template <int W>
using Vec = typename VecTraits<W>::type;
template <int W>
using Mask = typename VecTraits<W>::mask;

// memcpy, not a dereference: operands are only float-aligned, and this is the
// form both compilers turn into one unaligned vector load or store.
template <int W>
KILN_PK_INLINE Vec<W> load(const float* p) {
  Vec<W> v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
template <int W>
KILN_PK_INLINE void store(float* p, Vec<W> v) {
  __builtin_memcpy(p, &v, sizeof v);
}
template <int W>
KILN_PK_INLINE Vec<W> splat(float x) {
  return Vec<W>{} + x;
}
// Loads n < W floats; the other lanes are `fill`.
template <int W>
KILN_PK_INLINE Vec<W> load_partial(const float* p, int64_t n, float fill) {
  Vec<W> v = splat<W>(fill);
  for (int64_t l = 0; l < n; ++l) v[l] = p[l];
  return v;
}
template <int W>
KILN_PK_INLINE void store_partial(float* p, Vec<W> v, int64_t n) {
  for (int64_t l = 0; l < n; ++l) p[l] = v[l];
}
// v where the byte mask m (W bytes, each 0 or -1) is set, +0.0 elsewhere:
// two instructions, where comparing and selecting take five.
template <int W>
KILN_PK_INLINE Vec<W> keep(Vec<W> v, const int8_t* m) {
  typedef int8_t Bytes __attribute__((vector_size(W)));
  Bytes bytes;
  __builtin_memcpy(&bytes, m, sizeof bytes);
  return (Vec<W>)((Mask<W>)v & __builtin_convertvector(bytes, Mask<W>));
}
// A constant shuffle of two 4-lane vectors (lanes 0-3 from a, 4-7 from b),
// spelled the way each compiler wants it.
#if defined(__clang__)
#define KILN_PK_SHUFFLE4(a, b, i0, i1, i2, i3) __builtin_shufflevector(a, b, i0, i1, i2, i3)
#else
#define KILN_PK_SHUFFLE4(a, b, i0, i1, i2, i3) __builtin_shuffle(a, b, ::kiln::pk::Mask<4>{i0, i1, i2, i3})
#endif

// Lanes 0, 2, 4, ... of the 2W lanes a:b (a stride-2 load from two plain
// ones).
template <int W>
KILN_PK_INLINE Vec<W> even_lanes(Vec<W> a, Vec<W> b);
// Lanes 1, 3, 5, ... of a:b.
template <int W>
KILN_PK_INLINE Vec<W> odd_lanes(Vec<W> a, Vec<W> b);
#if defined(__clang__)
template <>
KILN_PK_INLINE Vec<4> even_lanes<4>(Vec<4> a, Vec<4> b) {
  return __builtin_shufflevector(a, b, 0, 2, 4, 6);
}
template <>
KILN_PK_INLINE Vec<8> even_lanes<8>(Vec<8> a, Vec<8> b) {
  return __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14);
}
template <>
KILN_PK_INLINE Vec<16> even_lanes<16>(Vec<16> a, Vec<16> b) {
  return __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
}
template <>
KILN_PK_INLINE Vec<4> odd_lanes<4>(Vec<4> a, Vec<4> b) {
  return __builtin_shufflevector(a, b, 1, 3, 5, 7);
}
template <>
KILN_PK_INLINE Vec<8> odd_lanes<8>(Vec<8> a, Vec<8> b) {
  return __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15);
}
template <>
KILN_PK_INLINE Vec<16> odd_lanes<16>(Vec<16> a, Vec<16> b) {
  return __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}
#else
template <>
KILN_PK_INLINE Vec<4> odd_lanes<4>(Vec<4> a, Vec<4> b) {
  return __builtin_shuffle(a, b, Mask<4>{1, 3, 5, 7});
}
template <>
KILN_PK_INLINE Vec<8> odd_lanes<8>(Vec<8> a, Vec<8> b) {
  return __builtin_shuffle(a, b, Mask<8>{1, 3, 5, 7, 9, 11, 13, 15});
}
template <>
KILN_PK_INLINE Vec<16> odd_lanes<16>(Vec<16> a, Vec<16> b) {
  return __builtin_shuffle(a, b, Mask<16>{1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31});
}
template <>
KILN_PK_INLINE Vec<4> even_lanes<4>(Vec<4> a, Vec<4> b) {
  return __builtin_shuffle(a, b, Mask<4>{0, 2, 4, 6});
}
template <>
KILN_PK_INLINE Vec<8> even_lanes<8>(Vec<8> a, Vec<8> b) {
  return __builtin_shuffle(a, b, Mask<8>{0, 2, 4, 6, 8, 10, 12, 14});
}
template <>
KILN_PK_INLINE Vec<16> even_lanes<16>(Vec<16> a, Vec<16> b) {
  return __builtin_shuffle(a, b, Mask<16>{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30});
}
#endif

// W floats p[0], p[stride], ...: two loads and a shuffle for stride 2 (the
// reads then reach p[2W - 1], one past the last lane: callers keep that
// inside the row), lane by lane otherwise.
template <int W>
KILN_PK_INLINE Vec<W> load_stride(const float* p, int64_t stride) {
  if (stride == 1) return load<W>(p);
  if (stride == 2) return even_lanes<W>(load<W>(p), load<W>(p + W));
  Vec<W> v;
  for (int l = 0; l < W; ++l) v[l] = p[l * stride];
  return v;
}

template <int W>
KILN_PK_INLINE Vec<W> vmax(Vec<W> a, Vec<W> b) {
  return a > b ? a : b;
}
template <int W>
KILN_PK_INLINE Vec<W> vmin(Vec<W> a, Vec<W> b) {
  return a < b ? a : b;
}
// max/min that let a NaN in `x` through, as the reference backend does.
template <int W>
KILN_PK_INLINE Vec<W> vmax_nan(Vec<W> acc, Vec<W> x) {
  return ((x > acc) | (x != x)) ? x : acc;
}
template <int W>
KILN_PK_INLINE Vec<W> vmin_nan(Vec<W> acc, Vec<W> x) {
  return ((x < acc) | (x != x)) ? x : acc;
}
KILN_PK_INLINE float max_nan(float acc, float x) { return ((x > acc) | (x != x)) ? x : acc; }
KILN_PK_INLINE float min_nan(float acc, float x) { return ((x < acc) | (x != x)) ? x : acc; }

// Lane sums in a fixed tree order, so the result does not depend on how a
// compiler would otherwise reassociate.
template <int W>
KILN_PK_INLINE float hsum(Vec<W> v) {
  float lanes[W];
  __builtin_memcpy(lanes, &v, sizeof v);
  for (int width = W / 2; width >= 1; width /= 2)
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  return lanes[0];
}
template <int W>
KILN_PK_INLINE float hmax_nan(Vec<W> v) {
  float r = v[0];
  for (int l = 1; l < W; ++l) r = max_nan(r, v[l]);
  return r;
}
template <int W>
KILN_PK_INLINE float hmin_nan(Vec<W> v) {
  float r = v[0];
  for (int l = 1; l < W; ++l) r = min_nan(r, v[l]);
  return r;
}

KILN_PK_INLINE int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
KILN_PK_INLINE int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
KILN_PK_INLINE int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
KILN_PK_INLINE int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

}  // namespace kiln::pk

#endif
