#pragma once
// A ModelBuilder's model, serialized and imported as a file would be.
#include "model_builder.hpp"
#include "runtime/onnx/onnx_importer.hpp"

namespace kiln::test {

inline ir::Model import(const ModelBuilder& b) {
  std::string bytes = b.bytes();
  return onnx_import::import_model_bytes(bytes.data(), bytes.size(), "test.onnx");
}

}  // namespace kiln::test
