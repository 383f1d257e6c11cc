#pragma once
// ONNX protobuf -> Kiln graph IR. The file is untrusted: every size, index
// and offset read from it is checked before use, and every problem is an
// ir::Error whose message names the file and the offending element.
#include <sys/stat.h>

#include <cstddef>
#include <ctime>
#include <functional>
#include <string>

#include "runtime/ir/graph.hpp"

namespace kiln::onnx_import {

// The newest ai.onnx opset whose operators Kiln implements.
inline constexpr int64_t kMaxOpset = 18;

struct ImportOptions {
  // Directory that external-data locations are relative to. Defaults to the
  // model file's directory; a model loaded from memory has none unless set.
  std::string external_data_dir;
  // import_model_file only: initializers stored as raw data, or in external
  // data files, stay views of the mapped files (no copy at load), and the
  // model's mapped_file is set.
  // Call own_weights before anything reads them.
  bool keep_weights_in_file = false;
  // Threads that hash the model's bytes for its identity (the caller's and
  // hash_threads - 1 more, started for it and joined before returning).
  int hash_threads = 1;
  // A memo of files' hashes (hash_blocks, as hex) by their identity, so that
  // loading an unchanged file again need not read it: import_model_file's
  // model file with keep_weights_in_file, and every external data file.
  // recall gets the file's fstat and answers "" if it does not know it;
  // remember also gets a coarse clock reading (CLOCK_REALTIME_COARSE) taken
  // before the file was opened.
  std::function<std::string(const struct stat&)> recall_file_hash;
  std::function<void(const std::string& path, const struct stat&, const timespec& looked_at, const std::string& hex)>
      remember_file_hash;
};

ir::Model import_model_file(const std::string& path, const ImportOptions& options = {});
ir::Model import_model_bytes(const void* data, size_t size, const std::string& label, const ImportOptions& options = {});
// Copies the weights a model still views in its file into memory of its own
// (nothing to do unless imported with keep_weights_in_file), after checking
// that the file still holds the bytes it was loaded from.
void own_weights(ir::Model& model);
// A single serialized TensorProto (as in the ONNX test data's *.pb files).
ir::Tensor import_tensor_bytes(const void* data, size_t size, const std::string& label);
ir::Tensor import_tensor_file(const std::string& path);
// A serialized TensorProto, SequenceProto or OptionalProto (the test data's
// inputs and outputs), whichever `as` declares, as a value of that kind.
ir::Value import_value_bytes(const void* data, size_t size, const ir::ValueInfo& as, const std::string& label);
ir::Value import_value_file(const std::string& path, const ir::ValueInfo& as);

}  // namespace kiln::onnx_import
