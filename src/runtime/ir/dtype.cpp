#include "runtime/ir/dtype.hpp"

#include <cmath>
#include <cstring>

namespace kiln::ir {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Bool:
    case DType::UInt8:
    case DType::Int8: return 1;
    case DType::UInt16:
    case DType::Int16:
    case DType::Float16:
    case DType::BFloat16: return 2;
    case DType::Float32:
    case DType::Int32:
    case DType::UInt32: return 4;
    case DType::Float64:
    case DType::Int64:
    case DType::UInt64:
    case DType::Complex64: return 8;
    case DType::Complex128: return 16;
    default: return 0;
  }
}

namespace {
struct Named {
  DType type;
  const char* name;
};
constexpr Named kNames[] = {
    {DType::Float32, "float32"},   {DType::UInt8, "uint8"},         {DType::Int8, "int8"},
    {DType::UInt16, "uint16"},     {DType::Int16, "int16"},         {DType::Int32, "int32"},
    {DType::Int64, "int64"},       {DType::String, "string"},       {DType::Bool, "bool"},
    {DType::Float16, "float16"},   {DType::Float64, "float64"},     {DType::UInt32, "uint32"},
    {DType::UInt64, "uint64"},     {DType::Complex64, "complex64"}, {DType::Complex128, "complex128"},
    {DType::BFloat16, "bfloat16"},
};
}  // namespace

const char* dtype_name(DType t) {
  for (const auto& n : kNames)
    if (n.type == t) return n.name;
  return "undefined";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& n : kNames)
    if (name == n.name) return n.type;
  if (name == "float") return DType::Float32;
  if (name == "double") return DType::Float64;
  return std::nullopt;
}

bool dtype_supported(DType t) {
  return t != DType::Undefined && t != DType::String && t != DType::Complex64 && t != DType::Complex128 && dtype_size(t) != 0;
}

bool dtype_is_float(DType t) { return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16; }
bool dtype_is_signed_int(DType t) { return t == DType::Int8 || t == DType::Int16 || t == DType::Int32 || t == DType::Int64; }
bool dtype_is_unsigned_int(DType t) {
  return t == DType::UInt8 || t == DType::UInt16 || t == DType::UInt32 || t == DType::UInt64;
}

float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t(h) & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        e++;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      mant &= 0x3ff;
      bits = sign | (uint32_t(127 - 15 - e) << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = uint16_t((x >> 16) & 0x8000);
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or nan
    return sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0);
  }
  if (absx >= 0x477ff000u) return sign | 0x7c00;  // rounds to inf
  if (absx < 0x38800000u) {                       // subnormal half or zero
    if (absx < 0x33000000u) return sign;
    uint32_t mant = (absx & 0x7fffff) | 0x800000;
    // A half subnormal is m * 2^-24, so m = mant >> (126 - biased exponent).
    uint32_t shift = 126 - (absx >> 23);  // 14..24
    uint32_t half_mant = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1))) half_mant++;
    return sign | uint16_t(half_mant);
  }
  uint32_t exp = (absx >> 23) - 127 + 15;
  uint32_t mant = absx & 0x7fffff;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
  return sign | uint16_t(h);
}

float bfloat16_to_float(uint16_t b) {
  uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bfloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40);  // quiet nan
  uint32_t rounding = 0x7fff + ((x >> 16) & 1);
  return uint16_t((x + rounding) >> 16);
}

}  // namespace kiln::ir
