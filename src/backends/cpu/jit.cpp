#include "backends/cpu/jit.hpp"

#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Host.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>

#include "runtime/ir/error.hpp"

namespace kiln::cpu {

namespace {

void init_llvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

[[noreturn]] void fail_llvm(const std::string& what, llvm::Error err) {
  std::string msg;
  llvm::raw_string_ostream os(msg);
  os << err;
  ir::fail(ir::ErrorKind::Internal, what + ": " + os.str());
}

template <typename T>
T take(llvm::Expected<T> value, const std::string& what) {
  if (!value) fail_llvm(what, value.takeError());
  return std::move(*value);
}

// Functions LLVM may emit calls to on its own (memory intrinsics, libm for
// math that does not vectorise), always available to generated code.
Jit::SymbolTable builtin_symbols() {
  return {
      {"memcpy", reinterpret_cast<const void*>(&std::memcpy)},
      {"memmove", reinterpret_cast<const void*>(&std::memmove)},
      {"memset", reinterpret_cast<const void*>(&std::memset)},
      {"expf", reinterpret_cast<const void*>(static_cast<float (*)(float)>(&::expf))},
      {"logf", reinterpret_cast<const void*>(static_cast<float (*)(float)>(&::logf))},
      {"tanhf", reinterpret_cast<const void*>(static_cast<float (*)(float)>(&::tanhf))},
      {"erff", reinterpret_cast<const void*>(static_cast<float (*)(float)>(&::erff))},
      {"powf", reinterpret_cast<const void*>(static_cast<float (*)(float, float)>(&::powf))},
      {"sqrtf", reinterpret_cast<const void*>(static_cast<float (*)(float)>(&::sqrtf))},
  };
}

}  // namespace

HostInfo detect_host() {
  init_llvm();
  HostInfo h;
  h.triple = llvm::sys::getProcessTriple();
  h.cpu = llvm::sys::getHostCPUName().str();
  // CPUID may differ from /proc/cpuinfo under a hypervisor; LLVM reads CPUID,
  // which is what the code will actually run on.
  for (const auto& [name, on] : llvm::sys::getHostCPUFeatures()) {
    std::string feature = on ? "+" : "-";
    feature += name.str();
    h.features.push_back(feature);
  }
  std::sort(h.features.begin(), h.features.end());
  return h;
}

struct Jit::Impl {
  HostInfo host;
  std::unique_ptr<llvm::orc::JITTargetMachineBuilder> machine;
  std::unique_ptr<llvm::orc::LLJIT> jit;
  llvm::orc::SymbolMap host_symbols;
  std::atomic<int64_t> codegen_runs{0};
  std::atomic<int64_t> libraries{0};
};

class Jit::Library {
 public:
  Library(Impl& impl, llvm::orc::JITDylib& dylib) : impl_(impl), dylib_(dylib) {}
  ~Library() {
    // Frees the code; nothing can call it any more (the last handle is gone).
    llvm::consumeError(impl_.jit->getExecutionSession().removeJITDylib(dylib_));
  }
  llvm::orc::JITDylib& dylib() const { return dylib_; }

 private:
  Impl& impl_;
  llvm::orc::JITDylib& dylib_;
};

Jit::Jit(const SymbolTable& host_symbols) : impl_(std::make_unique<Impl>()) {
  init_llvm();
  impl_->host = detect_host();
  auto jtmb = take(llvm::orc::JITTargetMachineBuilder::detectHost(), "cannot target this CPU");
  jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Default);
  // PIC + small code model: what JITLink and a later `cc` link of the same object accept.
  jtmb.setRelocationModel(llvm::Reloc::PIC_);
  jtmb.setCodeModel(llvm::CodeModel::Small);
  impl_->machine = std::make_unique<llvm::orc::JITTargetMachineBuilder>(jtmb);
  impl_->jit = take(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(jtmb)).create(), "cannot create the JIT");
  SymbolTable all = builtin_symbols();
  for (const auto& [name, address] : host_symbols) all[name] = address;
  for (const auto& [name, address] : all)
    impl_->host_symbols[impl_->jit->mangleAndIntern(name)] = {llvm::orc::ExecutorAddr::fromPtr(address),
                                                              llvm::JITSymbolFlags::Exported};
}

Jit::~Jit() = default;

Jit::ModuleUnit Jit::new_module(const std::string& name) const {
  ModuleUnit u;
  u.context = std::make_unique<llvm::LLVMContext>();
  u.module = std::make_unique<llvm::Module>(name, *u.context);
  // The module's layout must match the JIT's target machine.
  u.module->setDataLayout(impl_->jit->getDataLayout());
  u.module->setTargetTriple(impl_->jit->getTargetTriple().str());
  return u;
}

std::string Jit::compile(ModuleUnit unit) {
  llvm::Module& m = *unit.module;
  std::string problems;
  llvm::raw_string_ostream os(problems);
  // Debian builds LLVM without assertions: verify here, or bad IR crashes later.
  if (llvm::verifyModule(m, &os)) ir::fail(ir::ErrorKind::Internal, "generated module '" + m.getName().str() + "' is invalid: " + os.str());
  // A target machine per module (they are not shared across threads): without
  // one the vectoriser knows no vector registers.
  auto machine = take(impl_->machine->createTargetMachine(), "cannot target this CPU");
  for (llvm::Function& f : m) {
    if (f.isDeclaration()) continue;
    f.addFnAttr("target-cpu", machine->getTargetCPU());
    f.addFnAttr("target-features", machine->getTargetFeatureString());
  }
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(machine.get());
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  // Generated code is straight-line calls plus simple loops already in SSA
  // form: what pays is hoisting invariants and vectorising the loops. The
  // full O2 pipeline gave the same loops at twice the compile time.
  llvm::ModulePassManager mpm;
  if (auto err = pb.parsePassPipeline(mpm, "function(instcombine,simplifycfg,loop-simplify,lcssa,loop-mssa(licm),"
                                           "loop-vectorize,instcombine,simplifycfg)"))
    fail_llvm("cannot build the optimisation pipeline", std::move(err));
  mpm.run(m, mam);
  llvm::orc::SimpleCompiler compiler(*machine);
  auto object = take(compiler(m), "cannot compile module '" + m.getName().str() + "'");
  impl_->codegen_runs++;
  return object->getBuffer().str();
}

std::shared_ptr<Jit::Library> Jit::link(const std::string& object) {
  auto created = impl_->jit->createJITDylib("kiln_" + std::to_string(impl_->libraries++));
  if (!created) fail_llvm("cannot create a JITDylib", created.takeError());
  llvm::orc::JITDylib& dylib = *created;
  auto library = std::make_shared<Library>(*impl_, dylib);
  if (auto err = dylib.define(llvm::orc::absoluteSymbols(impl_->host_symbols)))
    fail_llvm("cannot define host symbols", std::move(err));
  if (auto err = impl_->jit->addObjectFile(dylib, llvm::MemoryBuffer::getMemBufferCopy(object, "kiln-object")))
    fail_llvm("cannot link a compiled object", std::move(err));
  return library;
}

void* Jit::lookup(const Library& library, const std::string& symbol) const {
  auto addr = take(impl_->jit->lookup(library.dylib(), symbol), "symbol '" + symbol + "' not found");
  return addr.toPtr<void*>();
}

const HostInfo& Jit::host() const { return impl_->host; }
int64_t Jit::codegen_runs() const { return impl_->codegen_runs.load(); }

}  // namespace kiln::cpu
