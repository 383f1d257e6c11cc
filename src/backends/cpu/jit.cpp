#include "backends/cpu/jit.hpp"

#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/CFG.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>

#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>

#include "backends/cpu/portable_bitcode.hpp"
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

// Every target LLVM was built with, for bundles built for another machine.
void init_all_targets() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeAllTargetInfos();
    llvm::InitializeAllTargets();
    llvm::InitializeAllTargetMCs();
    llvm::InitializeAllAsmPrinters();
    // Inline asm needs them: the bundle runtime reads CPUID through cpuid.h's.
    llvm::InitializeAllAsmParsers();
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
      {"fmodf", reinterpret_cast<const void*>(static_cast<float (*)(float, float)>(&::fmodf))},
      {"roundevenf", reinterpret_cast<const void*>(static_cast<float (*)(float)>(&::roundevenf))},
      // Loops of other types compute as the reference kernels do, in double.
      {"exp", reinterpret_cast<const void*>(static_cast<double (*)(double)>(&::exp))},
      {"log", reinterpret_cast<const void*>(static_cast<double (*)(double)>(&::log))},
      {"pow", reinterpret_cast<const void*>(static_cast<double (*)(double, double)>(&::pow))},
      {"fmod", reinterpret_cast<const void*>(static_cast<double (*)(double, double)>(&::fmod))},
      {"sqrt", reinterpret_cast<const void*>(static_cast<double (*)(double)>(&::sqrt))},
      {"floor", reinterpret_cast<const void*>(static_cast<double (*)(double)>(&::floor))},
      {"ceil", reinterpret_cast<const void*>(static_cast<double (*)(double)>(&::ceil))},
      {"roundeven", reinterpret_cast<const void*>(static_cast<double (*)(double)>(&::roundeven))},
      {"sin", reinterpret_cast<const void*>(static_cast<double (*)(double)>(&::sin))},
      {"cos", reinterpret_cast<const void*>(static_cast<double (*)(double)>(&::cos))},
      {"tan", reinterpret_cast<const void*>(static_cast<double (*)(double)>(&::tan))},
      {"asin", reinterpret_cast<const void*>(static_cast<double (*)(double)>(&::asin))},
      {"acos", reinterpret_cast<const void*>(static_cast<double (*)(double)>(&::acos))},
      {"atan", reinterpret_cast<const void*>(static_cast<double (*)(double)>(&::atan))},
      {"sinh", reinterpret_cast<const void*>(static_cast<double (*)(double)>(&::sinh))},
      {"cosh", reinterpret_cast<const void*>(static_cast<double (*)(double)>(&::cosh))},
      {"asinh", reinterpret_cast<const void*>(static_cast<double (*)(double)>(&::asinh))},
      {"acosh", reinterpret_cast<const void*>(static_cast<double (*)(double)>(&::acosh))},
      {"atanh", reinterpret_cast<const void*>(static_cast<double (*)(double)>(&::atanh))},
  };
}

// A target machine builds its subtarget on first use (it parses the host's
// hundred-odd features and fills the lowering tables): with a new machine per
// compile, each of lenet's specializations after the first took 5.4 ms
// instead of 4.2. A machine serves one compile at a time, so compiles borrow
// one and give it back.
class MachinePool {
 public:
  explicit MachinePool(const llvm::orc::JITTargetMachineBuilder& builder) : builder_(builder) {}

  class Borrowed {
   public:
    explicit Borrowed(MachinePool& pool) : pool_(pool) {
      {
        std::lock_guard<std::mutex> lock(pool_.mutex_);
        if (!pool_.idle_.empty()) {
          machine_ = std::move(pool_.idle_.back());
          pool_.idle_.pop_back();
        }
      }
      if (!machine_) machine_ = take(pool_.builder_.createTargetMachine(), "cannot target this CPU");
    }
    ~Borrowed() {
      std::lock_guard<std::mutex> lock(pool_.mutex_);
      pool_.idle_.push_back(std::move(machine_));
    }
    Borrowed(const Borrowed&) = delete;
    Borrowed& operator=(const Borrowed&) = delete;
    llvm::TargetMachine& operator*() const { return *machine_; }

   private:
    MachinePool& pool_;
    std::unique_ptr<llvm::TargetMachine> machine_;
  };

