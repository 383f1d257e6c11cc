#include "backends/partitioner.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

namespace kiln::backends {

namespace {

// Which nodes go together: groups keyed by (level, backend). A node's level
// is the number of backend changes on the longest path that reaches it, so
// a group never needs a value from a group of the same or a later key, and
// the map's order is an order in which parts can run.
using Groups = std::map<std::pair<int, size_t>, std::vector<size_t>>;

Groups group_nodes(const ir::Graph& graph, const ir::Specialization& spec, const std::vector<const Backend*>& backends) {
  std::map<std::string, size_t> producer;
  std::vector<size_t> owner(graph.nodes.size());
  std::vector<int> level(graph.nodes.size());
  Groups groups;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const ir::Node& node = graph.nodes[i];
    size_t b = 0;
    while (b < backends.size() && !backends[b]->takes(node, spec)) ++b;
    if (b == backends.size()) {
      std::string tried;
      for (const auto* backend : backends) tried += (tried.empty() ? "'" : ", '") + backend->name() + "'";
      const bool foreign = !node.domain.empty() && node.domain != "ai.onnx";
      ir::fail(ir::ErrorKind::Unsupported, node.describe() + ": " +
                                               (foreign ? "operator domain '" + node.domain + "'" : "operator " + node.op_type) +
                                               " is not supported (no backend takes it; tried " + tried + ")");
    }
    int l = 0;
    for (const auto& name : ir::values_read(node))
      if (auto p = producer.find(name); p != producer.end()) l = std::max(l, level[p->second] + (owner[p->second] != b));
    owner[i] = b;
    level[i] = l;
    for (const auto& out : node.outputs)
      if (!out.empty()) producer[out] = i;
    groups[{l, b}].push_back(i);
  }
  return groups;
}

std::vector<Part> make_parts(const ir::Graph& graph, const ir::Specialization& spec, const std::vector<const Backend*>& backends,
                             const Groups& groups) {
  std::vector<size_t> part_of(graph.nodes.size());
  size_t k = 0;
  for (const auto& [key, nodes] : groups) {
    for (size_t i : nodes) part_of[i] = k;
    ++k;
  }
  std::map<std::string, std::set<size_t>> read_by;  // value -> parts that read it
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    for (const auto& name : ir::values_read(graph.nodes[i])) read_by[name].insert(part_of[i]);
  std::set<std::string> graph_outputs;
  for (const auto& o : graph.outputs) graph_outputs.insert(o.name);
  auto info = [&](const std::string& name) {
    auto it = spec.result.values.find(name);
    if (it == spec.result.values.end()) ir::fail(ir::ErrorKind::Internal, "partition: no type for '" + name + "'");
    return it->second;
  };

  std::vector<Part> parts;
  k = 0;
  for (const auto& [key, nodes] : groups) {
    Part part;
    part.backend = backends[key.second];
    auto sub = std::make_shared<ir::Graph>();
    sub->name = graph.name + " (part " + std::to_string(k + 1) + ", " + part.backend->name() + ")";
    std::set<std::string> defined;
    for (size_t i : nodes) {
      const ir::Node& node = graph.nodes[i];
      for (const auto& name : ir::values_read(node)) {
        if (!defined.insert(name).second) continue;
        auto init = graph.initializers.find(name);
        if (init != graph.initializers.end()) sub->initializers.emplace(name, init->second);
        // Graph inputs stay inputs (the caller may override one with a
        // default); values of other parts become inputs.
        if (init == graph.initializers.end() || graph.find_input(name)) sub->inputs.push_back(info(name));
      }
      for (const auto& out : node.outputs) {
        if (out.empty()) continue;
        defined.insert(out);
        auto readers = read_by.find(out);
        const bool read_elsewhere =
            readers != read_by.end() && std::any_of(readers->second.begin(), readers->second.end(), [&](size_t p) { return p != k; });
        if (read_elsewhere || graph_outputs.count(out)) sub->outputs.push_back(info(out));
      }
      sub->nodes.push_back(node);
    }
    part.graph = std::move(sub);
    parts.push_back(std::move(part));
    ++k;
  }
  return parts;
}

// Runs the parts in order. Each run keeps its values in a map of its own,
// so concurrent runs share nothing but the parts' executables.
class PartitionedExecutable : public Executable {
 public:
  struct Input {
    ir::ValueInfo info;
    std::optional<ir::Dims> dims;  // what the part was compiled for, if concrete
  };
  struct Step {
    std::unique_ptr<Executable> executable;
    std::vector<Input> inputs;
    std::vector<std::string> outputs;
  };
  PartitionedExecutable(std::shared_ptr<const ir::Graph> graph, std::vector<Step> steps, std::string backends)
      : graph_(std::move(graph)), steps_(std::move(steps)), backends_(std::move(backends)) {}

