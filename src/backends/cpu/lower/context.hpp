#pragma once
// What the lowering of one specialization shares between the operator
// families: the graph's values (their shapes, the buffers and layouts that
// hold them), the steps added so far, the work deferred until the program
// first runs, and the memory plan at the end. The families (conv.cpp,
// matmul.cpp, ...) add steps through it; op_table.cpp picks the family.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cpu/implementation_choice.hpp"
#include "backends/cpu/lower/layouts.hpp"
#include "backends/cpu/lowering.hpp"
#include "backends/cpu/onednn_kernel.hpp"
#include "backends/cpu/program.hpp"
#include "runtime/ir/graph.hpp"
#include "runtime/ir/shape_inference.hpp"

namespace kiln::cpu::lowering {

using ir::Dims;
using ir::DType;

// A value the lowering can plan: a concrete shape and a fixed-size dtype.
// (A value whose shape depends on the data has no concrete shape.) Its
// buffers are described to oneDNN, which takes at most DNNL_MAX_NDIMS dims
// and sizes them in size_t, blocked layouts padded: values of a higher rank
// (ONNX has no limit) or of more than 2^48 bytes (no machine holds one; its
// padded size could wrap) are the interpreter's, which refuses the latter.
bool is_static(const ir::Specialization& spec, const std::string& name);

// An axis attribute made non-negative against `rank`; false when it is out of
// range (the node's reference kernel then runs it and says why).
inline bool normalize_axis(int64_t& axis, size_t rank) {
  if (axis < 0) axis += int64_t(rank);
  return axis >= 0 && axis < int64_t(rank);
}

class Context {
 public:
  Context(const ir::Graph& graph, const ir::Specialization& spec, KernelFamily family, DeferredWork& deferred,
          std::vector<ImplementationTrial>* trials, const Tuning& tuning, const BodyCompiler* bodies);

  // Lowers every node (those no family takes run their reference kernel),
  // copies the outputs into the caller's buffers and plans the arena.
  Program run();

  struct Val {
    int buffer = -1;
    md layout;  // the layout the buffer holds (float32 and quantized values)
    bool blocked = false;
    std::vector<std::pair<md, int>> copies;  // the value in other layouts, made on demand
  };

  // ---- values ---------------------------------------------------------------
  const ir::ValueInfo& info(const std::string& name) const;
  Dims dims(const std::string& name) const { return info(name).shape.concrete(); }
  DType dtype(const std::string& name) const { return info(name).dtype; }
  int64_t bytes_of(const std::string& name) const;
  bool is_f32(const std::string& name) const { return !name.empty() && dtype(name) == DType::Float32; }
  // A weight: an initializer the caller cannot override.
  const ir::Tensor* constant(const std::string& name) const;
  std::optional<float> scalar_constant(const std::string& name) const;
  // Available when the current step runs: a graph input, a weight, or
  // produced by a node before it.
  bool available(const std::string& name) const;
  bool single_use(const std::string& name) const;
  // Whether only a node's first output is read: the kernels here make no
  // other (MaxPool's Indices, LayerNormalization's Mean and
  // InvStdDev, BatchNormalization's training statistics). One the exporter
  // named but nothing reads needs none.
  bool only_first_output_wanted(const ir::Node& n) const;
  const std::vector<size_t>& consumers(const std::string& name) const;

  // ---- buffers and layouts ----------------------------------------------------
  int add_buffer(Buffer::Kind kind, int index, int64_t bytes, const std::string& name);
  // A constant the lowering made (rearranged weights, default operands).
  int add_constant(ir::Tensor t, const std::string& name);
  Val& val(const std::string& name);
  // A new value's buffer: the caller's output buffer when the value is a
  // graph output in plain layout, else an arena slot. A plain value's layout
  // is its own row-major one (`layout` may view the same bytes with other
  // dims, e.g. a matmul's [rows, n]).
  int define(const std::string& name, const md& layout, bool plain);
  int define_plain(const std::string& name);
  // The value's row-major layout; none for element types oneDNN lacks.
  md plain_layout(const std::string& name) const;
  // The value's buffer in layout `want`, reordered on first demand.
  int as_layout(const std::string& name, const md& want);
  int plain(const std::string& name);

