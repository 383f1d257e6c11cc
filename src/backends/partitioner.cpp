#include "backends/partitioner.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>

#include <nlohmann/json.hpp>

#include "backends/artifact_weights.hpp"
#include "backends/program_blocks.hpp"
#include "runtime/ir/serialize.hpp"

namespace kiln::backends {

namespace {

using nlohmann::json;

// Which nodes go together: groups keyed by (level, backend, the backend's
// own group). A node's level is the number of group changes on the longest
// path that reaches it, so a group never needs a value from a group of the
// same or a later key, and the map's order is an order in which parts can
// run. A backend's group that other backends' nodes interrupt becomes one
// part per level.
using Groups = std::map<std::tuple<int, size_t, int64_t>, std::vector<size_t>>;

// Whether `node` reads or makes a value that is not a plain tensor of
// numbers (a sequence, an optional, a string tensor), itself or in its
// subgraphs: only backends that run_any_value() may take it.
bool touches_other_values(const ir::Node& node, const ir::Specialization& spec) {
  auto plain = [&](const std::string& name) {
    auto it = spec.result.values.find(name);
    return it == spec.result.values.end() || it->second.is_plain_tensor();
  };
  for (const auto& name : ir::values_read(node))
    if (!plain(name)) return true;
  for (const auto& name : node.outputs)
    if (!name.empty() && !plain(name)) return true;
  bool other = false;
  auto check_graph = [&](const ir::Graph& g) {
    for (const auto* list : {&g.inputs, &g.outputs})
      for (const auto& v : *list) other |= !v.is_plain_tensor();
    for (const auto& [name, t] : g.initializers) other |= t.dtype() == ir::DType::String;
  };
  for (const auto& [key, a] : node.attributes) {
    if (a.kind == ir::Attribute::Kind::Graph && a.g) {
      check_graph(*a.g);
      ir::visit_nodes(*a.g, [&](const ir::Node& n) {
        static const std::set<std::string> makers = {
            "SequenceEmpty",      "SequenceConstruct",  "SequenceInsert",     "SequenceAt",  "SequenceErase",
            "SequenceLength",     "SplitToSequence",    "ConcatFromSequence", "SequenceMap", "Optional",
            "OptionalHasElement", "OptionalGetElement", "StringNormalizer"};
        other |= n.domain.empty() && makers.count(n.op_type);
        for (const auto& [k, sub] : n.attributes)
          if (sub.kind == ir::Attribute::Kind::Graph && sub.g) check_graph(*sub.g);
      });
    }
  }
  return other;
}

Groups group_nodes(const ir::Graph& graph, const ir::Specialization& spec, const std::vector<const Backend*>& backends) {
  std::vector<std::vector<int64_t>> claims;
  for (const auto* backend : backends) {
    claims.push_back(backend->claim(graph, spec));
    if (claims.back().size() != graph.nodes.size())
      ir::fail(ir::ErrorKind::Internal, "backend '" + backend->name() + "' answered for " + std::to_string(claims.back().size()) +
                                            " nodes of " + std::to_string(graph.nodes.size()));
  }
  std::map<std::string, size_t> producer;
  std::vector<std::pair<size_t, int64_t>> owner(graph.nodes.size());  // (backend, group)
  std::vector<int> level(graph.nodes.size());
  Groups groups;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const ir::Node& node = graph.nodes[i];
    const bool other_values = touches_other_values(node, spec);
    size_t b = 0;
    while (b < backends.size() && (claims[b][i] < 0 || (other_values && !backends[b]->runs_any_value()))) ++b;
    if (b == backends.size()) {
      std::string tried;
      for (const auto* backend : backends) tried += (tried.empty() ? "'" : ", '") + backend->name() + "'";
      const bool foreign = !node.domain.empty() && node.domain != "ai.onnx";
      ir::fail(ir::ErrorKind::Unsupported, node.describe() + ": " +
                                               (foreign ? "operator domain '" + node.domain + "'" : "operator " + node.op_type) +
                                               " is not supported (no backend takes it; tried " + tried + ")");
    }
    owner[i] = {b, claims[b][i]};
    int l = 0;
    for (const auto& name : ir::values_read(node))
      if (auto p = producer.find(name); p != producer.end()) l = std::max(l, level[p->second] + (owner[p->second] != owner[i]));
    level[i] = l;
    for (const auto& out : node.outputs)
      if (!out.empty()) producer[out] = i;
    groups[{l, b, owner[i].second}].push_back(i);
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
    part.backend = backends[std::get<1>(key)];
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
        const bool read_elsewhere = readers != read_by.end() &&
                                    std::any_of(readers->second.begin(), readers->second.end(), [&](size_t p) { return p != k; });
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
    std::string name;
    ir::DType dtype = ir::DType::Undefined;
    std::optional<ir::Dims> dims;  // what the part was compiled for, if concrete
  };
  struct Step {
    std::string backend;
    std::unique_ptr<Executable> executable;
    std::vector<Input> inputs;
    std::vector<std::string> outputs;
  };
  struct Output {
    std::string name;
    ir::Tensor constant;  // defined if no part computes it (folded at compile time)
  };
  PartitionedExecutable(std::vector<Step> steps, std::vector<Output> outputs)
      : steps_(std::move(steps)), outputs_(std::move(outputs)) {}

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
    std::vector<ir::Value> values = run_values({inputs.begin(), inputs.end()});
    std::vector<ir::Tensor> out;
    for (size_t i = 0; i < values.size(); ++i) {
      if (!values[i].is_tensor())
        ir::fail(ir::ErrorKind::InvalidArgument,
                 "output '" + outputs_[i].name + "' is " + values[i].describe() + ", which a run of tensors cannot return");
      out.push_back(std::move(values[i].tensor));
    }
    return out;
  }

