#pragma once
// ONNX protobuf -> Kiln graph IR. The file is untrusted: every size, index
// and offset read from it is checked before use, and every problem is an
// ir::Error whose message names the file and the offending element.
#include <cstddef>
#include <string>

#include "runtime/ir/graph.hpp"

namespace kiln::onnx_import {

struct ImportOptions {
  // Directory that external-data locations are relative to. Defaults to the
  // model file's directory; a model loaded from memory has none unless set.
  std::string external_data_dir;
};

ir::Model import_model_file(const std::string& path, const ImportOptions& options = {});
ir::Model import_model_bytes(const void* data, size_t size, const std::string& label,
                             const ImportOptions& options = {});
// A single serialized TensorProto (as in the ONNX test data's *.pb files).
ir::Tensor import_tensor_bytes(const void* data, size_t size, const std::string& label);
ir::Tensor import_tensor_file(const std::string& path);

}  // namespace kiln::onnx_import
