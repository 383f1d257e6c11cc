#pragma once
// The cpu backend's code generator host: one LLJIT per Jit, targeting the
// host CPU. Compiling (optimisation and codegen) and linking are separate
// steps, so that an object from the on-disk cache links without either. The
// host functions generated code may call are handed over as an explicit table
// of absolute symbols (no process-wide symbol search: see TOOLCHAIN-FACTS.md).
//
// LLVM headers stay inside jit.cpp: including ORC costs seconds per file.
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace kiln::cpu {

struct VectorConfig;

struct HostInfo {
  std::string triple;                 // "x86_64-pc-linux-gnu"
  std::string cpu;                    // "znver5"
  std::vector<std::string> features;  // sorted, "+avx2"-style; part of cache keys
};
HostInfo detect_host();

// A function carrying this attribute keeps its own target-cpu and
// target-features when compiled, instead of the target's: the bundle
// runtime, whose CPU check must run on any CPU of the architecture
// (src/bundle/runtime/bundle_abi.h).
inline constexpr const char* kKeepTargetAttribute = "kiln-keep-target";

// Whether a function of `m` may branch back (a block order with only forward
// branches proves it does not). Jit::compile emits modules without loops with
// no optimisation and fast instruction selection.
bool has_loops(const llvm::Module& m);

class Jit {
 public:
  // Host functions generated code may call, by symbol name. memcpy, memset
  // and the libm functions the code generator emits are always included.
  using SymbolTable = std::map<std::string, const void*>;

  // Throws ir::Error(Internal) if LLVM cannot target this machine.
  explicit Jit(const SymbolTable& host_symbols = {});
  ~Jit();
  Jit(const Jit&) = delete;
  Jit& operator=(const Jit&) = delete;

  // A context and an empty module with this JIT's data layout and triple.
  struct ModuleUnit {
    std::unique_ptr<llvm::LLVMContext> context;
    std::unique_ptr<llvm::Module> module;
  };
  ModuleUnit new_module(const std::string& name) const;

  // Verifies, optimises and compiles the module into a relocatable object
  // (one codegen run). Throws ir::Error(Internal) naming what failed.
  enum class Optimise {
    Loops,  // a short pipeline for generated loops; none (fast instruction selection) without loops
    Full,   // O3: inlined, specialised portable kernels
  };
  std::string compile(ModuleUnit unit, Optimise level = Optimise::Loops);
  // The same for a module the caller keeps (with its context).
  std::string compile(llvm::Module& module, Optimise level = Optimise::Loops);

  // An object linked into a JITDylib of its own, so that specializations
  // never clash on symbol names; unlinked when the last handle goes.
  class Library;
  // Compiled portable kernels: an object and the kernels it defines.
  struct KernelObject {
    std::set<std::string> kernels;
    std::string object;
  };
  using KernelObjects = std::vector<KernelObject>;
  // Links `object` (from compile(), or from the cache: no codegen at all).
  // `kernels`: the portable kernels it calls, which this Jit links once each
  // into a library of its own that every such object links against: from
  // `kernel_objects` (compiled for this CPU by an earlier process, from the
  // cache) where those define no kernel linked already, the others compiled
  // here (one codegen run for them all). Throws
  // ir::Error(Internal) if an object does not link. `more`: another object
  // of the same program, linked into the same library.
  std::shared_ptr<Library> link(const std::string& object, const std::set<std::string>& kernels = {},
                                const KernelObjects& kernel_objects = {}, std::string_view more = {});
  // The objects defining the named kernels, as linked (compiled first if
  // they were not yet), for the cache to keep.
  KernelObjects portable_kernel_objects(const std::set<std::string>& names);
  void* lookup(const Library& library, const std::string& symbol) const;

  const HostInfo& host() const;
  // The host's vector registers, for the portable kernels' micro-kernels.
  VectorConfig vector_config() const;
  // Modules compiled so far (for stats: a warm cache hit keeps this at 0).
  int64_t codegen_runs() const;

 private:
  void link_portable_kernels(const std::set<std::string>& names, const KernelObjects& cached);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A machine other than this one, for bundles: a triple, a CPU name ("" or
// "generic" for the baseline) and extra features ("+avx2,-avx512f").
struct Target {
  std::string triple;
  std::string cpu;
  std::string features;
};
// Compiles modules for one target into relocatable objects (PIC, small code
// model: what a later `cc` link accepts), with no JIT.
class TargetCompiler {
 public:
  // Throws ir::Error(InvalidArgument) naming the triple or CPU LLVM does not know.
  explicit TargetCompiler(Target target);
  ~TargetCompiler();
  Jit::ModuleUnit new_module(const std::string& name) const;
  std::string compile(Jit::ModuleUnit unit, Jit::Optimise level) const;
  VectorConfig vector_config() const;
  const Target& target() const;
  // Every feature the target has (its CPU's, the extra ones and what they
  // imply), by LLVM's names ("avx512f"), sorted.
  std::vector<std::string> features() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::cpu