  std::vector<ir::Value> run_values(const std::map<std::string, ir::Value>& inputs) const override {
    std::map<std::string, ir::Value> values = inputs;
    for (const auto& step : steps_) {
      std::map<std::string, ir::Value> given;
      // An input missing here is an overridable weight the caller left
      // alone: the part holds its default.
      for (const auto& in : step.inputs) {
        auto it = values.find(in.name);
        if (it == values.end()) continue;
        // A compiled part trusts the shapes it was compiled for: a value an
        // earlier part made otherwise (a shape inference mistake) stops here.
        const ir::Tensor& t = it->second.tensor;
        if (in.dims && (!it->second.is_tensor() || t.dims() != *in.dims || t.dtype() != in.dtype))
          ir::fail(ir::ErrorKind::Internal,
                   "value '" + in.name + "' is " +
                       (it->second.is_tensor() ? std::string(ir::dtype_name(t.dtype())) + " " + ir::dims_to_string(t.dims())
                                               : it->second.describe()) +
                       ", the next part was compiled for " + ir::dtype_name(in.dtype) + " " + ir::dims_to_string(*in.dims));
        given.emplace(in.name, it->second);
      }
      std::vector<ir::Value> produced = step.executable->run_values(given);
      if (produced.size() != step.outputs.size())
        ir::fail(ir::ErrorKind::Internal, "a part on " + step.backend + " made " + std::to_string(produced.size()) +
                                              " values, not " + std::to_string(step.outputs.size()));
      for (size_t i = 0; i < produced.size(); ++i) values[step.outputs[i]] = std::move(produced[i]);
    }
    std::vector<ir::Value> out;
    for (const auto& o : outputs_) {
      auto it = values.find(o.name);
      out.push_back(it != values.end() ? it->second : ir::Value(o.constant));
    }
    return out;
  }

  Artifact save() const override;
  // The backends its parts run on, in the order of preference ("cpu+interpreter").
  std::string backend_names(const std::vector<const Backend*>& backends) const {
    std::string names;
    for (const auto* backend : backends) {
      if (std::none_of(steps_.begin(), steps_.end(), [&](const Step& s) { return s.backend == backend->name(); })) continue;
      if (!names.empty()) names += '+';
      names += backend->name();
    }
    return names;
  }
  int64_t parts() const { return int64_t(steps_.size()); }
  static std::unique_ptr<PartitionedExecutable> load(const LoadedArtifact& artifact,
                                                     const std::shared_ptr<const ir::Graph>& graph,
                                                     const std::vector<const Backend*>& backends, const CompileOptions& options);

