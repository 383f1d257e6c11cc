#pragma once
// If, Loop and Scan in a compiled program. The host code here decides which
// branch runs and how often a body runs; every branch and body is a graph of
// its own, compiled with the program like any specialization (its
// enclosing-scope values as inputs, or as weights where they are constant)
// and saved in the program's cache entry. Both branches of an If are
// compiled, so that a warm start compiles nothing whichever the data takes.
// What a body leaves to data (a shape only its run decides) runs on the
// interpreter, that body's nodes only, and counts as fallback nodes.
//
// Loop-carried values and Scan states alternate between two buffers, and
// slices of Loop and Scan outputs along axis 0 are written in place: an
// iteration copies nothing else.
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "backends/cpu/host_kernels.hpp"
#include "backends/cpu/program.hpp"
#include "runtime/ir/graph.hpp"

namespace kiln::cpu {

// How the backend compiling a program compiles and loads its bodies: itself,
// with its interpreter for what shapes leave to data. Only used while the
// program is compiled or loaded.
class BodyCompiler {
 public:
  virtual ~BodyCompiler() = default;
  virtual std::unique_ptr<backends::Executable> compile(
      const ir::Graph& body, const std::map<std::string, std::pair<ir::DType, ir::Dims>>& shapes) const = 0;
  virtual std::unique_ptr<backends::Executable> load(const backends::LoadedArtifact& artifact,
                                                     std::shared_ptr<const ir::Graph> body) const = 0;
};

// args: the values the node reads (ir::values_read order), then its outputs,
// as for ReferenceKernel.
class ControlFlowKernel : public Kernel {
 public:
  using Value = ReferenceKernel::Value;
  // Compiles the node's bodies for the shapes its reads have. `constants`:
  // the enclosing-scope values the bodies read that are fixed (they become
  // the bodies' weights). Throws ir::Error when a body does not compile.
  static std::unique_ptr<ControlFlowKernel> compile(const ir::Node& node, std::vector<Value> reads, std::vector<Value> writes,
                                                    const std::map<std::string, ir::Tensor>& constants,
                                                    const BodyCompiler& bodies);
  // The same, checked alike, but the bodies left uncompiled: a frozen
  // bundle lowers them itself (frozen_control_flow.hpp). Such a kernel does not run.
  static std::unique_ptr<ControlFlowKernel> plan(const ir::Node& node, std::vector<Value> reads, std::vector<Value> writes,
                                                 const std::map<std::string, ir::Tensor>& constants);
  void run(void* const* args) const override;
  void save(nlohmann::json& out, WeightsWriter& weights, BlockWriter& blocks) const override;
  static std::unique_ptr<Kernel> load(const nlohmann::json& j, const WeightsReader& weights, const BlockReader& blocks,
                                      const std::shared_ptr<void>& keep_alive, const BodyCompiler* bodies,
                                      const std::string& what);
  // Nodes of the bodies left to the interpreter.
  int64_t fallback_nodes() const;

  struct Body {
    std::shared_ptr<const ir::Graph> graph;                        // standalone: own inputs, then the enclosing values it reads
    std::vector<int> captured;                                     // per input after the body's own: its argument
    std::map<std::string, std::pair<ir::DType, ir::Dims>> shapes;  // of its inputs, as it is called
    std::vector<Value> outputs;                                    // the body's, as one iteration makes them
    std::unique_ptr<backends::Executable> executable;              // null in a plan()
  };
  const std::vector<Body>& bodies() const { return bodies_; }

 private:
  ControlFlowKernel(const ir::Node& node, std::vector<Value> reads, std::vector<Value> writes,
                    std::map<std::string, ir::Tensor> constants);
  // That the bodies' outputs fit the node's (ir::Error(Unsupported) if not).
  void check_outputs() const;
  void add_inputs(const Body& body, void* const* args, std::map<std::string, ir::Tensor>& inputs) const;
  struct Carried;
  void run_if(void* const* args) const;
  void run_loop(void* const* args) const;
  void run_scan(void* const* args) const;

  ir::Node node_;
  std::vector<Value> reads_, writes_;
  std::map<std::string, ir::Tensor> constants_;
  std::vector<Body> bodies_;  // then, else (If); body (Loop, Scan)
};

}  // namespace kiln::cpu
