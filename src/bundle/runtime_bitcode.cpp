#include "bundle/runtime_bitcode.hpp"

#include <llvm/IR/Function.h>
#include <llvm/IR/Module.h>

#include "backends/cpu/embedded_bitcode.hpp"
#include "backends/cpu/jit.hpp"

// Defined by the assembly file CMake generates (.incbin of each target's .bc).
extern "C" {
extern const char kiln_bundle_runtime_bitcode_x86_64[];
extern const char kiln_bundle_runtime_bitcode_x86_64_end[];
extern const char kiln_bundle_runtime_bitcode_aarch64[];
extern const char kiln_bundle_runtime_bitcode_aarch64_end[];
extern const char kiln_bundle_native_bitcode[];
extern const char kiln_bundle_native_bitcode_end[];
}

namespace kiln::bundle {

void link_bundle_runtime(llvm::Module& m) {
  static const cpu::EmbeddedBitcode copies[] = {
      {"x86_64", cpu::embedded_bytes(kiln_bundle_runtime_bitcode_x86_64, kiln_bundle_runtime_bitcode_x86_64_end)},
      {"aarch64", cpu::embedded_bytes(kiln_bundle_runtime_bitcode_aarch64, kiln_bundle_runtime_bitcode_aarch64_end)},
  };
  constexpr std::string_view library = "bundle runtime";
  // The runtime checks the CPU before the bundle's code runs: it keeps the
  // baseline clang compiled it for.
  for (llvm::Function* f : cpu::link_bitcode(m, cpu::bitcode_for(m, copies, library), library))
    f->addFnAttr(cpu::kKeepTargetAttribute);
}

void link_native_runtime(llvm::Module& m) {
  static const cpu::EmbeddedBitcode copies[] = {
      {KILN_NATIVE_ARCH, cpu::embedded_bytes(kiln_bundle_native_bitcode, kiln_bundle_native_bitcode_end)},
  };
  constexpr std::string_view library = "native bundle runtime";
  cpu::link_bitcode(m, cpu::bitcode_for(m, copies, library), library);
}

}  // namespace kiln::bundle
