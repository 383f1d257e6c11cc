#pragma once
// ONNX TensorProto -> ir::Tensor: raw data (in the message, or left in the
// mapped model file), the typed fields and external data files. The file is
// untrusted: every size is checked against the tensor's shape before
// anything is allocated or read.
#include <onnx/onnx_pb.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "runtime/ir/graph.hpp"
#include "runtime/onnx/model_files.hpp"
#include "runtime/onnx/onnx_importer.hpp"

namespace kiln::onnx_import {

struct Span {
  const uint8_t* data;
  size_t size;
};

// Initializers whose raw_data was left in the mapped model file, by message.
using RawSpans = std::unordered_map<const onnx::TensorProto*, Span>;

// The tensors of one import. Errors name `label` (the model); the external
// weights read are added to `hash`, the model's identity. `options` and
// `hash` must outlive the reader.
class TensorReader {
 public:
  TensorReader(std::string label, const ImportOptions& options, ContentHash& hash)
      : label_(std::move(label)), options_(options), hash_(hash) {}

  // Initializers whose raw data stays in the mapped file `file`.
  void keep_weights_in(std::shared_ptr<MappedFile> file, RawSpans raw) {
    file_ = std::move(file);
    raw_in_file_ = std::move(raw);
  }

  // The mapped model file if some tensor read views it (its own raw data
  // or an external data file), else null.
  std::shared_ptr<MappedFile> viewed_file() const {
    return file_ && (!raw_in_file_.empty() || !file_->external.empty()) ? file_ : nullptr;
  }

  // Every message read belongs to the import: `tp`'s raw data moves into the tensor.
  ir::Tensor tensor(const onnx::TensorProto& tp, const std::string& where);

  // An element type code of `where`, which Kiln must support (strings included).
  ir::DType dtype(int32_t code, const std::string& where) const;

 private:
  ir::Tensor external_tensor(const onnx::TensorProto& tp, ir::DType dt, const ir::Dims& dims, uint64_t want_bytes,
                             const std::string& where);
  ir::Tensor string_tensor(const onnx::TensorProto& tp, const ir::Dims& dims, int64_t numel, const std::string& where);

  std::string label_;
  const ImportOptions& options_;
  ContentHash& hash_;
  std::shared_ptr<MappedFile> file_;
  RawSpans raw_in_file_;
  std::map<std::string, std::shared_ptr<MappedFile>> external_;  // by path
};

}  // namespace kiln::onnx_import