 private:
  std::vector<Step> steps_;
  std::vector<Output> outputs_;
};

// A partitioned artifact is the parts' own artifacts side by side: the
// objects one after another, each part's weights at a 64-byte aligned base
// of one weights file (then the outputs folded to constants), and a program
// that starts with kMagic (which no backend's own program starts with)
// followed by a document listing the parts, their programs as blocks.
constexpr std::string_view kMagic = "KILN-PARTS\n";
constexpr int kFormat = 3;

json dims_or_null(const std::optional<ir::Dims>& dims) { return dims ? json(*dims) : json(); }

Artifact PartitionedExecutable::save() const {
  Artifact a;
  WeightsWriter weights;
  BlockWriter blocks;
  json parts = json::array(), summaries = json::array();
  for (size_t k = 0; k < steps_.size(); ++k) {
    const Step& step = steps_[k];
    Artifact part;
    try {
      part = step.executable->save();
    } catch (const ir::Error& e) {
      ir::fail(e.kind(), "part " + std::to_string(k + 1) + " of " + std::to_string(steps_.size()) + " (" + step.backend +
                             ") cannot be saved: " + e.what());
    }
    json inputs = json::array();
    for (const auto& in : step.inputs) inputs.push_back({in.name, int(in.dtype), dims_or_null(in.dims)});
    const int64_t object_offset = int64_t(a.object.size());
    a.object += part.object;
    parts.push_back({{"backend", step.backend},
                     {"inputs", inputs},
                     {"outputs", step.outputs},
                     {"object", {object_offset, part.object.size()}},
                     {"program", blocks.add(part.program.data(), part.program.size())},
                     {"weights", {weights.add(part), part.weights_bytes}}});
    summaries.push_back({{"backend", step.backend}, {"part", json::parse(part.summary.empty() ? "null" : part.summary)}});
  }
  json outputs = json::array();
  for (const auto& o : outputs_) {
    json out = {{"name", o.name}};
    if (o.constant.defined()) out["constant"] = save_constant(o.constant, weights);
    outputs.push_back(std::move(out));
  }
  put_weights(weights, a);
  a.program = std::string(kMagic) + blocks.finish({{"format", kFormat}, {"parts", parts}, {"outputs", outputs}});
  a.summary = json({{"parts", summaries}}).dump();
  return a;
}

