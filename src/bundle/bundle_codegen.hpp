#pragma once
// The object of a frozen bundle: every specialization's entry and the
// portable kernels they call, once per target CPU (each its own code
// version, picked by NAME_create), the bundle runtime (src/bundle/runtime/bundle_runtime.c)
// and its descriptor, for native bundles the oneDNN tables and their runtime
// (bundle_native.c), and the exported C API NAME_create, NAME_run, ...
// (documented by the header the freezer writes). Nothing else is exported,
// so several bundles link into one program.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/cpu/jit.hpp"
#include "backends/cpu/program.hpp"

namespace kiln::bundle {

struct BundleTensor {
  std::string name;
  ir::DType dtype = ir::DType::Float32;
  int64_t item_bytes = 0;  // one batch item, or the whole tensor when not batched
  bool batched = true;
  int64_t outer = 1;  // the product of the dims before the batch axis
};

struct BundleSpecialization {
  const cpu::Program* program = nullptr;
  int64_t batch = 1;
  std::vector<int64_t> constant_offsets;  // of each program constant in the weights data
  // Native bundles: a document and blocks (backends/program_blocks.hpp)
  // listing per oneDNN step, in step order, the kernel as OneDnnKernel::save()
  // describes it, its constants' offsets into the bundle's weights data, and
  // "label": the step's label.
  std::string primitives;
};

struct BundlePlan {
  std::string name;  // a C identifier: the prefix of every exported symbol
  std::vector<BundleTensor> inputs, outputs;
  std::vector<BundleSpecialization> specs;  // ascending batch sizes
  uint64_t weights_bytes = 0;
  uint64_t weights_checksum = 0;                  // XXH3-64 of the weights data
  const std::string* embedded_weights = nullptr;  // the data, to embed; null: a weights file
  bool native = false;                            // oneDNN steps (KernelFamily::NativeBundle): the object needs libdnnl
};

// `cpus`: one compiler per code version, best first, all for one triple; the
// first also compiles the runtime. Throws ir::Error: Unsupported naming a
// step that needs a host kernel (other than a oneDNN primitive, in a native
// bundle), InvalidArgument for a plan the bundle runtime cannot hold.
std::string compile_bundle(const BundlePlan& plan, const std::vector<const cpu::TargetCompiler*>& cpus);

// The features of the compiler's target that the bundle's create checks
// the CPU for ("avx2,fma,..."): those of runtime/bundle_cpu_features.h.
std::string bundle_cpu_features(const cpu::TargetCompiler& compiler);

// A static library (ar archive with a symbol table) holding one object.
std::string static_archive(const std::string& object, const std::string& member_name);

}  // namespace kiln::bundle
