#include "backends/cpu/embedded_bitcode.hpp"

#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Linker/Linker.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Triple.h>

#include <set>
#include <string>

#include "runtime/ir/error.hpp"

namespace kiln::cpu {

namespace {

std::string target_arch(const llvm::Module& m) {
  return llvm::Triple::getArchTypeName(llvm::Triple(m.getTargetTriple()).getArch()).str();
}

}  // namespace

std::string_view bitcode_for(const llvm::Module& m, std::span<const EmbeddedBitcode> copies, std::string_view library) {
  const std::string arch = target_arch(m);
  for (const EmbeddedBitcode& c : copies)
    if (c.arch == arch) return c.bytes;
  std::string known;
  for (const EmbeddedBitcode& c : copies) known += (known.empty() ? "" : ", ") + std::string(c.arch);
  ir::fail(ir::ErrorKind::Unsupported,
           "no " + std::string(library) + " for target '" + m.getTargetTriple() + "' (built for: " + known + ")");
}

std::unique_ptr<llvm::Module> parse_bitcode(const llvm::Module& m, std::string_view bitcode, std::string_view library,
                                            bool lazy) {
  const std::string name = "kiln " + std::string(library);
  auto buffer = llvm::MemoryBufferRef(llvm::StringRef(bitcode.data(), bitcode.size()), name);
  auto parsed = lazy ? llvm::getLazyBitcodeModule(buffer, m.getContext()) : llvm::parseBitcodeFile(buffer, m.getContext());
  if (!parsed) {
    std::string msg;
    llvm::raw_string_ostream os(msg);
    os << parsed.takeError();
    ir::fail(ir::ErrorKind::Internal,
             "embedded bitcode of the " + std::string(library) + " for " + target_arch(m) + " does not load: " + os.str());
  }
  return std::move(*parsed);
}

std::vector<llvm::Function*> link_bitcode(llvm::Module& m, std::string_view bitcode, std::string_view library,
                                          llvm::function_ref<bool(llvm::StringRef)> keep_external, bool only_needed) {
  // Linking only what is needed reads only those bodies.
  std::unique_ptr<llvm::Module> lib = parse_bitcode(m, bitcode, library, only_needed);
  lib->setTargetTriple(m.getTargetTriple());
  lib->setDataLayout(m.getDataLayout());
  std::set<std::string> functions, globals;
  for (const llvm::Function& f : *lib)
    if (!f.isDeclaration()) functions.insert(f.getName().str());
  for (const llvm::GlobalVariable& g : lib->globals())
    if (!g.isDeclaration()) globals.insert(g.getName().str());

  if (llvm::Linker::linkModules(m, std::move(lib), only_needed ? llvm::Linker::LinkOnlyNeeded : llvm::Linker::None))
    ir::fail(ir::ErrorKind::Internal,
             "embedded bitcode of the " + std::string(library) + " does not link into module '" + m.getName().str() + "'");
  std::vector<llvm::Function*> defined;
  for (llvm::Function& f : m) {
    if (f.isDeclaration() || !functions.count(f.getName().str())) continue;
    if (!keep_external || !keep_external(f.getName())) f.setLinkage(llvm::GlobalValue::InternalLinkage);
    defined.push_back(&f);
  }
  for (llvm::GlobalVariable& g : m.globals())
    if (!g.isDeclaration() && globals.count(g.getName().str())) g.setLinkage(llvm::GlobalValue::InternalLinkage);
  return defined;
}

}  // namespace kiln::cpu
