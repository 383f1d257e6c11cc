#pragma once
// If, Loop and Scan in a frozen bundle, which has no host code to run
// bodies with (the JIT's ControlFlowKernel): every branch or body is a
// program of its own, lowered with the portable kernels and emitted as an
// entry function of its own beside the parent's, and the parent's step is a
// generated function that branches on the condition, or loops, and calls
// them. What a body needs lives in the parent's memory plan: one arena for
// the bodies (one runs at a time), two buffers per carried value or Scan
// state, used in turn, and the iteration number and conditions a Loop body
// reads and writes. Scan inputs and outputs and a Loop's scan outputs are
// read and written in place, a slice along axis 0 per iteration.
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/program.hpp"

namespace llvm {
class Function;
class Module;
}  // namespace llvm

namespace kiln::cpu {

struct FrozenControlFlow {
  enum class Kind { If, Loop, Scan };
  // Where a body input comes from, or a body output goes, at an iteration.
  struct Binding {
    enum class Kind {
      Arg,      // argument `index` of the step
      Carried,  // carried value (or Scan state) `index`: its current value in, this iteration's buffer out
      Slice,    // scan input or output `index`, its slice for this iteration
    };
    Kind kind = Kind::Arg;
    int index = 0;
  };
  struct Body {
    // Lowered with the portable kernels; its constants are inputs after its
    // own (bound to constants of the parent), so that its entry needs no weights.
    Program program;
    std::vector<Binding> inputs, outputs;  // per program input and output
  };
  struct Carried {
    int initial = -1;         // the argument holding the value before the first iteration
    int result = -1;          // the argument the last value goes to (-1: the node leaves it out)
    int spare[2] = {-1, -1};  // written by even and odd iterations
    int64_t bytes = 0;
  };
  struct Sliced {
    int arg = -1;             // the whole tensor, stacked along axis 0
    int64_t slice_bytes = 0;  // one iteration's slice
    bool reverse = false;     // iteration t takes slice length-1-t
  };

  Kind kind = Kind::If;
  std::string label;         // the node, for messages
  std::vector<Body> bodies;  // then and else (If), or the body
  int arena = -1;            // the bodies' arena (-1: none needs one)
  int cond = -1;             // If: the condition; Loop: its initial condition (-1: none); bool
  int trip = -1;             // Loop: M, the trip count (-1: none); int64
  // Loop: the body's iteration number (int64) and condition (bool) in, and
  // its condition out, one element each.
  int iteration = -1, condition = -1, next_condition = -1;
  std::vector<Carried> carried;
  std::vector<Sliced> scan_inputs, scan_outputs;
  // Scan: how many iterations; a Loop with scan outputs: how many their
  // shapes hold (a run that would make more or fewer fails); -1: any.
  int64_t length = -1;
};

// A Loop with neither a trip count nor a condition that turns false would
// run forever; past this many iterations its run fails (as the JIT's does).
inline constexpr int64_t kFrozenLoopIterations = int64_t(1) << 24;

// The step's function, in `m`, with every body's entry (bundle entries, see
// emit_bundle_entry, named `name` + "_then", "_else" or "_body"):
//   int32_t name(void* const* args, const kiln_pk_threads* threads);
// `args`: the step's buffers. Returns 0, a body's failed status, or
// KILN_BUNDLE_ERROR_ARGUMENT when a Loop runs more iterations than its
// outputs hold (or fewer) or than kFrozenLoopIterations.
llvm::Function* emit_frozen_control_flow(llvm::Module& m, const FrozenControlFlow& flow, const std::string& name);

}  // namespace kiln::cpu
