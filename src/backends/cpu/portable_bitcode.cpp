#include "backends/cpu/portable_bitcode.hpp"

#include <llvm/IR/Constants.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "backends/cpu/embedded_bitcode.hpp"
#include "runtime/ir/error.hpp"

// Defined by the assembly file CMake generates (.incbin of each target's .bc).
extern "C" {
extern const char kiln_portable_bitcode_x86_64[];
extern const char kiln_portable_bitcode_x86_64_end[];
extern const char kiln_portable_bitcode_aarch64[];
extern const char kiln_portable_bitcode_aarch64_end[];
}

namespace kiln::cpu {

namespace {

constexpr std::string_view kLibrary = "portable kernels";

std::string_view kernel_bitcode(const llvm::Module& m) {
  static const EmbeddedBitcode copies[] = {
      {"x86_64", embedded_bytes(kiln_portable_bitcode_x86_64, kiln_portable_bitcode_x86_64_end)},
      {"aarch64", embedded_bytes(kiln_portable_bitcode_aarch64, kiln_portable_bitcode_aarch64_end)},
  };
  return bitcode_for(m, copies, kLibrary);
}

bool is_kernel(llvm::StringRef name) { return name.starts_with("kiln_pk_"); }

// The two kernels whose code is large (packing, every micro-kernel shape):
// one copy per object, whatever the number of calls.
bool shared_always(llvm::StringRef name) { return name == "kiln_pk_gemm" || name == "kiln_pk_conv2d"; }

}  // namespace

void declare_portable_kernels(llvm::Module& m, const std::set<std::string>& names) {
  std::unique_ptr<llvm::Module> kernels = parse_bitcode(m, kernel_bitcode(m), kLibrary, true);
  for (const std::string& name : names) {
    const llvm::Function* f = kernels->getFunction(name);
    if (!f || f->isDeclaration() || !is_kernel(name))
      ir::fail(ir::ErrorKind::Internal, "'" + name + "' is not a kernel of the " + std::string(kLibrary));
    m.getOrInsertFunction(name, f->getFunctionType(), f->getAttributes());
  }
}

void link_kernel_bitcode(llvm::Module& m, VectorConfig vectors, KernelLinkage linkage) {
  const std::string_view bitcode = kernel_bitcode(m);
  std::set<std::string> declared;
  for (const llvm::Function& f : m)
    if (f.isDeclaration() && is_kernel(f.getName())) declared.insert(f.getName().str());
  // The micro-kernel shape follows the target's vector registers; as
  // constants, the variants not taken fold away. Defined before linking, for
  // the kernels' references to resolve to them, internal after.
  auto* i32 = llvm::Type::getInt32Ty(m.getContext());
  std::vector<llvm::GlobalVariable*> shape;
  for (auto [name, value] : {std::pair{"kiln_pk_vector_bytes", vectors.bytes}, {"kiln_pk_vector_registers", vectors.registers}})
    shape.push_back(new llvm::GlobalVariable(m, i32, true, llvm::GlobalValue::ExternalLinkage,
                                             llvm::ConstantInt::get(i32, uint64_t(value)), name));

  const bool shared = linkage == KernelLinkage::Shared;
  // Shared: the kernels asked for stay external, for every specialization to
  // call; a kernel one of them calls is a private copy (its own object may
  // be linked beside).
  const auto keep_external = [&](llvm::StringRef name) { return shared && declared.count(name.str()) > 0; };
  for (llvm::Function* f : link_bitcode(m, bitcode, kLibrary, keep_external, true)) {
    if (shared || !is_kernel(f->getName())) continue;
    f->removeFnAttr(llvm::Attribute::OptimizeNone);
    if (shared_always(f->getName())) {
      f->addFnAttr(llvm::Attribute::NoInline);
    } else {
      f->removeFnAttr(llvm::Attribute::NoInline);
      f->addFnAttr(llvm::Attribute::AlwaysInline);
    }
  }
  for (llvm::GlobalVariable* g : shape) g->setLinkage(llvm::GlobalValue::InternalLinkage);
}

}  // namespace kiln::cpu
