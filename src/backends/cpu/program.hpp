#pragma once
// A specialization lowered for the cpu backend, before code generation: the
// buffers it uses and the steps that read and write them, in order. The
// lowering builds it, the code generator turns it into one straight-line
// entry function, and the executable binds buffers and calls that function.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "backends/artifact_weights.hpp"
#include "runtime/ir/tensor.hpp"

namespace kiln::backends {
class BlockReader;  // program_blocks.hpp
class BlockWriter;
}  // namespace kiln::backends

namespace kiln::cpu {

// What a saved program (for the on-disk cache) is written to and read from.
using backends::BlockReader;
using backends::BlockWriter;
using backends::WeightsReader;
using backends::WeightsWriter;

// Work the generated code calls into: a oneDNN primitive created once, a
// reference kernel for what the backend does not compile, a copy.
class Kernel {
 public:
  virtual ~Kernel() = default;
  // `args` point at the step's buffers, in the order the step lists them.
  // Throws ir::Error; the host wrapper turns that into a status for the
  // generated code (exceptions never unwind through generated frames).
  virtual void run(void* const* args) const = 0;
  // The kernel as data for the on-disk cache (a "kind" and its parameters),
  // its constant bytes handed to `weights`, any other long bytes (oneDNN's
  // descriptors) to `blocks`; load_kernel() makes it again.
  // Throws ir::Error(Unsupported) if it cannot be saved, saying why.
  virtual void save(nlohmann::json& out, WeightsWriter& weights, BlockWriter& blocks) const = 0;
};

struct Buffer {
  enum class Kind { Arena, Input, Output, Constant };
  Kind kind = Kind::Arena;
  int index = 0;  // position among inputs, outputs or constants
  int64_t bytes = 0;
  int64_t offset = 0;  // in the arena, once planned
  std::string name;    // the value it holds first, for the plan and messages
};

// A chain of elementwise operations fused into one generated loop over
// `shape`. `code` is in SSA form: instruction i produces value i, of its
// element type (float32 for most; any fixed-size numeric type or bool, held
// as one byte of 0 or 1, where the lowering says so).
struct Loop {
  enum class Op {
    Load,      // operand `a`
    Constant,  // alpha
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    Pow,
    PRelu,  // a if a > 0 else a * b
    Neg,
    Abs,
    Relu,
    LeakyRelu,
    Sigmoid,
    Tanh,
    Exp,
    Log,
    Sqrt,
    Erf,
    Reciprocal,
    Floor,
    Ceil,
    Clip,         // min alpha, max beta
    HardSigmoid,  // max(0, min(1, alpha * x + beta))
    HardSwish,
    Softplus,
    Elu,
    Selu,
    Softsign,
    // Computed as the reference kernels do (in double where they do), so
    // exactly their results.
    Cast,             // a converted to the instruction's type
    Where,            // a (bool) ? b : c
    ClipBetween,      // a clamped below by b and above by c (either -1: none), NaN kept
    Mod,              // a mod b, of the divisor's sign unless alpha (fmod) is set
    BitShift,         // a << b (alpha 0) or a >> b, 0 past the bit width
    Not,              // of a bool
    Sign,             // -1, 0 or 1; NaN kept
    Round,            // half to even
    IsNaN,            // to bool
    IsInf,            // to bool: -inf if alpha, +inf if beta
    Libm,             // the C library's function number alpha (LibmFunction) of a, in double
    ThresholdedRelu,  // a if a > alpha else 0
    Shrink,           // a + beta if a < -alpha, a - beta if a > alpha, else 0
    Celu,             // max(0, a) + min(0, alpha * (exp(a / alpha) - 1))
    MaxNaN,           // max and min of any type, a NaN operand winning (numpy's maximum)
    MinNaN,
    // Not an operation: new ones go above it, never between (saved
    // programs store the numbers), and the reader checks against it.
    Count,
  };
  // The functions of Op::Libm (saved programs store the numbers).
  enum class LibmFunction { Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh, Count };
  struct Operand {
    int arg = 0;                   // the step's argument holding it
    std::vector<int64_t> strides;  // elements per step of each dim of `shape` (0: broadcast)
    ir::DType type = ir::DType::Float32;
  };
  struct Instr {
    Op op = Op::Load;
    int a = -1, b = -1;  // operands: earlier instructions, or the operand index for Load
    float alpha = 0, beta = 0;
    ir::DType type = ir::DType::Float32;  // of the result (a Load's: its operand's)
    int c = -1;                           // a third operand (Where, ClipBetween)
  };
  ir::Dims shape;
  std::vector<Operand> operands;
  std::vector<Instr> code;
  std::vector<std::pair<int, int>> stores;  // (instruction, argument) written contiguously over `shape`
};

// A call into the portable kernel library (portable/kernels.h), every
// shape a constant, so that the kernel is specialised for it once inlined.
struct Call {
  struct Arg {
    enum class Kind { Buffer, Null, Int64, Int32, Float, Int64Array };
    Kind kind = Kind::Null;
    int64_t value = 0;            // Buffer: the step's argument; Int64, Int32
    float real = 0;               // Float
    std::vector<int64_t> values;  // Int64Array (a pointer to constants)
    int64_t byte_offset = 0;      // Buffer: where in it (a Concat input's place in the output)
  };
  std::string function;         // "kiln_pk_conv2d"
  std::vector<Arg> args;        // after the leading `const kiln_pk_threads*`
  bool returns_status = false;  // returns int64_t, non-zero on failure (kiln_pk_gather)

