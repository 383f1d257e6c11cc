#pragma once
// The portable kernel library (src/backends/cpu/portable) as bitcode, one
// copy per target architecture, embedded in libkiln (see embedded_bitcode.hpp).
#include <cstdint>
#include <set>
#include <string>

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
  // Bundles: every function internal; the kernels always-inline, so that
  // each call is specialised for its constant shapes, except GEMM and
  // convolution, whose large code stays one copy.
  Specialized,
  // The JIT's kernels, each compiled once per process: the kernels `m`
  // declares stay external, for every specialization to call.
  Shared,
};

// Links the kernels `m` declares (declare_portable_kernels) and what they
// call from the kernel library for the module's target triple; nothing else
// of the library is read, linked or optimised. Throws ir::Error(Unsupported)
// if there is no bitcode for the triple's architecture, Internal if it does
// not link.
void link_kernel_bitcode(llvm::Module& m, VectorConfig vectors = {}, KernelLinkage linkage = KernelLinkage::Specialized);

// Declares the named kiln_pk_* kernels in `m` (types from the embedded
// bitcode, bodies not read): what calls to them need. Throws
// ir::Error(Internal) naming one the library does not define.
void declare_portable_kernels(llvm::Module& m, const std::set<std::string>& names);

}  // namespace kiln::cpu