 private:
  llvm::orc::JITTargetMachineBuilder builder_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<llvm::TargetMachine>> idle_;
};

}  // namespace

// A cycle needs an edge to the same or an earlier block, so a function whose
// branches all go forward in block order has none.
bool has_loops(const llvm::Module& m) {
  for (const llvm::Function& f : m) {
    std::unordered_map<const llvm::BasicBlock*, size_t> order;
    for (const llvm::BasicBlock& block : f) order.emplace(&block, order.size());
    for (const llvm::BasicBlock& block : f)
      for (const llvm::BasicBlock* next : llvm::successors(&block))
        if (order.at(next) <= order.at(&block)) return true;
  }
  return false;
}

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
  std::unique_ptr<MachinePool> machines;
  std::unique_ptr<llvm::orc::LLJIT> jit;
  llvm::orc::SymbolMap host_symbols;
  std::atomic<int64_t> codegen_runs{0};
  std::atomic<int64_t> libraries{0};
  std::mutex kernels_mutex;                        // guards the three below
  llvm::orc::JITDylib* kernels = nullptr;          // the portable kernels linked so far, once one is
  KernelObjects kernel_objects;                    // their objects
  std::map<std::string, size_t> kernel_object_of;  // kernel -> its object's index
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
  impl_->machines = std::make_unique<MachinePool>(jtmb);
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

namespace {

std::string emit(llvm::Module& m, llvm::TargetMachine& machine) {
  llvm::orc::SimpleCompiler compiler(machine);
  auto object = take(compiler(m), "cannot compile module '" + m.getName().str() + "'");
  return object->getBuffer().str();
}

VectorConfig vectors_of(const llvm::TargetMachine& machine) {
  const llvm::MCSubtargetInfo* sti = machine.getMCSubtargetInfo();
  VectorConfig v;
  if (machine.getTargetTriple().isAArch64()) {
    v.registers = 32;
  } else if (sti->checkFeatures("+avx512f")) {
    v.bytes = 64;
    v.registers = 32;
  } else if (sti->checkFeatures("+avx")) {
    v.bytes = 32;
  }
  return v;
}

// Verifies, optimises for `machine` and emits an object.
std::string optimise_and_emit(llvm::Module& m, llvm::TargetMachine& machine, Jit::Optimise level) {
  std::string problems;
  llvm::raw_string_ostream os(problems);
  // Debian builds LLVM without assertions: verify here, or bad IR crashes later.
  if (llvm::verifyModule(m, &os))
    ir::fail(ir::ErrorKind::Internal, "generated module '" + m.getName().str() + "' is invalid: " + os.str());
  const bool wide = vectors_of(machine).bytes == 64;
  for (llvm::Function& f : m) {
    if (f.isDeclaration() || f.hasFnAttribute(kKeepTargetAttribute)) continue;
    f.addFnAttr("target-cpu", machine.getTargetCPU());
    f.addFnAttr("target-features", machine.getTargetFeatureString());
    // LLVM tunes Intel's AVX-512 server CPUs to vectorise at 256 bits (older
    // ones clocked down on 512-bit code); oneDNN's kernels run at 512 bits
    // anyway. A generated SiLU loop over 401k values took 0.23 ms at 256
    // bits, 0.20 at 512, and 0.12-0.14 at 512 with exp's multiply-adds fused
    // (codegen.cpp).
    if (wide) f.addFnAttr("prefer-vector-width", "512");
  }
  if (level == Jit::Optimise::Loops && !has_loops(m)) {
    // Only calls and branches (a program of kernel calls): nothing for the
    // optimiser to find, and LLVM's fast instruction selector emits it in
    // about half the time (mlp: 3.6 -> 2.2 ms in a new process).
    // For this module only: the machine is used again, and LLVM's pass
    // setup also switches its options to fast selection for good.
    struct Restore {
      llvm::TargetMachine& machine;
      llvm::CodeGenOptLevel level;
      llvm::TargetOptions options;
      ~Restore() {
        machine.setOptLevel(level);
        machine.Options = options;
      }
    } restore{machine, machine.getOptLevel(), machine.Options};
    machine.setOptLevel(llvm::CodeGenOptLevel::None);
    return emit(m, machine);
  }
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&machine);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  // Generated code is straight-line calls plus simple loops already in SSA
  // form: what pays is hoisting invariants and vectorising the loops. The
  // full O2 pipeline gave the same loops at twice the compile time.
  llvm::ModulePassManager mpm;
  const char* pipeline = level == Jit::Optimise::Full ? "default<O3>"
                                                      : "function(instcombine,simplifycfg,loop-simplify,lcssa,loop-mssa(licm),"
                                                        "loop-vectorize,instcombine,simplifycfg)";
  if (auto err = pb.parsePassPipeline(mpm, pipeline)) fail_llvm("cannot build the optimisation pipeline", std::move(err));
  mpm.run(m, mam);
  return emit(m, machine);
}

}  // namespace