  ExecutableStats stats() const override {
    ExecutableStats total;
    for (const auto& step : steps_) {
      const ExecutableStats s = step.executable->stats();
      total.nodes += s.nodes;
      total.compiled_nodes += s.compiled_nodes;
      total.arena_bytes += s.arena_bytes;
      total.intermediate_bytes += s.intermediate_bytes;
    }
    // Whatever no backend compiled ran on reference kernels, in a compiled
    // part or in a part of the reference backend's own.
    total.fallback_nodes = total.nodes - total.compiled_nodes;
    return total;
  }

  std::vector<ir::Tensor> run(const std::map<std::string, ir::Tensor>& inputs) const override {
    std::map<std::string, ir::Tensor> values = inputs;
    for (const auto& step : steps_) {
      std::map<std::string, ir::Tensor> given;
      // An input missing here is an overridable weight the caller left
      // alone: the part's graph holds its default.
      for (const auto& [in, dims] : step.inputs) {
        auto it = values.find(in.name);
        if (it == values.end()) continue;
        // A compiled part trusts the shapes it was compiled for: a value an
        // earlier part made otherwise (a shape inference mistake) stops here.
        if (dims && (it->second.dims() != *dims || it->second.dtype() != in.dtype))
          ir::fail(ir::ErrorKind::Internal, "value '" + in.name + "' is " + ir::dtype_name(it->second.dtype()) + " " +
                                                ir::dims_to_string(it->second.dims()) + ", the next part was compiled for " +
                                                ir::dtype_name(in.dtype) + " " + in.shape.to_string());
        given.emplace(in.name, it->second);
      }
      std::vector<ir::Tensor> produced = step.executable->run(given);
      for (size_t i = 0; i < produced.size(); ++i) values[step.outputs[i]] = std::move(produced[i]);
    }
    std::vector<ir::Tensor> out;
    for (const auto& o : graph_->outputs) {
      if (auto it = values.find(o.name); it != values.end()) {
        out.push_back(it->second);
      } else if (auto init = graph_->initializers.find(o.name); init != graph_->initializers.end()) {
        out.push_back(init->second);
      } else {
        ir::fail(ir::ErrorKind::Internal, "partitioned run: no part produced output '" + o.name + "'");
      }
    }
    return out;
  }

  Artifact save() const override {
    ir::fail(ir::ErrorKind::Unsupported, "this specialization runs in " + std::to_string(steps_.size()) + " parts on " +
                                             backends_ + "; only a specialization that one backend runs whole is cached");
  }

 private:
  std::shared_ptr<const ir::Graph> graph_;
  std::vector<Step> steps_;
  std::string backends_;
};

}  // namespace

std::vector<Part> partition(const ir::Graph& graph, const ir::Specialization& spec, const std::vector<const Backend*>& backends) {
  return make_parts(graph, spec, backends, group_nodes(graph, spec, backends));
}

PartitionedCompile compile_partitioned(std::shared_ptr<const ir::Graph> graph, const ir::Specialization& spec,
                                       const std::vector<const Backend*>& backends, const CompileOptions& options) {
  const Groups groups = group_nodes(*graph, spec, backends);
  if (groups.size() <= 1) {
    const Backend* backend = backends.at(groups.empty() ? 0 : groups.begin()->first.second);
    return {backend->compile(std::move(graph), spec, options), backend->name(), 1};
  }
  std::vector<PartitionedExecutable::Step> steps;
  std::set<const Backend*> used;
  for (Part& part : make_parts(*graph, spec, backends, groups)) {
    PartitionedExecutable::Step step;
    for (const auto& in : part.graph->inputs)
      step.inputs.push_back({in, in.shape.is_concrete() ? std::optional<ir::Dims>(in.shape.concrete()) : std::nullopt});
    for (const auto& v : part.graph->outputs) step.outputs.push_back(v.name);
    used.insert(part.backend);
    step.executable = part.backend->compile(std::move(part.graph), spec, options);
    steps.push_back(std::move(step));
  }
  std::string names;
  for (const auto* backend : backends) {
    if (!used.count(backend)) continue;
    if (!names.empty()) names += '+';
    names += backend->name();
  }
  const int64_t parts = int64_t(steps.size());
  return {std::make_unique<PartitionedExecutable>(std::move(graph), std::move(steps), names), names, parts};
}

}  // namespace kiln::backends
