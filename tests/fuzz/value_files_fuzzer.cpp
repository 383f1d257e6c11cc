// libFuzzer target for the test data's value files (TensorProto,
// SequenceProto, OptionalProto): any byte string must give a value or an
// ir::Error. The first byte picks the declared kind the file is read as.
#include <cstddef>
#include <cstdint>

#include "runtime/onnx/onnx_importer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  kiln::ir::ValueInfo as;
  as.kind = kiln::ir::ValueKind(data[0] % 3);
  as.element_kind = data[0] & 4 ? kiln::ir::ValueKind::Sequence : kiln::ir::ValueKind::Tensor;
  try {
    kiln::onnx_import::import_value_bytes(data + 1, size - 1, as, "fuzz.pb");
  } catch (const kiln::ir::Error&) {
  }
  return 0;
}
