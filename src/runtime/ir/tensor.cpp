#include "runtime/ir/tensor.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <oneapi/tbb/scalable_allocator.h>

#include "runtime/ir/huge_pages.hpp"

namespace kiln::ir {

int64_t checked_numel(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) fail(ErrorKind::InvalidModel, "negative dimension in shape " + dims_to_string(dims));
    if (d != 0 && n > (int64_t(1) << 62) / d)
      fail(ErrorKind::InvalidModel, "shape " + dims_to_string(dims) + " has too many elements");
    n *= d;
  }
  return n;
}

std::string dims_to_string(const Dims& dims) {
  if (dims.empty()) return "scalar";
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(dims[i]);
  }
  return s;
}

Tensor::Tensor(DType dtype, Dims dims) : Tensor(dtype, std::move(dims), true) {}

Tensor::Tensor(DType dtype, Dims dims, bool zeroed) : dtype_(dtype), dims_(std::move(dims)) {
  if (!dtype_supported(dtype))
    fail(ErrorKind::Unsupported, std::string("tensors of ") + dtype_name(dtype) + " are not supported");
  numel_ = checked_numel(dims_);
  // Refuse sizes whose byte count would overflow; aligned_alloc then reports
  // anything merely too large for the machine.
  if (uint64_t(numel_) > (uint64_t(1) << 62) / dtype_size(dtype))
    fail(ErrorKind::InvalidArgument, "tensor of shape " + dims_to_string(dims_) + " is too large to allocate");
  size_t bytes = nbytes();
  // 64-byte alignment suits every vector width; at least one byte so data_ is never null.
  size_t alloc = (bytes + 63) / 64 * 64;
  if (alloc == 0) alloc = 64;
  // TBB's allocator keeps freed large blocks for the next request, where
  // glibc unmaps them: an interpreted detector head (a 50 MB tensor made,
  // filled and freed on every run) paid for every page again on every run.
  void* p = scalable_aligned_malloc(alloc, buffer_alignment(alloc));
  if (!p) fail(ErrorKind::Internal, "out of memory allocating " + std::to_string(bytes) + " bytes");
  advise_huge_pages(p, alloc);
  if (zeroed) std::memset(p, 0, alloc);
  storage_ = std::shared_ptr<void>(p, [](void* q) { scalable_aligned_free(q); });
  data_ = p;
}

Tensor Tensor::view(DType dtype, Dims dims, void* data, std::shared_ptr<void> owner) {
  Tensor t;
  if (!dtype_supported(dtype))
    fail(ErrorKind::Unsupported, std::string("tensors of ") + dtype_name(dtype) + " are not supported");
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  t.numel_ = checked_numel(t.dims_);
  t.storage_ = std::move(owner);
  t.data_ = data;
  return t;
}

void Tensor::check_type(DType t) const {
  if (t != dtype_)
    fail(ErrorKind::Internal, std::string("tensor holds ") + dtype_name(dtype_) + ", accessed as " + dtype_name(t));
}

double Tensor::as_double(int64_t i) const {
  return dispatch_dtype(dtype_, [&](auto tag) -> double {
    using T = decltype(tag);
    return double(static_cast<const T*>(data_)[i]);
  });
}

int64_t Tensor::as_int64(int64_t i) const {
  return dispatch_dtype(dtype_, [&](auto tag) -> int64_t {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16> || std::is_floating_point_v<T>) {
      // Converting a NaN or a float beyond int64 is undefined behaviour: a
      // model whose float tensor stands for a count or an index gets an error.
      double v = double(static_cast<const T*>(data_)[i]);
      if (!(v >= -0x1p63 && v < 0x1p63))
        fail(ErrorKind::InvalidModel, "the " + std::string(dtype_name(dtype_)) + " value " + std::to_string(v) +
                                          " does not fit in an int64 (element " + std::to_string(i) + ")");
      return int64_t(v);
    } else {
      return int64_t(static_cast<const T*>(data_)[i]);
    }
  });
}

std::vector<int64_t> Tensor::to_int64_vector() const {
  std::vector<int64_t> v(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) v[size_t(i)] = as_int64(i);
  return v;
}

std::vector<float> Tensor::to_float_vector() const {
  std::vector<float> v(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) v[size_t(i)] = float(as_double(i));
  return v;
}

Tensor Tensor::clone() const {
  if (!defined()) return {};
  Tensor t(dtype_, dims_, false);  // every byte is written next
  if (nbytes()) std::memcpy(t.data_, data_, nbytes());
  return t;
}

Tensor Tensor::reshaped(Dims dims) const {
  Tensor t = *this;
  int64_t n = checked_numel(dims);
  if (n != numel_) fail(ErrorKind::InvalidArgument, "cannot reshape " + dims_to_string(dims_) + " to " + dims_to_string(dims));
  t.dims_ = std::move(dims);
  return t;
}

namespace {
template <typename To, typename From>
To convert(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return float(v) != 0.0f || (std::is_integral_v<From> && v != From(0));
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return To(float(v));
  } else if constexpr (std::is_integral_v<To> && !std::is_integral_v<From>) {
    // Float to int: truncate toward zero; out-of-range values are
    // implementation-defined in ONNX, saturate here instead of invoking UB.
    double d = double(float(v));
    if constexpr (std::is_same_v<From, double>) d = double(v);
    if (std::isnan(d)) return To(0);
    if (d <= double(std::numeric_limits<To>::lowest())) return std::numeric_limits<To>::lowest();
    if (d >= double(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return To(d);
  } else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
    return To(float(v));
  } else {
    return To(v);
  }
}
}  // namespace

Tensor Tensor::cast(DType to) const {
  Tensor out(to, dims_);
  dispatch_dtype(dtype_, [&](auto from_tag) {
    using From = decltype(from_tag);
    const From* src = static_cast<const From*>(data_);
    dispatch_dtype(to, [&](auto to_tag) {
      using To = decltype(to_tag);
      To* dst = static_cast<To*>(out.data_);
      for (int64_t i = 0; i < numel_; ++i) dst[i] = convert<To>(src[i]);
    });
  });
  return out;
}

}  // namespace kiln::ir
