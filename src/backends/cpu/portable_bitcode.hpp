#pragma once
// The portable kernel library (src/backends/cpu/portable) as bitcode, one
// copy per target architecture, embedded in libkiln (see embedded_bitcode.hpp).
#include <cstdint>

namespace llvm {
class Module;
}

namespace kiln::cpu {

// What the GEMM micro-kernels are shaped for: the target's widest vector
// register and how many there are.
struct VectorConfig {
  int32_t bytes = 16;
  int32_t registers = 16;
};

enum class KernelLinkage {
  // Bundles: every function internal (what no step calls is dropped); the
  // kernels always-inline, so that each call is specialised for its constant
  // shapes, except GEMM and convolution, whose large code stays one copy.
  Specialized,
  // The JIT's kernel library, compiled once per process: the kiln_pk_*
  // functions stay external for every specialization to call.
  Shared,
};

// Links the whole kernel library into `m`, for the module's target triple.
// Throws ir::Error(Unsupported) if there is no bitcode for the triple's
// architecture, Internal if it does not link.
void link_kernel_bitcode(llvm::Module& m, VectorConfig vectors = {}, KernelLinkage linkage = KernelLinkage::Specialized);

// Declares every kiln_pk_* kernel in `m` (types from the embedded bitcode,
// bodies not read): what a specialization calling the JIT's shared kernel
// library needs.
void declare_portable_kernels(llvm::Module& m);

}  // namespace kiln::cpu