std::string Jit::compile(ModuleUnit unit, Optimise level) { return compile(*unit.module, level); }

std::string Jit::compile(llvm::Module& module, Optimise level) {
  // Without a target machine the vectoriser knows no vector registers.
  MachinePool::Borrowed machine(*impl_->machines);
  std::string object = optimise_and_emit(module, *machine, level);
  impl_->codegen_runs++;
  return object;
}

VectorConfig Jit::vector_config() const {
  MachinePool::Borrowed machine(*impl_->machines);
  return vectors_of(*machine);
}

struct TargetCompiler::Impl {
  Target target;
  std::unique_ptr<llvm::TargetMachine> machine;
};

TargetCompiler::TargetCompiler(Target target) : impl_(std::make_unique<Impl>()) {
  init_all_targets();
  const std::string triple = llvm::Triple::normalize(target.triple);
  std::string error;
  const llvm::Target* t = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!t) ir::fail(ir::ErrorKind::InvalidArgument, "target '" + target.triple + "' is unknown to LLVM: " + error);
  const std::string cpu = target.cpu.empty() ? "generic" : target.cpu;
  llvm::TargetOptions options;
  impl_->machine.reset(t->createTargetMachine(triple, cpu, target.features, options, llvm::Reloc::PIC_, llvm::CodeModel::Small,
                                              llvm::CodeGenOptLevel::Aggressive));
  if (!impl_->machine) ir::fail(ir::ErrorKind::InvalidArgument, "LLVM cannot target '" + triple + "' with cpu '" + cpu + "'");
  if (cpu != "generic" && !impl_->machine->getMCSubtargetInfo()->isCPUStringValid(cpu))
    ir::fail(ir::ErrorKind::InvalidArgument, "cpu '" + cpu + "' is unknown for target '" + triple + "'");
  target.triple = triple;
  impl_->target = std::move(target);
}

TargetCompiler::~TargetCompiler() = default;

Jit::ModuleUnit TargetCompiler::new_module(const std::string& name) const {
  Jit::ModuleUnit u;
  u.context = std::make_unique<llvm::LLVMContext>();
  u.module = std::make_unique<llvm::Module>(name, *u.context);
  u.module->setDataLayout(impl_->machine->createDataLayout());
  u.module->setTargetTriple(impl_->target.triple);
  return u;
}

std::string TargetCompiler::compile(Jit::ModuleUnit unit, Jit::Optimise level) const {
  return optimise_and_emit(*unit.module, *impl_->machine, level);
}

VectorConfig TargetCompiler::vector_config() const { return vectors_of(*impl_->machine); }
const Target& TargetCompiler::target() const { return impl_->target; }

std::vector<std::string> TargetCompiler::features() const {
  const llvm::MCSubtargetInfo* sti = impl_->machine->getMCSubtargetInfo();
  std::vector<std::string> names;
  for (const llvm::SubtargetFeatureKV& f : sti->getAllProcessorFeatures())
    if (sti->getFeatureBits().test(f.Value)) names.push_back(f.Key);
  std::sort(names.begin(), names.end());
  return names;
}

