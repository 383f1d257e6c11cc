#pragma once
// Code generation for a lowered specialization: one LLVM module holding the
// entry function, which runs every step in order as straight-line code, and
// one function per fused elementwise loop.
//
// The entry function has the C signature
//   int32_t entry(Kernel* const* kernels, const void* const* constants,
//                 void* const* io, char* arena, RunStatus* status);
// `io` holds the inputs then the outputs, in Program order. It returns 0, or
// non-zero after a kernel failed (its message is in `status`).
#include <string>

#include "backends/cpu/jit.hpp"
#include "backends/cpu/program.hpp"
#include "runtime/ir/error.hpp"

namespace kiln::cpu {

struct RunStatus {
  std::string error;
  ir::ErrorKind kind = ir::ErrorKind::Internal;
};

using EntryFn = int32_t (*)(const Kernel* const* kernels, const void* const* constants, void* const* io, char* arena,
                            RunStatus* status);

// The host functions generated code calls, for the Jit's symbol table.
Jit::SymbolTable codegen_host_symbols();

using LoopFn = void (*)(void* const* args, int64_t begin, int64_t end);

// The entry function's name in every object (each links into its own JITDylib).
inline constexpr const char* kEntrySymbol = "kiln_entry";

// Generates the module for `program` and compiles it into a relocatable
// object (one codegen run). `loop_symbols` receives, per step, the name of
// its loop function ("" for kernel steps).
std::string compile_program(const Program& program, Jit& jit, std::vector<std::string>& loop_symbols);

struct CompiledProgram {
  std::shared_ptr<Jit::Library> library;  // owns the code
  EntryFn entry = nullptr;
  std::vector<LoopFn> loops;  // per step: its loop function, or null (for profiling step by step)
};

// Links an object from compile_program (or from the cache) and finds its functions.
CompiledProgram link_program(const std::string& object, const std::vector<std::string>& loop_symbols, Jit& jit);

// The host side of a generated parallel loop (what the entry function calls).
void run_loop(LoopFn fn, void* const* args, int64_t n, int64_t grain);
int32_t run_kernel(const Kernel* kernel, void* const* args, RunStatus* status);

}  // namespace kiln::cpu