  // ---- steps ------------------------------------------------------------------
  void add_kernel(const std::string& label, std::vector<int> args, std::vector<char> writes, std::unique_ptr<Kernel> kernel);
  // A step running a oneDNN primitive: `args` are the step's buffers, each
  // bound to the DNNL_ARG_* of `rt_args` at the same position. A scratchpad
  // the primitive needs is one more buffer, live for this step only. The
  // primitive's own code is compiled later (see DeferredWork), with the
  // OpenMP thread count of now, the one its descriptor was made with.
  void add_primitive(const std::string& label, const dnnl::primitive_desc_base& pd, std::vector<int> args,
                     std::vector<char> writes, std::vector<std::pair<int, md>> rt_args,
                     std::unordered_map<int, dnnl::memory> constants, int sum_from = -1);
  // A primitive described while the calling thread has fewer OpenMP
  // threads than the lowering started with (a product too small to share,
  // see matmul.cpp) is made and runs on that many.
  //
  // The primitive's code compiled with the deferred work, on `threads`
  // OpenMP threads: the count its descriptor was made with.
  void defer_creation(OneDnnKernel* k, const std::string& label, int threads);
  // A step copying buffer `src` of layout `from` into `dst` of layout `to`.
  void add_reorder(const std::string& label, int src, int dst, const md& from, const md& to);
  // A weight in the layout `want`: the memory now, its bytes once the
  // deferred work has run. `data` must live until then: a tensor of the
  // graph or the specialization does; `keep` holds anything else.
  dnnl::memory constant_memory(const md& user, const void* data, const md& want, std::shared_ptr<const void> keep = nullptr);
  // A call into the portable kernel library, plain layouts only.
  void add_call(const std::string& label, std::vector<int> args, std::vector<char> writes, Call call);
  // A scratch buffer live only during the step that uses it.
  Call::Arg scratch(std::vector<int>& args, std::vector<char>& writes, size_t bytes, const std::string& label);
  // A value with no elements (a batch of 0) leaves nothing to compute, but
  // oneDNN 2.6 divides by zero describing some primitives over one (a
  // matmul: SIGFPE). Such a node runs its reference kernel, which knows
  // empty tensors.
  bool touches_empty(const ir::Node& n);
  // Counts nodes a family compiled (the rest ran their reference kernel).
  void compiled(int nodes = 1) { program.compiled_nodes += nodes; }
  // Marks the step just added as one whose oneDNN Sum post-op reads the
  // residual at argument `residual` (see sum_in_place).
  void sum_into(size_t residual, size_t dst) { sum_steps_.push_back({program.steps.size(), residual, dst}); }

  const ir::Graph& graph;
  const ir::Specialization& spec;
  const bool portable;
  const bool host_kernels;  // false: a portable call wherever Native would run a host kernel
  std::vector<ImplementationTrial>* const trials;
  const Tuning tuning;
  const int team_threads;            // the OpenMP threads the program's runs have
  const BodyCompiler* const bodies;  // null: control flow runs its reference kernel
  Program program;
  std::map<std::string, Val> vals;
  std::multimap<std::string, int> output_of;  // graph outputs, by value
  std::vector<char> absorbed;                 // nodes a step of an earlier node computes
  size_t node = 0;                            // the node being lowered

 private:
  void check_static(const std::string& name);
  void fallback(const ir::Node& n);
  void finish_output(int k);
  void sum_in_place();
  void plan();

  struct SumStep {
    size_t step, residual, dst;  // the step, and the positions of its residual and destination arguments
  };
  DeferredWork& deferred_;
  std::map<std::string, std::vector<size_t>> consumers_;
  std::map<std::string, size_t> producer_;
  std::map<std::string, int> input_index_;
  std::vector<int> output_buffer_;
  std::vector<SumStep> sum_steps_;
};

}  // namespace kiln::cpu::lowering