std::unique_ptr<PartitionedExecutable> PartitionedExecutable::load(const LoadedArtifact& artifact,
                                                                   const std::shared_ptr<const ir::Graph>& graph,
                                                                   const std::vector<const Backend*>& backends,
                                                                   const CompileOptions& options) {
  const std::string what = "cached partitioned specialization";
  const WeightsReader weights(artifact.weights, artifact.weights_bytes);
  const BlockReader blocks(artifact.program.substr(kMagic.size()), what);
  try {
    const json& j = blocks.document();
    if (ir::json_field<int>(j, "format", what) != kFormat) ir::fail(ir::ErrorKind::InvalidModel, what + ": unknown format");
    std::vector<Step> steps;
    for (const json& p : ir::json_field<json>(j, "parts", what)) {
      Step step;
      step.backend = ir::json_field<std::string>(p, "backend", what);
      const std::string where = what + " part " + std::to_string(steps.size() + 1) + " (" + step.backend + ")";
      auto backend = std::find_if(backends.begin(), backends.end(), [&](const Backend* b) { return b->name() == step.backend; });
      if (backend == backends.end()) ir::fail(ir::ErrorKind::InvalidModel, where + ": this runtime has no such backend");
      for (const json& in : ir::json_field<json>(p, "inputs", where)) {
        const json& dims = in.at(2);
        step.inputs.push_back({in.at(0).get<std::string>(), ir::DType(in.at(1).get<int>()),
                               dims.is_null() ? std::nullopt : std::optional<ir::Dims>(dims.get<ir::Dims>())});
      }
      step.outputs = ir::json_field<std::vector<std::string>>(p, "outputs", where);
      const auto object = ir::json_field<std::pair<int64_t, int64_t>>(p, "object", where);
      if (object.first < 0 || object.second < 0 || uint64_t(object.first) > artifact.object.size() ||
          uint64_t(object.second) > artifact.object.size() - uint64_t(object.first))
        ir::fail(ir::ErrorKind::InvalidModel, where + ": the object lies outside its file");
      const auto [weights_offset, weights_bytes] = ir::json_field<std::pair<int64_t, int64_t>>(p, "weights", where);
      const char* part_weights = static_cast<const char*>(weights.at(weights_offset, weights_bytes, where + " weights"));
      if (weights_offset % 64) ir::fail(ir::ErrorKind::InvalidModel, where + ": weights are not 64-byte aligned");
      LoadedArtifact part;
      part.object = artifact.object.substr(size_t(object.first), size_t(object.second));
      part.program = blocks.block(ir::json_field<json>(p, "program", where), where + ": its program");
      part.weights = part_weights;
      part.weights_bytes = size_t(weights_bytes);
      part.keep_alive = artifact.keep_alive;
      part.check = artifact.check;
      try {
        step.executable = (*backend)->load(part, graph, options);
      } catch (const ir::Error& e) {
        ir::fail(e.kind(), where + ": " + e.what());
      }
      steps.push_back(std::move(step));
    }
    std::vector<Output> outputs;
    for (const json& o : ir::json_field<json>(j, "outputs", what)) {
      Output out{ir::json_field<std::string>(o, "name", what), {}};
      if (o.contains("constant"))
        out.constant = load_constant(o["constant"], weights, artifact.keep_alive, what + " output '" + out.name + "'");
      outputs.push_back(std::move(out));
    }
    if (outputs.size() != graph->outputs.size()) ir::fail(ir::ErrorKind::InvalidModel, what + ": not the model's outputs");
    return std::make_unique<PartitionedExecutable>(std::move(steps), std::move(outputs));
  } catch (const json::exception& e) {
    ir::fail(ir::ErrorKind::InvalidModel, what + " is malformed: " + e.what());
  }
}

PartitionedCompile result(std::unique_ptr<PartitionedExecutable> executable, const std::vector<const Backend*>& backends) {
  std::string names = executable->backend_names(backends);
  const int64_t parts = executable->parts();
  return {std::move(executable), std::move(names), parts};
}

}  // namespace

std::vector<Part> partition(const ir::Graph& graph, const ir::Specialization& spec, const std::vector<const Backend*>& backends) {
  return make_parts(graph, spec, backends, group_nodes(graph, spec, backends));
}

namespace {

bool outputs_made_by_nodes(const ir::Graph& graph) {
  std::set<std::string> made;
  for (const auto& node : graph.nodes) made.insert(node.outputs.begin(), node.outputs.end());
  std::set<std::string> seen;
  for (const auto& out : graph.outputs)
    if (!made.count(out.name) || !seen.insert(out.name).second) return false;
  return true;
}

}  // namespace

