// The reference executor as a backend: compiling binds the graph, running
// interprets it node by node. It is the oracle the compiled backends are
// held against, and the fallback for what they do not take.
#include "backends/reference/reference_backend.hpp"
#include "backends/reference/reference_executor.hpp"

namespace kiln::backends {

namespace {

class ReferenceExecutable : public Executable {
 public:
  explicit ReferenceExecutable(std::shared_ptr<const ir::Graph> graph) : graph_(std::move(graph)) {}
  // An interpreter: nothing compiled, nothing planned (values live as long as they are needed).
  ExecutableStats stats() const override { return {int64_t(graph_->nodes.size())}; }
  std::vector<ir::Tensor> run(const std::map<std::string, ir::Tensor>& inputs) const override {
    return ref::run_graph(*graph_, inputs);
  }
  std::vector<ir::Value> run_values(const std::map<std::string, ir::Value>& inputs) const override {
    return ref::run_graph_values(*graph_, inputs);
  }

 private:
  std::shared_ptr<const ir::Graph> graph_;
};

class ReferenceBackend : public Backend {
 public:
  std::string name() const override { return "reference"; }
  std::string version() const override { return "reference-1"; }
  bool supports(const ir::Node& node) const override { return ref::has_kernel(node.domain, node.op_type); }
  bool runs_any_value() const override { return true; }
  std::unique_ptr<Backend> fallback() const override { return nullptr; }  // what it cannot run, nothing can
  std::unique_ptr<Executable> compile(std::shared_ptr<const ir::Graph> graph, const ir::Specialization&,
                                      const CompileOptions&) const override {
    return std::make_unique<ReferenceExecutable>(std::move(graph));
  }
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<ReferenceBackend>(); }

}  // namespace kiln::backends