void Jit::link_portable_kernels(const std::set<std::string>& names, const KernelObjects& cached) {
  if (names.empty()) return;
  std::lock_guard<std::mutex> lock(impl_->kernels_mutex);
  if (!impl_->kernels) {
    auto dylib = impl_->jit->createJITDylib("kiln_portable_kernels");
    if (!dylib) fail_llvm("cannot create a JITDylib", dylib.takeError());
    if (auto err = dylib->define(llvm::orc::absoluteSymbols(impl_->host_symbols)))
      fail_llvm("cannot define host symbols", std::move(err));
    impl_->kernels = &*dylib;
  }
  auto& linked = impl_->kernel_object_of;
  const auto add = [&](KernelObject k) {
    auto tracker = impl_->kernels->createResourceTracker();
    const std::string what = "portable kernel '" + *k.kernels.begin() + "'";
    if (auto err = impl_->jit->addObjectFile(tracker, llvm::MemoryBuffer::getMemBufferCopy(k.object, what)))
      fail_llvm("cannot link " + what, std::move(err));
    // Materialise now: a bad object fails here, not in a later lookup, and
    // goes again (a bad cached object is followed by a compile).
    if (auto sym = impl_->jit->lookup(*impl_->kernels, *k.kernels.begin()); !sym) {
      llvm::consumeError(tracker->remove());
      fail_llvm("cannot link " + what, sym.takeError());
    }
    for (const std::string& name : k.kernels) linked[name] = impl_->kernel_objects.size();
    impl_->kernel_objects.push_back(std::move(k));
  };
  // A cached object defining a kernel linked already would clash with it.
  for (const KernelObject& k : cached)
    if (std::none_of(k.kernels.begin(), k.kernels.end(), [&](const std::string& name) { return linked.count(name); })) add(k);
  std::set<std::string> missing;
  for (const std::string& name : names)
    if (!linked.count(name)) missing.insert(name);
  if (missing.empty()) return;
  // Only these kernels, in one module, so that what they share (GEMM's code
  // in convolution's) compiles once: the whole library took seconds to
  // compile, whatever a specialization called.
  auto unit = new_module("kiln_portable_kernels");
  MachinePool::Borrowed machine(*impl_->machines);
  declare_portable_kernels(*unit.module, missing);
  link_kernel_bitcode(*unit.module, vectors_of(*machine), KernelLinkage::Shared);
  std::string code = optimise_and_emit(*unit.module, *machine, Optimise::Full);
  impl_->codegen_runs++;
  add({std::move(missing), std::move(code)});
}

Jit::KernelObjects Jit::portable_kernel_objects(const std::set<std::string>& names) {
  link_portable_kernels(names, {});
  std::lock_guard<std::mutex> lock(impl_->kernels_mutex);
  std::set<size_t> which;
  for (const std::string& name : names) which.insert(impl_->kernel_object_of.at(name));
  KernelObjects objects;
  for (size_t i : which) objects.push_back(impl_->kernel_objects[i]);
  return objects;
}

std::shared_ptr<Jit::Library> Jit::link(const std::string& object, const std::set<std::string>& kernels,
                                        const KernelObjects& kernel_objects, std::string_view more) {
  const bool portable_kernels = !kernels.empty();
  if (portable_kernels) link_portable_kernels(kernels, kernel_objects);
  auto created = impl_->jit->createJITDylib("kiln_" + std::to_string(impl_->libraries++));
  if (!created) fail_llvm("cannot create a JITDylib", created.takeError());
  llvm::orc::JITDylib& dylib = *created;
  auto library = std::make_shared<Library>(*impl_, dylib);
  if (portable_kernels) {
    // Ahead of the process's symbols, where a program could define the same
    // names (libkiln's own baseline build of the kernels is hidden).
    llvm::orc::JITDylibSearchOrder order;
    dylib.withLinkOrderDo([&](const llvm::orc::JITDylibSearchOrder& current) { order = current; });
    const auto after_self = order.empty() ? order.begin() : order.begin() + 1;
    order.insert(after_self, {impl_->kernels, llvm::orc::JITDylibLookupFlags::MatchExportedSymbolsOnly});
    dylib.setLinkOrder(std::move(order), false);
  }
  if (auto err = dylib.define(llvm::orc::absoluteSymbols(impl_->host_symbols)))
    fail_llvm("cannot define host symbols", std::move(err));
  if (auto err = impl_->jit->addObjectFile(dylib, llvm::MemoryBuffer::getMemBufferCopy(object, "kiln-object")))
    fail_llvm("cannot link a compiled object", std::move(err));
  if (!more.empty())
    if (auto err = impl_->jit->addObjectFile(dylib, llvm::MemoryBuffer::getMemBufferCopy(more, "kiln-object-more")))
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
