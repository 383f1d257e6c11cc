#pragma once
// Lowers a specialized graph to a cpu Program: the partition (which nodes
// become oneDNN primitives or generated loops, which run their reference
// kernel), the fusions (activations, bias and residual additions as oneDNN
// post-ops; elementwise chains into one loop), the layouts (oneDNN's blocked
// layouts kept between the primitives that want them, reorders only at the
// edges) and the memory plan.
#include "backends/cpu/implementation_choice.hpp"
#include "backends/cpu/program.hpp"
#include "runtime/ir/graph.hpp"
#include "runtime/ir/shape_inference.hpp"

namespace kiln::cpu {

// Throws ir::Error(Unsupported) when the specialization cannot be planned
// statically (a value's shape depends on data, or its type has no fixed
// size); the backend then runs it with the reference executor.
// `family` picks the kernels of convolutions, products, pooling,
// normalisations and copies; what neither compiles runs its reference kernel.
// With `deferred`, the work that only has to be done before the program
// first runs (see DeferredWork) is appended there instead of done. With
// `trials`, the steps that could take another oneDNN implementation are
// listed there (see implementation_choice.hpp).
struct Tuning {
  // Convolutions whose input or output has at least this many bytes compute
  // in oneDNN's 16-channel blocks; smaller ones in the layout oneDNN picks
  // (channels-last on AVX-512). 0 puts every convolution in blocks, which
  // the tests use.
  int64_t channel_blocks_from = int64_t(6) << 20;
  // Whether 3x3 convolutions may use oneDNN's Winograd kernels where the CPU has them.
  bool winograd = true;
  // The options' values where set, else the environment's (CompileOptions).
  // Throws ir::Error(InvalidArgument) for a variable with a bad value.
  static Tuning of(const backends::CompileOptions& options);
};

// `bodies` compiles the bodies of If, Loop and Scan (control_flow_kernel.hpp);
// without it they run their reference kernels.
class BodyCompiler;
Program lower(const ir::Graph& graph, const ir::Specialization& spec, KernelFamily family = KernelFamily::Native,
              DeferredWork* deferred = nullptr, std::vector<ImplementationTrial>* trials = nullptr,
              const Tuning& tuning = Tuning::of({}), const BodyCompiler* bodies = nullptr);

// Whether the cpu backend compiles a node of this kind itself (for the other
// kinds, it calls the reference kernel). Shapes and dtypes can still send a
// claimed node to the reference kernel.
bool lowers_natively(const ir::Node& node);

// Whether lower() can take `node` in this specialization: every value it
// reads and writes has a static shape and a fixed-size type, and the node is
// compiled natively or has a reference kernel.
bool lowers(const ir::Node& node, const ir::Specialization& spec);

}  // namespace kiln::cpu
