#pragma once
// Code generation for a lowered specialization: one LLVM module holding the
// entry function, which runs every step in order as straight-line code, one
// function per fused elementwise loop, and one per portable kernel call (the
// kernel called with its shapes as constants).
//
// The entry function has the C signature
//   int32_t entry(Kernel* const* kernels, const void* const* constants,
//                 void* const* io, char* arena, RunStatus* status,
//                 const kiln_pk_threads* threads);
// `io` holds the inputs then the outputs, in Program order. It returns 0, or
// non-zero after a step failed: a host kernel's message is in `status`, a
// portable call's step and status code in status->step and status->code.
// Parallel loops and portable kernels split their work through `threads`
// (serial if it is null).
#include <set>
#include <string>
#include <vector>

#include "backends/cpu/jit.hpp"
#include "backends/cpu/portable/kernels.h"
#include "backends/cpu/program.hpp"
#include "runtime/ir/error.hpp"

namespace llvm {
class Module;
}

namespace kiln::cpu {

struct RunStatus {
  std::string error;
  ir::ErrorKind kind = ir::ErrorKind::Internal;
  int64_t step = -1;  // a portable call that failed, and its status
  int64_t code = 0;
};

using EntryFn = int32_t (*)(const Kernel* const* kernels, const void* const* constants, void* const* io, char* arena,
                            RunStatus* status, const kiln_pk_threads* threads);

// The host functions generated code calls, for the Jit's symbol table.
Jit::SymbolTable codegen_host_symbols();

// Elements per chunk of a generated loop: below that, threads cost more than they save.
inline constexpr int64_t kLoopChunk = 16384;
inline int64_t loop_chunks(int64_t elements) { return elements <= kLoopChunk ? 1 : (elements + kLoopChunk - 1) / kLoopChunk; }
// A loop step's function (a kiln_pk_task_fn over its argument array) runs
// chunks [begin, end); a call step's returns its status.
using CallFn = int64_t (*)(const kiln_pk_threads* threads, void* const* args);

// The entry function's name in every object (each links into its own JITDylib).
inline constexpr const char* kEntrySymbol = "kiln_entry";

// A program's code: the entry function (and its calls' wrappers), compiled
// unoptimised with LLVM's fast instruction selector, and the loop functions,
// optimised and vectorised ("" without loops). Two objects, because
// optimising code generation over the entry's straight-line calls cost more
// than the loops did (efficientnet_b0: 22 against 7 ms).
struct ProgramObjects {
  std::string entry, loops;
};

// Generates the code for `program` and compiles it into relocatable objects
// (a codegen run each). `step_symbols` receives, per step, the name of its
// loop or call function ("" for host kernel steps).
ProgramObjects compile_program(const Program& program, Jit& jit, std::vector<std::string>& step_symbols);

// The entry of one specialization of a frozen bundle, added to `m` (which
// must already declare the portable kernels it calls), a kiln_bundle_entry_fn:
//   int32_t name(const uint8_t* weights, void* const* io, uint8_t* arena,
//                const kiln_pk_threads* threads, void* native);
// Constant i lives at weights + constant_offsets[i]. The k-th oneDNN step
// runs as primitive k of `native` (bundle_native.h). Returns the status of
// the step that failed, or 0. Throws ir::Error(Unsupported) naming a step
// that needs a host kernel other than a oneDNN primitive.
void emit_bundle_entry(llvm::Module& m, const Program& program, const std::string& name,
                       const std::vector<int64_t>& constant_offsets);

struct CompiledProgram {
  std::shared_ptr<Jit::Library> library;  // owns the code
  EntryFn entry = nullptr;
  std::vector<void*> steps;  // per step: its LoopFn or CallFn, or null (for profiling step by step)
};

// The portable kernels a program's steps call.
std::set<std::string> called_kernels(const Program& program);

// Links the objects from compile_program (or from the cache) and finds
// their functions; `kernels`: the portable kernels the program calls, and
// `kernel_objects` those from the cache, if there are any.
CompiledProgram link_program(const ProgramObjects& objects, const std::vector<std::string>& step_symbols,
                             const std::set<std::string>& kernels, Jit& jit, const Jit::KernelObjects& kernel_objects = {});

// What a loop step's function reads after the step's buffers in its
// argument array (as integers in pointer slots): the shape and strides of a
// loop whose function serves every loop alike but for those.
std::vector<int64_t> loop_arguments(const Loop& loop);

// A parallel_for over TBB, inside the Runtime's task arena: a portable
// program's threads (a native one's are omp_team.hpp's team_threads).
const kiln_pk_threads* tbb_threads();
int32_t run_kernel(const Kernel* kernel, void* const* args, RunStatus* status);
// What a portable call's non-zero status means, for the error message.
std::string describe_call_failure(const Call& call, int64_t code);

}  // namespace kiln::cpu
