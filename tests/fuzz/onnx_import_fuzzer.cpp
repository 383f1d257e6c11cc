// libFuzzer target for the ONNX importer and shape inference: any byte string
// must give a model or an ir::Error, never a crash, a hang or a giant
// allocation. Build with clang: see tests/fuzz/README.md.
#include <cstddef>
#include <cstdint>

#include "runtime/ir/shape_inference.hpp"
#include "runtime/onnx/onnx_importer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    kiln::ir::Model m = kiln::onnx_import::import_model_bytes(data, size, "fuzz.onnx");
    kiln::ir::infer_shapes(*m.graph);
  } catch (const kiln::ir::Error&) {
  }
  return 0;
}
