#include "backends/reference/reference_executor.hpp"

#include <chrono>
#include <new>
#include <set>
#include <stdexcept>
#include <string_view>

#include "backends/reference/kernel_registry.hpp"

namespace kiln::ref {

using ir::ErrorKind;
using ir::Tensor;
using ir::Value;

// Values visible while running one graph; subgraphs chain to their parent.
class Scope {
 public:
  explicit Scope(const Scope* parent) : parent_(parent) {}
  const Value* find(const std::string& name) const {
    auto it = values_.find(name);
    if (it != values_.end()) return &it->second;
    return parent_ ? parent_->find(name) : nullptr;
  }
  void set(const std::string& name, Value v) { values_[name] = std::move(v); }
  void erase(const std::string& name) { values_.erase(name); }
  bool owns(const std::string& name) const { return values_.count(name) != 0; }

 private:
  const Scope* parent_;
  std::map<std::string, Value> values_;
};

// Runs one kernel. Sizes that attributes or inputs set are checked not to
// overflow, so memory it cannot get (a vector beyond max_size included) is
// merely more than this machine has: an error naming the node. So are the
// errors of the tensors it makes (a shape too large), which cannot name it.
static void run_kernel(KernelFn fn, KernelContext& ctx) {
  try {
    fn(ctx);
  } catch (const std::bad_alloc&) {
    ir::fail(ErrorKind::Internal, ctx.node().describe() + ": out of memory allocating its working memory");
  } catch (const std::length_error&) {
    ir::fail(ErrorKind::Internal, ctx.node().describe() + ": out of memory allocating its working memory");
  } catch (const ir::Error& e) {
    if (std::string_view(e.what()).substr(0, 6) == "node '") throw;
    ir::fail(e.kind(), ctx.node().describe() + ": " + e.what());
  }
}

static std::vector<Value> run_in_scope(const ir::Graph& graph, Scope& scope, const KernelRegistry& registry,
                                       const NodeTimer* timer = nullptr);

static std::vector<Value> run_subgraph(const ir::Graph& g, const std::vector<Value>& inputs, const Scope& parent,
                                       const KernelRegistry& registry) {
  if (inputs.size() != g.inputs.size())
    ir::fail(ErrorKind::InvalidModel, "subgraph '" + g.name + "' takes " + std::to_string(g.inputs.size()) +
                                          " inputs, was given " + std::to_string(inputs.size()));
  Scope scope(&parent);
  for (const auto& [name, t] : g.initializers) scope.set(name, t);
  for (size_t i = 0; i < inputs.size(); ++i) scope.set(g.inputs[i].name, inputs[i]);
  return run_in_scope(g, scope, registry);
}

static std::vector<Value> run_in_scope(const ir::Graph& graph, Scope& scope, const KernelRegistry& registry,
                                       const NodeTimer* timer) {
  // Last use of each value in this graph, so intermediates are freed early.
  std::map<std::string, size_t> last_use;
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    for (const auto& name : ir::values_read(graph.nodes[i])) last_use[name] = i;
  std::set<std::string> keep;
  for (const auto& o : graph.outputs) keep.insert(o.name);

  for (size_t idx = 0; idx < graph.nodes.size(); ++idx) {
    const ir::Node& node = graph.nodes[idx];
    if (!domain_has(node.domain, node.op_type))
      ir::fail(ErrorKind::Unsupported, node.describe() + ": operator domain '" + node.domain + "' is not supported");
    KernelFn fn = registry.find(node.op_type);
    if (!fn) ir::fail(ErrorKind::Unsupported, node.describe() + ": operator " + node.op_type + " is not supported");

    std::vector<const Value*> ins;
    for (const auto& name : node.inputs) {
      if (name.empty()) {
        ins.push_back(nullptr);
        continue;
      }
      const Value* t = scope.find(name);
      if (!t) ir::fail(ErrorKind::InvalidModel, node.describe() + ": input '" + name + "' is not defined before use");
      ins.push_back(t);
    }
    KernelContext ctx = KernelContext::with_values(node, std::move(ins),
                                                   [&scope, &registry](const ir::Graph& g, const std::vector<Value>& inputs) {
                                                     return run_subgraph(g, inputs, scope, registry);
                                                   });
    const auto start = timer ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    run_kernel(fn, ctx);
    if (timer) (*timer)(idx, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      if (node.outputs[i].empty()) continue;
      Value v = ctx.take_output(i);
      if (!v.defined()) ir::fail(ErrorKind::Internal, node.describe() + ": kernel produced no output " + std::to_string(i));
      scope.set(node.outputs[i], std::move(v));
    }
    for (const auto& name : node.inputs) {
      auto it = last_use.find(name);
      if (!name.empty() && it != last_use.end() && it->second == idx && !keep.count(name) && scope.owns(name) &&
          !graph.initializers.count(name))
        scope.erase(name);
    }
  }

  std::vector<Value> outs;
  for (const auto& o : graph.outputs) {
    const Value* v = scope.find(o.name);
    if (!v) ir::fail(ErrorKind::InvalidModel, "graph output '" + o.name + "' is never computed");
    outs.push_back(*v);
  }
  return outs;
}

std::vector<Value> run_graph_values(const ir::Graph& graph, const std::map<std::string, Value>& inputs,
                                    const KernelRegistry* kernels, const NodeTimer* timer) {
  Scope scope(nullptr);
  for (const auto& [name, t] : graph.initializers) scope.set(name, t);
  for (const auto& [name, v] : inputs) scope.set(name, v);
  return run_in_scope(graph, scope, kernels ? *kernels : KernelRegistry::instance(), timer);
}

std::vector<Tensor> run_graph(const ir::Graph& graph, const std::map<std::string, Tensor>& inputs, const KernelRegistry* kernels,
                              const NodeTimer* timer) {
  std::vector<Value> values = run_graph_values(graph, {inputs.begin(), inputs.end()}, kernels, timer);
  return tensors_only(values, graph);
}

std::vector<Tensor> tensors_only(std::vector<Value>& values, const ir::Graph& graph) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (!values[i].is_tensor())
      ir::fail(ErrorKind::InvalidArgument, "output '" + (i < graph.outputs.size() ? graph.outputs[i].name : "?") + "' is " +
                                               values[i].describe() + ", which a run of tensors cannot return");
    out.push_back(std::move(values[i].tensor));
  }
  return out;
}

