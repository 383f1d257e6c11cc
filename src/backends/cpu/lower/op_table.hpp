#pragma once
// The operators the cpu backend compiles itself, and how: one entry per
// operator says what kind of step it becomes and which family function
// lowers it for the native kernels and for the portable ones. An operator
// with no entry (or a null function) runs its reference kernel.
#include <string_view>

#include "backends/cpu/program.hpp"
#include "runtime/ir/graph.hpp"

namespace kiln::cpu::lowering {

class Context;

// True when it added the node's steps; false, having added none, when the
// node's reference kernel should run it (families.hpp).
using LowerFn = bool (*)(Context&, const ir::Node&);

enum class StepKind {
  View,       // no step: the output names its input's bytes (lowered even where a value is empty)
  Primitive,  // a oneDNN primitive, a host kernel or a portable kernel call
  Loop,       // a generated elementwise loop, which takes the elementwise nodes after it too
};

struct OpLowering {
  StepKind kind = StepKind::Primitive;
  LowerFn native = nullptr;    // KernelFamily::Native and NativeBundle
  LowerFn portable = nullptr;  // KernelFamily::Portable
  // Whether lowers_natively() claims the operator for the cpu backend.
  bool claimed = true;
  // Loop: the loop's instruction and how many inputs it reads.
  Loop::Op loop_op = Loop::Op::Load;
  int arity = 0;
  Loop::LibmFunction libm = Loop::LibmFunction::Count;  // Loop::Op::Libm's function
};

// The operator's entry, or nullptr (for every operator of a domain other
// than ONNX's, except the com.microsoft ones the graph passes make).
const OpLowering* find_op(const ir::Node& n);

// Lowers `n` with its operator's family; false when its reference kernel
// should run it.
bool lower_node(Context& cx, const ir::Node& n);

}  // namespace kiln::cpu::lowering
