#include "runtime/ir/tensor.hpp"

#include <algorithm>
#include <charconv>
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
  if (dtype == DType::String) {
    numel_ = checked_numel(dims_);
    if (uint64_t(numel_) > (uint64_t(1) << 62) / sizeof(std::string))
      fail(ErrorKind::InvalidArgument, "string tensor of shape " + dims_to_string(dims_) + " is too large to allocate");
    auto* p = new std::string[size_t(std::max<int64_t>(numel_, 1))];
    storage_ = std::shared_ptr<void>(p, [](void* q) { delete[] static_cast<std::string*>(q); });
    data_ = p;
    return;
  }
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
  if (!dtype_supported(dtype) && dtype != DType::String)
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
  if (dtype_ == DType::String)
    std::copy_n(static_cast<const std::string*>(data_), numel_, static_cast<std::string*>(t.data_));
  else if (nbytes())
    std::memcpy(t.data_, data_, nbytes());
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

namespace {

// ONNX casts numbers to strings as NumPy prints them: the shortest text that
// reads back as the same value ("0.1", "1e-05", "nan", "inf").
template <typename From>
std::string number_to_string(From v) {
  if constexpr (std::is_same_v<From, bool>) {
    return v ? "True" : "False";
  } else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
    return number_to_string(float(v));
  } else {
    if constexpr (std::is_floating_point_v<From>) {
      if (std::isnan(v)) return "nan";
      if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    }
    char buf[64];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    (void)ec;  // 64 characters hold any number's shortest form
    return std::string(buf, end);
  }
}

// Strings to numbers, as ONNX reads them: decimal or scientific notation,
// "nan", "inf", "-inf" (any case) for floats. Anything else is an error.
double string_to_number(const std::string& s, int64_t i) {
  std::string lower(s);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (lower == "nan" || lower == "+nan" || lower == "-nan") return std::nan("");
  if (lower == "inf" || lower == "+inf" || lower == "infinity" || lower == "+infinity") return HUGE_VAL;
  if (lower == "-inf" || lower == "-infinity") return -HUGE_VAL;
  const char* begin = s.data() + (!s.empty() && s[0] == '+' ? 1 : 0);
  double v = 0;
  auto [end, ec] = std::from_chars(begin, s.data() + s.size(), v);
  if (s.empty() || ec == std::errc::invalid_argument || end != s.data() + s.size())
    fail(ErrorKind::InvalidArgument, "element " + std::to_string(i) + " ('" + s.substr(0, 40) + "') is not a number");
  return v;  // out of range: ±HUGE_VAL or 0, as strtod gives
}

}  // namespace

Tensor Tensor::cast(DType to) const {
  if (dtype_ == DType::String || to == DType::String) {
    Tensor out(to, dims_);
    if (dtype_ == to) return clone();
    if (to == DType::String) {
      auto* dst = static_cast<std::string*>(out.data_);
      dispatch_dtype(dtype_, [&](auto tag) {
        using From = decltype(tag);
        for (int64_t i = 0; i < numel_; ++i) dst[i] = number_to_string(static_cast<const From*>(data_)[i]);
      });
    } else {
      const auto* src = static_cast<const std::string*>(data_);
      dispatch_dtype(to, [&](auto tag) {
        using To = decltype(tag);
        for (int64_t i = 0; i < numel_; ++i) static_cast<To*>(out.data_)[i] = convert<To>(string_to_number(src[i], i));
      });
    }
    return out;
  }
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
