// What the kernels of quantized models share: integer vectors of W lanes,
// the element types of kernels.h, and the requantization of an exact sum to
// 8 bits (rounding half to even, saturating), vector and scalar giving the
// same bits.
#ifndef KILN_PORTABLE_INT8_HPP
#define KILN_PORTABLE_INT8_HPP

#include "backends/cpu/portable/kernels.h"
#include "backends/cpu/portable/simd.hpp"

namespace kiln::pk {

template <int W>
struct IntTraits;
template <>
struct IntTraits<4> {
  typedef int32_t i32 __attribute__((vector_size(16)));
  typedef int16_t pairs __attribute__((vector_size(16)));
  typedef int8_t s8 __attribute__((vector_size(4)));
  typedef uint8_t u8 __attribute__((vector_size(4)));
};
template <>
struct IntTraits<8> {
  typedef int32_t i32 __attribute__((vector_size(32)));
  typedef int16_t pairs __attribute__((vector_size(32)));
  typedef int8_t s8 __attribute__((vector_size(8)));
  typedef uint8_t u8 __attribute__((vector_size(8)));
};
template <>
struct IntTraits<16> {
  typedef int32_t i32 __attribute__((vector_size(64)));
  typedef int16_t pairs __attribute__((vector_size(64)));
  typedef int8_t s8 __attribute__((vector_size(16)));
  typedef uint8_t u8 __attribute__((vector_size(16)));
};
template <int W>
using VecI32 = typename IntTraits<W>::i32;

template <int W>
KILN_PK_INLINE VecI32<W> splat_i32(int32_t x) {
  return VecI32<W>{} + x;
}

// Lane l of the result: a[2l] b[2l] + a[2l + 1] b[2l + 1], a and b read as
// 2W int16 values: exact (the one pair that would overflow, two products
// of -32768, never occurs here). x86's pmaddwd, in SSE2's 128-bit form,
// which every x86-64 has and which LLVM joins into the target's wider one
// (vpmaddwd on AVX2): LLVM recognises no portable spelling of it. Elsewhere
// the two products widened and added.
template <int W>
KILN_PK_INLINE VecI32<W> madd_pairs(VecI32<W> a, VecI32<W> b) {
#if defined(__x86_64__)
  if constexpr (W == 4) {
    typedef int16_t Pairs4 __attribute__((vector_size(16)));
    return (VecI32<4>)__builtin_ia32_pmaddwd128((Pairs4)a, (Pairs4)b);
  } else {
    VecI32<W / 2> a_lo, a_hi, b_lo, b_hi;
    __builtin_memcpy(&a_lo, &a, sizeof a_lo);
    __builtin_memcpy(&a_hi, reinterpret_cast<const char*>(&a) + sizeof a_lo, sizeof a_hi);
    __builtin_memcpy(&b_lo, &b, sizeof b_lo);
    __builtin_memcpy(&b_hi, reinterpret_cast<const char*>(&b) + sizeof b_lo, sizeof b_hi);
    const VecI32<W / 2> lo = madd_pairs<W / 2>(a_lo, b_lo), hi = madd_pairs<W / 2>(a_hi, b_hi);
    VecI32<W> r;
    __builtin_memcpy(&r, &lo, sizeof lo);
    __builtin_memcpy(reinterpret_cast<char*>(&r) + sizeof lo, &hi, sizeof hi);
    return r;
  }
#else
  typedef typename IntTraits<W>::pairs Pairs;
  const Pairs x = (Pairs)a, y = (Pairs)b;
  VecI32<W> r;
  for (int l = 0; l < W; ++l) r[l] = int32_t(x[2 * l]) * y[2 * l] + int32_t(x[2 * l + 1]) * y[2 * l + 1];
  return r;
#endif
}

template <int W>
KILN_PK_INLINE VecI32<W> load_i32(const int32_t* p) {
  VecI32<W> v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

// One element of type `type` (KILN_PK_UINT8, _INT8, _INT32) at p[i].
KILN_PK_INLINE int32_t element(int32_t type, const void* p, int64_t i) {
  if (type == KILN_PK_UINT8) return static_cast<const uint8_t*>(p)[i];
  if (type == KILN_PK_INT8) return static_cast<const int8_t*>(p)[i];
  return static_cast<const int32_t*>(p)[i];
}
// A zero point: one element of `type`, or 0 where there is none.
KILN_PK_INLINE int32_t zero_point(int32_t type, const void* p) { return p ? element(type, p, 0) : 0; }

// The requantization of a sum (or a float) to `type` with zero point
// `zero`: saturate(round_half_even(v) + zero). The bounds are applied before
// rounding (they are integers, so that changes nothing) and then
// 1.5 * 2^23 added and subtracted: for |v| < 2^22 that rounds half to even
// in the default rounding mode, and a vector does it in two instructions
// where nearbyint is a libm call on targets without SSE4.1. A NaN gives the
// lowest value.
struct Requantize {
  float lo, hi;  // the type's range less the zero point
  int32_t zero;

  static constexpr float kRound = 12582912.0f;

  KILN_PK_INLINE static Requantize to(int32_t type, int32_t zero) {
    const float lo = type == KILN_PK_INT8 ? -128.0f : 0.0f, hi = type == KILN_PK_INT8 ? 127.0f : 255.0f;
    return Requantize{lo - float(zero), hi - float(zero), zero};
  }
  KILN_PK_INLINE int32_t one(float v) const {
    v = v > lo ? v : lo;
    v = v < hi ? v : hi;
    v = (v + kRound) - kRound;
    return int32_t(v) + zero;
  }
  template <int W>
  KILN_PK_INLINE VecI32<W> vec(Vec<W> v) const {
    v = v > lo ? v : splat<W>(lo);
    v = v < hi ? v : splat<W>(hi);
    v = (v + kRound) - kRound;
    return __builtin_convertvector(v, VecI32<W>) + zero;
  }
};

// Stores W requantized values (already in the type's range) as bytes.
template <int W>
KILN_PK_INLINE void store_8bit(int32_t type, void* p, VecI32<W> v) {
  if (type == KILN_PK_INT8) {
    auto b = __builtin_convertvector(v, typename IntTraits<W>::s8);
    __builtin_memcpy(p, &b, sizeof b);
  } else {
    auto b = __builtin_convertvector(v, typename IntTraits<W>::u8);
    __builtin_memcpy(p, &b, sizeof b);
  }
}
KILN_PK_INLINE void store_8bit_one(int32_t type, void* p, int64_t i, int32_t v) {
  if (type == KILN_PK_INT8)
    static_cast<int8_t*>(p)[i] = int8_t(v);
  else
    static_cast<uint8_t*>(p)[i] = uint8_t(v);
}

}  // namespace kiln::pk

#endif
