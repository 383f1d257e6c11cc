// kiln::Tensor and the small helpers of the public types.
#include "runtime/ir/tensor.hpp"
#include "runtime/api_errors.hpp"

namespace kiln {

namespace {

// The public enum mirrors the IR's (both are ONNX's codes): conversions are casts.
static_assert(int(DType::Float32) == int(ir::DType::Float32) && int(DType::Int64) == int(ir::DType::Int64) &&
              int(DType::Bool) == int(ir::DType::Bool) && int(DType::Float16) == int(ir::DType::Float16) &&
              int(DType::BFloat16) == int(ir::DType::BFloat16) && int(DType::UInt64) == int(ir::DType::UInt64));

// A shape the caller gives: the IR calls a bad one an invalid model, but
// here it is the caller's argument.
void check_shape(const char* where, const Shape& shape) {
  try {
    ir::checked_numel(shape);
  } catch (const ir::Error& e) {
    throw Error(ErrorCode::InvalidArgument, std::string(where) + ": " + e.what());
  }
}

}  // namespace

const char* dtype_name(DType t) { return ir::dtype_name(ir::DType(int32_t(t))); }
size_t dtype_size(DType t) { return t == DType::String ? sizeof(std::string) : ir::dtype_size(ir::DType(int32_t(t))); }

std::string shape_to_string(const Shape& s) { return ir::dims_to_string(s); }

Tensor::Tensor(DType dtype, Shape shape) {
  check_shape("Tensor", shape);
  ir::Tensor t = translate_errors([&] { return ir::Tensor(ir::DType(int32_t(dtype)), shape); });
  dtype_ = dtype;
  shape_ = std::move(shape);
  owner_ = t.owner();
  data_ = t.raw();
}

Tensor Tensor::view(DType dtype, Shape shape, void* data) { return view(dtype, std::move(shape), data, nullptr); }

Tensor Tensor::view(DType dtype, Shape shape, void* data, std::shared_ptr<void> owner) {
  if (!data) throw Error(ErrorCode::InvalidArgument, "Tensor::view: data pointer is null");
  if (dtype_size(dtype) == 0)
    throw Error(ErrorCode::InvalidArgument, "Tensor::view: unknown dtype " + std::to_string(int(dtype)));
  check_shape("Tensor::view", shape);
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.owner_ = std::move(owner);
  t.data_ = data;
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

void Tensor::check_size(size_t element_size) const {
  if (element_size != dtype_size(dtype_))
    throw Error(ErrorCode::InvalidArgument, std::string("tensor of ") + dtype_name(dtype_) + " accessed with a " +
                                                std::to_string(element_size) + "-byte element type");
}

std::string TensorInfo::shape_string() const {
  if (!rank_known) return "[unknown rank]";
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += shape[i].is_fixed() ? std::to_string(shape[i].value) : shape[i].symbol.empty() ? "?" : shape[i].symbol;
  }
  return s + "]";
}

}  // namespace kiln
