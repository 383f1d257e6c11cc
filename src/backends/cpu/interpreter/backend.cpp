#include "backends/cpu/interpreter/backend.hpp"

#include <mutex>
#include "backends/artifact_weights.hpp"

#include "backends/cpu/interpreter/kernels.hpp"
#include "backends/cpu/step_profile.hpp"
#include "backends/reference/reference_executor.hpp"
#include "runtime/ir/serialize.hpp"

namespace kiln::backends {

namespace {

using ir::Tensor;
using nlohmann::json;

constexpr int kFormat = 1;

// An executable's artifact is its graph: the nodes as CBOR, the
// initializers in the weights file, where a warm load leaves them.
class InterpreterExecutable : public Executable {
 public:
  // `unsaved`: why save() must refuse, if it must.
  InterpreterExecutable(std::shared_ptr<const ir::Graph> graph, std::shared_ptr<cpu::ThreadBudget> budget,
                        std::string unsaved = {})
      : graph_(std::move(graph)), budget_(std::move(budget)), unsaved_(std::move(unsaved)), profile_(graph_->nodes.size()) {}
  ~InterpreterExecutable() override {
    profile_.print(std::to_string(graph_->nodes.size()) + " interpreted nodes",
                   [&](size_t n) { return "interp " + graph_->nodes[n].describe(); });
  }
  ExecutableStats stats() const override { return {int64_t(graph_->nodes.size())}; }
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs) const override {
    cpu::BudgetScope scope(budget_.get());
    if (!profile_.enabled()) return ref::run_graph(*graph_, inputs, &cpu::interpreter_kernels());
    std::lock_guard<std::mutex> serialised(profile_mutex_);
    profile_.begin_run();
    const ref::NodeTimer timer = [&](size_t node, double ms) { profile_.add(node, ms); };
    return ref::run_graph(*graph_, inputs, &cpu::interpreter_kernels(), &timer);
  }
  // Sequences and optionals too (a partitioned run hands every part its values so).
  std::vector<ir::Value> run_values(const std::map<std::string, ir::Value>& inputs) const override {
    cpu::BudgetScope scope(budget_.get());
    if (!profile_.enabled()) return ref::run_graph_values(*graph_, inputs, &cpu::interpreter_kernels());
    std::lock_guard<std::mutex> serialised(profile_mutex_);
    profile_.begin_run();
    const ref::NodeTimer timer = [&](size_t node, double ms) { profile_.add(node, ms); };
    return ref::run_graph_values(*graph_, inputs, &cpu::interpreter_kernels(), &timer);
  }

  Artifact save() const override {
    if (!unsaved_.empty()) ir::fail(ir::ErrorKind::Unsupported, unsaved_);
    ir::Graph nodes = *graph_;
    nodes.initializers.clear();
    WeightsWriter weights;
    json initializers = json::array();
    for (const auto& [name, t] : graph_->initializers) {
      json init = save_constant(t, weights);
      init["name"] = name;
      initializers.push_back(std::move(init));
    }
    const std::vector<uint8_t> cbor =
        json::to_cbor({{"format", kFormat}, {"graph", ir::graph_to_json(nodes)}, {"initializers", initializers}});
    Artifact a;
    a.program.assign(cbor.begin(), cbor.end());
    put_weights(weights, a);
    a.summary = json({{"interpreted_nodes", graph_->nodes.size()}, {"initializers", graph_->initializers.size()}}).dump();
    return a;
  }

  static std::unique_ptr<Executable> load(const LoadedArtifact& artifact, std::shared_ptr<cpu::ThreadBudget> budget) {
    const std::string what = "cached interpreter graph";
    try {
      const json j = json::from_cbor(artifact.program.begin(), artifact.program.end());
      if (ir::json_field<int>(j, "format", what) != kFormat) ir::fail(ir::ErrorKind::InvalidModel, what + ": unknown format");
      auto graph = std::make_shared<ir::Graph>(ir::graph_from_json(ir::json_field<json>(j, "graph", what)));
      const WeightsReader weights(artifact.weights, artifact.weights_bytes);
      for (const json& init : ir::json_field<json>(j, "initializers", what)) {
        const auto name = ir::json_field<std::string>(init, "name", what);
        // Read only: kernels never write their inputs, and the runtime
        // copies an output that is not the caller's own.
        graph->initializers[name] = load_constant(init, weights, artifact.keep_alive, what + " initializer '" + name + "'");
      }
      return std::make_unique<InterpreterExecutable>(std::move(graph), std::move(budget));
    } catch (const json::exception& e) {
      ir::fail(ir::ErrorKind::InvalidModel, what + " is malformed: " + e.what());
    }
  }

 private:
  std::shared_ptr<const ir::Graph> graph_;
  std::shared_ptr<cpu::ThreadBudget> budget_;
  std::string unsaved_;
  mutable std::mutex profile_mutex_;
  mutable cpu::StepProfile profile_;  // KILN_PROFILE
};

class InterpreterBackend : public Backend {
 public:
  explicit InterpreterBackend(std::shared_ptr<cpu::ThreadBudget> budget) : budget_(std::move(budget)) {}
  std::string name() const override { return "interpreter"; }
  std::string version() const override { return "interpreter-1"; }
  bool supports(const ir::Node& node) const override { return ref::has_kernel(node.domain, node.op_type); }
  bool runs_any_value() const override { return true; }
  std::unique_ptr<Executable> compile(std::shared_ptr<const ir::Graph> graph, const ir::Specialization&,
                                      const CompileOptions&) const override {
    return std::make_unique<InterpreterExecutable>(std::move(graph), budget_);
  }
  std::unique_ptr<Executable> load(const LoadedArtifact& artifact, std::shared_ptr<const ir::Graph>,
                                   const CompileOptions&) const override {
    return InterpreterExecutable::load(artifact, budget_);
  }

 private:
  std::shared_ptr<cpu::ThreadBudget> budget_;
};

}  // namespace

std::unique_ptr<Backend> make_interpreter_backend(std::shared_ptr<cpu::ThreadBudget> budget) {
  return std::make_unique<InterpreterBackend>(std::move(budget));
}

std::unique_ptr<Executable> interpret_uncached(std::shared_ptr<const ir::Graph> graph, std::shared_ptr<cpu::ThreadBudget> budget,
                                               std::string why) {
  return std::make_unique<InterpreterExecutable>(std::move(graph), std::move(budget), std::move(why));
}

}  // namespace kiln::backends
