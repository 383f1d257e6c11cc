#pragma once
// Element types. The numeric values equal ONNX's TensorProto.DataType so that
// import is a range check, not a translation table.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::ir {

enum class DType : int32_t {
  Undefined = 0,
  Float32 = 1,
  UInt8 = 2,
  Int8 = 3,
  UInt16 = 4,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  String = 8,
  Bool = 9,
  Float16 = 10,
  Float64 = 11,
  UInt32 = 12,
  UInt64 = 13,
  Complex64 = 14,
  Complex128 = 15,
  BFloat16 = 16,
};

// Size in bytes of one element; 0 for Undefined and String.
size_t dtype_size(DType t);
// Short lower-case name as used in messages and on the command line ("float32").
const char* dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);
// True for the numeric types a tensor of ours can hold (everything but
// String and complex). Tensors of String hold std::string elements and are
// taken only by the operators that work on strings.
bool dtype_supported(DType t);
bool dtype_is_float(DType t);
bool dtype_is_signed_int(DType t);
bool dtype_is_unsigned_int(DType t);
inline bool dtype_is_int(DType t) { return dtype_is_signed_int(t) || dtype_is_unsigned_int(t); }

// IEEE half and bfloat16 conversions (round to nearest even).
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bfloat16_to_float(uint16_t b);
uint16_t float_to_bfloat16(float f);

// Strong element types for the 16-bit floats so templates can dispatch on them.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f) : bits(float_to_half(f)) {}
  operator float() const { return half_to_float(bits); }
};
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) : bits(float_to_bfloat16(f)) {}
  operator float() const { return bfloat16_to_float(bits); }
};
static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::Float32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::Float64;
};
template <>
struct DTypeOf<Half> {
  static constexpr DType value = DType::Float16;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::BFloat16;
};
template <>
struct DTypeOf<int8_t> {
  static constexpr DType value = DType::Int8;
};
template <>
struct DTypeOf<int16_t> {
  static constexpr DType value = DType::Int16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::Int32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::Int64;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::UInt8;
};
template <>
struct DTypeOf<uint16_t> {
  static constexpr DType value = DType::UInt16;
};
template <>
struct DTypeOf<uint32_t> {
  static constexpr DType value = DType::UInt32;
};
template <>
struct DTypeOf<uint64_t> {
  static constexpr DType value = DType::UInt64;
};
// String tensors hold std::string elements (never passed to dispatch_dtype).
template <>
struct DTypeOf<std::string> {
  static constexpr DType value = DType::String;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::Bool;
};

}  // namespace kiln::ir