PartitionedCompile compile_partitioned(std::shared_ptr<const ir::Graph> graph, const ir::Specialization& spec,
                                       const std::vector<const Backend*>& backends, const CompileOptions& options) {
  const Groups groups = group_nodes(*graph, spec, backends);
  // The first backend's whole-graph executable is its own (its entries are
  // its own artifacts); anything else goes through the parts' format.
  // A plugin that fails to compile said why (its own warning); the backends
  // after it take its nodes.
  auto without = [&](const Backend* declining) {
    std::vector<const Backend*> others;
    for (const auto* b : backends)
      if (b != declining) others.push_back(b);
    PartitionedCompile made = compile_partitioned(graph, spec, others, options);
    if (dynamic_cast<PartitionedExecutable*>(made.executable.get())) return made;
    // A backend's own executable would load as the first backend's: one part.
    PartitionedExecutable::Step step;
    step.backend = made.backends;
    step.executable = std::move(made.executable);
    for (const auto& in : graph->inputs) step.inputs.push_back({in.name, in.dtype, std::nullopt});
    for (const auto& out : graph->outputs) step.outputs.push_back(out.name);
    std::vector<PartitionedExecutable::Step> steps;
    steps.push_back(std::move(step));
    std::vector<PartitionedExecutable::Output> outputs;
    for (const auto& out : graph->outputs) outputs.push_back({out.name, {}});
    return result(std::make_unique<PartitionedExecutable>(std::move(steps), std::move(outputs)), backends);
  };
  // A graph without nodes (its outputs are inputs or constants) needs no
  // plugin: the first built-in backend serves it.
  if (groups.empty() && backends.at(0)->may_decline()) return without(backends.at(0));
  // A plugin is handed only outputs its nodes make: a graph output that is
  // an input or a constant goes through the parts, which serve it themselves.
  const bool whole = groups.size() == 1 && std::get<1>(groups.begin()->first) == 0 &&
                     (!backends.at(0)->may_decline() || outputs_made_by_nodes(*graph));
  if (groups.empty() || whole) {
    try {
      return {backends.at(0)->compile(graph, spec, options), backends.at(0)->name(), 1};
    } catch (const ir::Error&) {
      if (!backends.at(0)->may_decline()) throw;
      return without(backends.at(0));
    }
  }
  std::vector<PartitionedExecutable::Step> steps;
  for (Part& part : make_parts(*graph, spec, backends, groups)) {
    PartitionedExecutable::Step step;
    step.backend = part.backend->name();
    for (const auto& in : part.graph->inputs)
      step.inputs.push_back({in.name, in.dtype,
                             in.kind == ir::ValueKind::Tensor && in.shape.is_concrete()
                                 ? std::optional<ir::Dims>(in.shape.concrete())
                                 : std::nullopt});
    for (const auto& v : part.graph->outputs) step.outputs.push_back(v.name);
    try {
      step.executable = part.backend->compile(std::move(part.graph), spec, options);
    } catch (const ir::Error&) {
      if (!part.backend->may_decline()) throw;
      return without(part.backend);
    }
    steps.push_back(std::move(step));
  }
  std::set<std::string> produced;
  for (const auto& step : steps) produced.insert(step.outputs.begin(), step.outputs.end());
  std::vector<PartitionedExecutable::Output> outputs;
  for (const auto& o : graph->outputs) {
    PartitionedExecutable::Output out{o.name, {}};
    // Not made by a part: a graph input (given, or else its default) or a
    // value folded at compile time.
    if (!produced.count(o.name)) {
      auto init = graph->initializers.find(o.name);
      if (init != graph->initializers.end())
        out.constant = init->second;
      else if (!graph->find_input(o.name))
        ir::fail(ir::ErrorKind::Internal, "partition: no part produces output '" + o.name + "'");
    }
    outputs.push_back(std::move(out));
  }
  return result(std::make_unique<PartitionedExecutable>(std::move(steps), std::move(outputs)), backends);
}

std::string partitioned_identity(const std::vector<const Backend*>& backends, const CompileOptions& options) {
  std::string identity;
  for (const auto* backend : backends) {
    if (!identity.empty()) identity += "; ";
    identity += backend->identity(options);
  }
  return identity;
}

PartitionedCompile load_partitioned(const LoadedArtifact& artifact, std::shared_ptr<const ir::Graph> graph,
                                    const std::vector<const Backend*>& backends, const CompileOptions& options) {
  if (artifact.program.substr(0, kMagic.size()) != kMagic)
    return {backends.at(0)->load(artifact, std::move(graph), options), backends.at(0)->name(), 1};
  return result(PartitionedExecutable::load(artifact, graph, backends, options), backends);
}

}  // namespace kiln::backends
