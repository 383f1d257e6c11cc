#include "runtime/onnx/tensor_proto.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <filesystem>
#include <system_error>

namespace kiln::onnx_import {

using ir::DType;
using ir::ErrorKind;
using ir::fail;

namespace {

namespace fs = std::filesystem;

std::string where_msg(const std::string& where, const std::string& name) {
  return where + (name.empty() ? "" : " '" + name + "'") + ": ";
}

}  // namespace

ir::Tensor TensorReader::tensor(const onnx::TensorProto& tp, const std::string& where) {
  DType dt = dtype(tp.data_type(), where + " '" + tp.name() + "'");
  ir::Dims dims;
  for (int64_t d : tp.dims()) {
    if (d < 0) fail(ErrorKind::InvalidModel, where_msg(where, tp.name()) + "has negative dimension " + std::to_string(d));
    dims.push_back(d);
  }
  int64_t numel;
  try {
    numel = ir::checked_numel(dims);
  } catch (const ir::Error&) {
    fail(ErrorKind::InvalidModel, where_msg(where, tp.name()) + "shape " + ir::dims_to_string(dims) + " is too large");
  }
  const size_t esize = ir::dtype_size(dt);
  const uint64_t want_bytes = uint64_t(numel) * esize;

  if (dt == DType::String) return string_tensor(tp, dims, numel, where);
  if (tp.has_data_location() && tp.data_location() == onnx::TensorProto::EXTERNAL)
    return external_tensor(tp, dt, dims, want_bytes, where);

  auto raw_size_error = [&](size_t have) {
    fail(ErrorKind::InvalidModel, where_msg(where, tp.name()) + "shape " + ir::dims_to_string(dims) + " of " +
                                      ir::dtype_name(dt) + " needs " + std::to_string(want_bytes) +
                                      " bytes of raw data, the file holds " + std::to_string(have));
  };
  auto count_error = [&](size_t have) {
    fail(ErrorKind::InvalidModel, where_msg(where, tp.name()) + "shape " + ir::dims_to_string(dims) + " needs " +
                                      std::to_string(numel) + " elements, the file holds " + std::to_string(have));
  };
  if (auto it = raw_in_file_.find(&tp); it != raw_in_file_.end()) {
    if (it->second.size != want_bytes) raw_size_error(it->second.size);
    if (want_bytes == 0) return ir::Tensor(dt, dims);
    // Read only until own_weights() copies it out.
    return ir::Tensor::view(dt, dims, const_cast<uint8_t*>(it->second.data), file_);
  }
  if (tp.has_raw_data()) {
    if (tp.raw_data().size() != want_bytes) raw_size_error(tp.raw_data().size());
    if (want_bytes == 0) return ir::Tensor(dt, dims);
    // Every message an Importer reads belongs to that import and is thrown
    // away after it: the weights move out of it instead of being copied
    // (for resnet50, 100 MB less to copy on every load).
    std::shared_ptr<std::string> bytes(const_cast<onnx::TensorProto&>(tp).release_raw_data());
    return ir::Tensor::view(dt, dims, bytes->data(), bytes);
  }
  // Check the element count before allocating: a hostile file may claim
  // a huge shape and carry no data at all.
  int64_t have;
  switch (dt) {
    case DType::Float32: have = tp.float_data_size(); break;
    case DType::Float64: have = tp.double_data_size(); break;
    case DType::Int64: have = tp.int64_data_size(); break;
    case DType::UInt32:
    case DType::UInt64: have = tp.uint64_data_size(); break;
    default: have = tp.int32_data_size();
  }
  if (have != numel) count_error(size_t(have));
  ir::Tensor t(dt, dims);
  switch (dt) {
    case DType::Float32: std::copy(tp.float_data().begin(), tp.float_data().end(), t.data<float>()); break;
    case DType::Float64: std::copy(tp.double_data().begin(), tp.double_data().end(), t.data<double>()); break;
    case DType::Int64: std::copy(tp.int64_data().begin(), tp.int64_data().end(), t.data<int64_t>()); break;
    case DType::UInt32:
    case DType::UInt64: {
      for (int64_t i = 0; i < numel; ++i) {
        uint64_t v = tp.uint64_data(int(i));
        if (dt == DType::UInt32)
          t.data<uint32_t>()[i] = uint32_t(v);
        else
          t.data<uint64_t>()[i] = v;
      }
      break;
    }
    default: {
      // int32_data carries every type of 32 bits or less, 16-bit floats as bit patterns.
      for (int64_t i = 0; i < numel; ++i) {
        int32_t v = tp.int32_data(int(i));
        switch (dt) {
          case DType::Int32: t.data<int32_t>()[i] = v; break;
          case DType::Int16: t.data<int16_t>()[i] = int16_t(v); break;
          case DType::Int8: t.data<int8_t>()[i] = int8_t(v); break;
          case DType::UInt16: t.data<uint16_t>()[i] = uint16_t(v); break;
          case DType::UInt8: t.data<uint8_t>()[i] = uint8_t(v); break;
          case DType::Bool: t.data<bool>()[i] = v != 0; break;
          case DType::Float16: t.data<ir::Half>()[i].bits = uint16_t(v); break;
          case DType::BFloat16: t.data<ir::BFloat16>()[i].bits = uint16_t(v); break;
          default:
            fail(ErrorKind::Unsupported,
                 where_msg(where, tp.name()) + "element type " + ir::dtype_name(dt) + " is not supported");
        }
      }
    }
  }
  return t;
}

ir::Tensor TensorReader::string_tensor(const onnx::TensorProto& tp, const ir::Dims& dims, int64_t numel,
                                       const std::string& where) {
  if (tp.has_raw_data() || raw_in_file_.count(&tp) ||
      (tp.has_data_location() && tp.data_location() == onnx::TensorProto::EXTERNAL))
    fail(ErrorKind::InvalidModel, where_msg(where, tp.name()) + "a string tensor must hold its elements in string_data");
  if (tp.string_data_size() != numel)
    fail(ErrorKind::InvalidModel, where_msg(where, tp.name()) + "shape " + ir::dims_to_string(dims) + " needs " +
                                      std::to_string(numel) + " strings, the file holds " +
                                      std::to_string(tp.string_data_size()));
  ir::Tensor t(DType::String, dims);
  std::copy(tp.string_data().begin(), tp.string_data().end(), t.data<std::string>());
  return t;
}

DType TensorReader::dtype(int32_t code, const std::string& where) const {
  if (code <= 0 || code > int32_t(DType::BFloat16))
    fail(ErrorKind::InvalidModel, label_ + ": " + where + " has unknown element type code " + std::to_string(code));
  DType dt = DType(code);
  if (!ir::dtype_supported(dt) && dt != DType::String)
    fail(ErrorKind::Unsupported,
         label_ + ": " + where + " has element type " + ir::dtype_name(dt) + ", which Kiln does not support");
  return dt;
}

ir::Tensor TensorReader::external_tensor(const onnx::TensorProto& tp, DType dt, const ir::Dims& dims, uint64_t want_bytes,
                                         const std::string& where) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : tp.external_data()) {
    try {
      if (kv.key() == "location")
        location = kv.value();
      else if (kv.key() == "offset")
        offset = std::stoll(kv.value());
      else if (kv.key() == "length")
        length = std::stoll(kv.value());
    } catch (const std::exception&) {
      fail(ErrorKind::InvalidModel,
           where_msg(where, tp.name()) + "external data field '" + kv.key() + "' is not a number: '" + kv.value() + "'");
    }
  }
  std::string dir = options_.external_data_dir;
  if (dir.empty())
    fail(ErrorKind::InvalidModel, where_msg(where, tp.name()) + "weights are in an external file '" + location +
                                      "' but the model was loaded from memory without a directory for external data");
  if (location.empty()) fail(ErrorKind::InvalidModel, where_msg(where, tp.name()) + "external data has no location");
  fs::path rel(location);
  // Keep external data inside the model's directory: a hostile file must not read /etc/passwd.
  if (rel.is_absolute() || location.find("..") != std::string::npos)
    fail(ErrorKind::InvalidModel, where_msg(where, tp.name()) + "external data location '" + location +
                                      "' must be a relative path inside the model's directory");
  const std::string full = (fs::path(dir) / rel).string();
  std::shared_ptr<MappedFile>& file = external_[full];
  if (!file) {
    std::error_code ec;
    const std::string inside = fs::canonical(dir, ec).string();
    if (ec)
      fail(ErrorKind::Io, where_msg(where, tp.name()) + "cannot open the external data directory '" + dir + "': " + ec.message());
    file = map_external(full, inside, options_, where_msg(where, tp.name()));
    if (file_) file_->external.push_back(file);
  }
  const uint64_t file_size = file->size;
  if (offset < 0 || uint64_t(offset) > file_size)
    fail(ErrorKind::InvalidModel, where_msg(where, tp.name()) + "external data offset " + std::to_string(offset) +
                                      " is outside '" + full + "' (" + std::to_string(file_size) + " bytes)");
  if (length >= 0 && uint64_t(length) != want_bytes)
    fail(ErrorKind::InvalidModel, where_msg(where, tp.name()) + "external data length " + std::to_string(length) +
                                      " does not match the " + std::to_string(want_bytes) + " bytes its shape needs");
  if (file_size - uint64_t(offset) < want_bytes)
    fail(ErrorKind::InvalidModel, where_msg(where, tp.name()) + "external data file '" + full + "' is too short: needs " +
                                      std::to_string(want_bytes) + " bytes at offset " + std::to_string(offset));
  // The file's identity and where in it: each file is read once however
  // many tensors it holds, and not at all when its hash is remembered.
  hash_.hash_file(file->hash);
  const uint64_t span[2] = {uint64_t(offset), want_bytes};
  hash_.hash(span, sizeof span);
  if (want_bytes == 0) return ir::Tensor(dt, dims);
  const uint8_t* at = file->data + offset;
  // Read only until own_weights() copies it out.
  if (file_) return ir::Tensor::view(dt, dims, const_cast<uint8_t*>(at), file_);
  ir::Tensor t = ir::Tensor::uninitialized(dt, dims);
  std::memcpy(t.raw(), at, want_bytes);
  return t;
}

}  // namespace kiln::onnx_import
