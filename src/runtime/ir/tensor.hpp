#pragma once
// A dense, row-major tensor. Storage is shared (copies alias); `clone` copies
// the bytes. A tensor may also view memory it does not own (caller buffers,
// memory-mapped weights) kept alive by an optional owner handle.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/ir/dtype.hpp"
#include "runtime/ir/error.hpp"

namespace kiln::ir {

using Dims = std::vector<int64_t>;

// Product of dims; throws InvalidModel on negative dims or overflow past 2^62.
int64_t checked_numel(const Dims& dims);
std::string dims_to_string(const Dims& dims);  // "1x3x224x224", "scalar" for rank 0

class Tensor {
 public:
  Tensor() = default;
  // Owning, zero-filled.
  Tensor(DType dtype, Dims dims);
  // Non-owning view of `data`; `owner` (may be null) keeps that memory alive.
  static Tensor view(DType dtype, Dims dims, void* data, std::shared_ptr<void> owner = nullptr);
  // New storage left as it is, for code that writes every element (the
  // constructor zeroes it).
  static Tensor uninitialized(DType dtype, Dims dims) { return Tensor(dtype, std::move(dims), false); }

  template <typename T>
  static Tensor from_vector(Dims dims, const std::vector<T>& values);
  template <typename T>
  static Tensor scalar(T value) {
    return from_vector<T>({}, {value});
  }

  bool defined() const { return dtype_ != DType::Undefined; }
  DType dtype() const { return dtype_; }
  const Dims& dims() const { return dims_; }
  int64_t dim(int i) const { return dims_.at(size_t(i < 0 ? i + rank() : i)); }
  int rank() const { return int(dims_.size()); }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return size_t(numel_) * dtype_size(dtype_); }

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  // The handle keeping the bytes alive (null for unowned views).
  const std::shared_ptr<void>& owner() const { return storage_; }
  template <typename T>
  T* data() {
    check_type(DTypeOf<T>::value);
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    check_type(DTypeOf<T>::value);
    return static_cast<const T*>(data_);
  }

  // Element i converted to double / int64 whatever the dtype (for small
  // tensors of shapes, indices and attributes).
  double as_double(int64_t i) const;
  int64_t as_int64(int64_t i) const;
  std::vector<int64_t> to_int64_vector() const;
  std::vector<float> to_float_vector() const;

  Tensor clone() const;
  // Same bytes, new dims (numel must match).
  Tensor reshaped(Dims dims) const;
  // Element-wise conversion to another dtype (ONNX Cast semantics for numbers).
  Tensor cast(DType to) const;

 private:
  Tensor(DType dtype, Dims dims, bool zeroed);
  void check_type(DType t) const;
  DType dtype_ = DType::Undefined;
  Dims dims_;
  int64_t numel_ = 0;
  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
};

// Calls f(T{}) with T the C++ element type of dtype. Unsupported dtypes throw.
template <typename F>
decltype(auto) dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Float16: return f(Half{});
    case DType::BFloat16: return f(BFloat16{});
    case DType::Int8: return f(int8_t{});
    case DType::Int16: return f(int16_t{});
    case DType::Int32: return f(int32_t{});
    case DType::Int64: return f(int64_t{});
    case DType::UInt8: return f(uint8_t{});
    case DType::UInt16: return f(uint16_t{});
    case DType::UInt32: return f(uint32_t{});
    case DType::UInt64: return f(uint64_t{});
    case DType::Bool: return f(bool{});
    default: fail(ErrorKind::Unsupported, std::string("unsupported element type ") + dtype_name(t));
  }
}

template <typename T>
Tensor Tensor::from_vector(Dims dims, const std::vector<T>& values) {
  Tensor t(DTypeOf<T>::value, std::move(dims));
  if (int64_t(values.size()) != t.numel())
    fail(ErrorKind::Internal,
         "Tensor::from_vector: " + std::to_string(values.size()) + " values for shape " + dims_to_string(t.dims()));
  T* out = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) out[i] = values[i];
  return t;
}

}  // namespace kiln::ir
