#include "backends/cpu/portable_bitcode.hpp"

#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Linker/Linker.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Triple.h>

#include <cstdint>
#include <set>

#include "backends/cpu/jit.hpp"
#include "runtime/ir/error.hpp"

// Defined by the assembly file CMake generates (.incbin of each target's .bc).
extern "C" {
extern const char kiln_portable_bitcode_x86_64[];
extern const char kiln_portable_bitcode_x86_64_end[];
extern const char kiln_portable_bitcode_aarch64[];
extern const char kiln_portable_bitcode_aarch64_end[];
extern const char kiln_bundle_runtime_bitcode_x86_64[];
extern const char kiln_bundle_runtime_bitcode_x86_64_end[];
extern const char kiln_bundle_runtime_bitcode_aarch64[];
extern const char kiln_bundle_runtime_bitcode_aarch64_end[];
extern const char kiln_bundle_native_bitcode[];
extern const char kiln_bundle_native_bitcode_end[];
}

namespace kiln::cpu {

namespace {

struct Bitcode {
  BitcodeLibrary library;
  const char* arch;
  const char* begin;
  const char* end;
};

const Bitcode kBitcode[] = {
    {BitcodeLibrary::Kernels, "x86_64", kiln_portable_bitcode_x86_64, kiln_portable_bitcode_x86_64_end},
    {BitcodeLibrary::Kernels, "aarch64", kiln_portable_bitcode_aarch64, kiln_portable_bitcode_aarch64_end},
    {BitcodeLibrary::BundleRuntime, "x86_64", kiln_bundle_runtime_bitcode_x86_64, kiln_bundle_runtime_bitcode_x86_64_end},
    {BitcodeLibrary::BundleRuntime, "aarch64", kiln_bundle_runtime_bitcode_aarch64, kiln_bundle_runtime_bitcode_aarch64_end},
    {BitcodeLibrary::BundleNative, KILN_NATIVE_ARCH, kiln_bundle_native_bitcode, kiln_bundle_native_bitcode_end},
};

}  // namespace

std::vector<std::string> bitcode_architectures() { return {"x86_64", "aarch64"}; }

namespace {

// The library's bitcode for the module's target, parsed into its context;
// `lazy`: function bodies are not read (declarations suffice).
std::unique_ptr<llvm::Module> load(const llvm::Module& m, BitcodeLibrary library, bool lazy) {
  const llvm::Triple triple(m.getTargetTriple());
  const std::string arch = llvm::Triple::getArchTypeName(triple.getArch()).str();
  const Bitcode* bc = nullptr;
  for (const auto& b : kBitcode)
    if (arch == b.arch && b.library == library) bc = &b;
  if (!bc) {
    std::string known;
    for (const auto& a : bitcode_architectures()) known += (known.empty() ? "" : ", ") + a;
    ir::fail(ir::ErrorKind::Unsupported,
             "no portable kernels for target '" + m.getTargetTriple() + "' (built for: " + known + ")");
  }
  auto buffer = llvm::MemoryBufferRef(llvm::StringRef(bc->begin, size_t(bc->end - bc->begin)), "kiln-portable-kernels");
  auto parsed = lazy ? llvm::getLazyBitcodeModule(buffer, m.getContext()) : llvm::parseBitcodeFile(buffer, m.getContext());
  if (!parsed) {
    std::string msg;
    llvm::raw_string_ostream os(msg);
    os << parsed.takeError();
    ir::fail(ir::ErrorKind::Internal, "embedded bitcode for " + arch + " does not load: " + os.str());
  }
  return std::move(*parsed);
}

// The two kernels whose code is large (packing, every micro-kernel shape):
// one copy per object, whatever the number of calls.
bool shared_always(llvm::StringRef name) { return name == "kiln_pk_gemm" || name == "kiln_pk_conv2d"; }

}  // namespace

void declare_portable_kernels(llvm::Module& m) {
  std::unique_ptr<llvm::Module> kernels = load(m, BitcodeLibrary::Kernels, true);
  for (const llvm::Function& f : *kernels)
    if (f.getName().starts_with("kiln_pk_") && !f.isDeclaration())
      m.getOrInsertFunction(f.getName(), f.getFunctionType(), f.getAttributes());
}

void link_bitcode(llvm::Module& m, BitcodeLibrary library, VectorConfig vectors, KernelLinkage linkage) {
  llvm::LLVMContext& ctx = m.getContext();
  std::unique_ptr<llvm::Module> kernels = load(m, library, false);
  kernels->setTargetTriple(m.getTargetTriple());
  kernels->setDataLayout(m.getDataLayout());
  std::set<std::string> defined;
  for (const llvm::Function& f : *kernels)
    if (!f.isDeclaration()) defined.insert(f.getName().str());
  for (const llvm::GlobalVariable& g : kernels->globals())
    if (!g.isDeclaration()) defined.insert(g.getName().str());

  // The micro-kernel shape follows the target's vector registers; as
  // constants, the variants not taken fold away.
  if (library == BitcodeLibrary::Kernels) {
    auto* i32 = llvm::Type::getInt32Ty(ctx);
    for (auto [name, value] :
         {std::pair{"kiln_pk_vector_bytes", vectors.bytes}, {"kiln_pk_vector_registers", vectors.registers}}) {
      auto* g = new llvm::GlobalVariable(m, i32, true, llvm::GlobalValue::ExternalLinkage,
                                         llvm::ConstantInt::get(i32, uint64_t(value)), name);
      defined.insert(g->getName().str());
    }
  }

  if (llvm::Linker::linkModules(m, std::move(kernels)))
    ir::fail(ir::ErrorKind::Internal, "embedded bitcode does not link into module '" + m.getName().str() + "'");
  for (llvm::Function& f : m) {
    if (f.isDeclaration() || !defined.count(f.getName().str())) continue;
    const bool kernel = library == BitcodeLibrary::Kernels && f.getName().starts_with("kiln_pk_");
    if (kernel && linkage == KernelLinkage::Shared) continue;  // stays external, for every specialization to call
    f.setLinkage(llvm::GlobalValue::InternalLinkage);
    // The runtime checks the CPU before the bundle's code runs: it keeps the
    // baseline clang compiled it for.
    if (library == BitcodeLibrary::BundleRuntime) f.addFnAttr(kKeepTargetAttribute);
    if (kernel) {
      f.removeFnAttr(llvm::Attribute::OptimizeNone);
      if (shared_always(f.getName())) {
        f.addFnAttr(llvm::Attribute::NoInline);
      } else {
        f.removeFnAttr(llvm::Attribute::NoInline);
        f.addFnAttr(llvm::Attribute::AlwaysInline);
      }
    }
  }
  for (llvm::GlobalVariable& g : m.globals())
    if (!g.isDeclaration() && defined.count(g.getName().str())) g.setLinkage(llvm::GlobalValue::InternalLinkage);
}

}  // namespace kiln::cpu