  static Arg buffer(int arg, int64_t byte_offset = 0) { return {Arg::Kind::Buffer, arg, 0, {}, byte_offset}; }
  static Arg null() { return {}; }
  static Arg i64(int64_t v) { return {Arg::Kind::Int64, v, 0, {}, 0}; }
  static Arg i32(int32_t v) { return {Arg::Kind::Int32, v, 0, {}, 0}; }
  static Arg f32(float v) { return {Arg::Kind::Float, 0, v, {}, 0}; }
  static Arg array(std::vector<int64_t> v) { return {Arg::Kind::Int64Array, 0, 0, std::move(v), 0}; }
};

struct FrozenControlFlow;  // frozen_control_flow.hpp

struct Step {
  std::string label;         // the node(s) it runs, for messages
  std::vector<int> args;     // buffer ids
  std::vector<char> writes;  // per argument
  // Exactly one of these: a host kernel, a generated loop, a portable call,
  // or (bundles only) an If, Loop or Scan whose bodies are programs too.
  std::unique_ptr<Kernel> kernel;
  std::unique_ptr<Loop> loop;
  std::unique_ptr<Call> call;
  std::shared_ptr<const FrozenControlFlow> flow;
};

// Which kernels the lowering calls for convolutions, products, pooling,
// normalisations and copies.
enum class KernelFamily {
  Native,    // oneDNN primitives and host kernels (JIT and cache only)
  Portable,  // the portable kernel library, inlined: self-contained objects
  // oneDNN primitives, and portable calls where Native has a host kernel
  // (copies, Concat, Slice, Gather): native bundles, which run no libkiln code.
  NativeBundle,
};

struct Program {
  KernelFamily family = KernelFamily::Native;
  std::vector<Buffer> buffers;
  std::vector<Step> steps;
  std::vector<std::string> inputs;         // graph input names, in io order
  std::vector<ir::Tensor> input_defaults;  // per input: its initializer, if it has one
  std::vector<std::string> outputs;        // graph output names, in io order (after the inputs)
  std::vector<ir::DType> output_dtypes;
  std::vector<ir::Dims> output_dims;
  std::vector<ir::Tensor> constants;  // what Constant buffers point at
  int64_t arena_bytes = 0;
  int64_t intermediate_bytes = 0;
  int graph_nodes = 0;     // nodes of the specialized graph
  int compiled_nodes = 0;  // graph nodes lowered to oneDNN primitives or generated loops
  int fallback_nodes = 0;  // graph nodes run by the reference kernels
  // Why a node runs its reference kernel, where the lowering knows more than
  // that no family takes it (a control-flow node a bundle cannot hold), by step label.
  std::map<std::string, std::string> fallback_reasons;
};

// Compile work that nothing else in the compile waits for: each oneDNN
// primitive's own code generation and each weight's reorder into the layout
// its primitive chose. It must all have run before the program first runs;
// the tasks are independent (any order, any thread), so the backend runs them
// beside LLVM code generation. A task throws ir::Error.
using DeferredWork = std::vector<std::function<void()>>;

}  // namespace kiln::cpu