bool domain_has(const std::string& domain, const std::string& op_type) {
  // Of ONNX Runtime's contrib operators, those the graph passes make.
  return domain.empty() || domain == "ai.onnx" || (domain == "com.microsoft" && (op_type == "QLinearAdd" || op_type == "QGemm"));
}

bool has_kernel(const std::string& domain, const std::string& op_type) {
  return domain_has(domain, op_type) && KernelRegistry::instance().find(op_type) != nullptr;
}

ir::ConstantEvaluator constant_evaluator() {
  return [](const ir::Node& node, const std::vector<const Tensor*>& inputs) -> std::optional<std::vector<Tensor>> {
    if (!domain_has(node.domain, node.op_type)) return std::nullopt;
    KernelFn fn = KernelRegistry::instance().find(node.op_type);
    if (!fn) return std::nullopt;
    KernelContext ctx(node, inputs, nullptr);
    run_kernel(fn, ctx);
    for (size_t i = 0; i < node.outputs.size(); ++i)
      if (!node.outputs[i].empty() && !ctx.outputs()[i].defined()) return std::nullopt;
    return std::move(ctx.outputs());
  };
}

std::vector<std::string> unsupported_ops(const ir::Graph& graph) {
  std::set<std::string> s;
  ir::visit_nodes(graph, [&](const ir::Node& n) {
    if (!has_kernel(n.domain, n.op_type)) s.insert(n.domain.empty() ? n.op_type : n.domain + "." + n.op_type);
  });
  return {s.begin(), s.end()};
}

}  // namespace kiln::ref
