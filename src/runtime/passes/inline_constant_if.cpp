// An If whose condition is known once the input shapes are (a branch on a
// dimension, or on an initializer) is replaced by the nodes of the branch it
// takes, so that they compile with the rest of the graph instead of running
// as a subgraph on the reference kernels. Exporters write such Ifs for
// Python branches on tensor sizes.
#include <set>

#include "runtime/passes/passes.hpp"

namespace kiln::passes {

namespace {

// Every value name `graph` defines or reads, its subgraphs' included: a new
// name must clash with none of them.
void collect_names(const ir::Graph& graph, std::set<std::string>& names) {
  for (const auto& v : graph.inputs) names.insert(v.name);
  for (const auto& [name, t] : graph.initializers) names.insert(name);
  for (const auto& n : graph.nodes) {
    names.insert(n.inputs.begin(), n.inputs.end());
    names.insert(n.outputs.begin(), n.outputs.end());
    for (const auto& [key, a] : n.attributes) {
      if (a.g) collect_names(*a.g, names);
      for (const auto& g : a.graphs) collect_names(*g, names);
    }
  }
}

bool has_subgraphs(const ir::Graph& graph) {
  for (const auto& n : graph.nodes)
    for (const auto& [key, a] : n.attributes)
      if (a.g || !a.graphs.empty()) return true;
  return false;
}

// The branch `n` takes when its condition is one of `constants`, or null.
const ir::Graph* chosen_branch(const ir::Node& n, const std::map<std::string, ir::Tensor>& constants) {
  if (n.op_type != "If" || !n.domain.empty() || n.inputs.size() != 1) return nullptr;
  const auto it = constants.find(n.inputs[0]);
  if (it == constants.end() || it->second.numel() != 1) return nullptr;
  const ir::Attribute* branch = n.attr(it->second.as_int64(0) != 0 ? "then_branch" : "else_branch");
  if (!branch || !branch->g) return nullptr;
  const ir::Graph& g = *branch->g;
  // A branch takes no inputs; one whose nodes hold subgraphs of their own
  // (which may read the branch's values) is left as it is.
  if (!g.inputs.empty() || g.outputs.size() != n.outputs.size() || has_subgraphs(g)) return nullptr;
  return &g;
}

}  // namespace

bool inline_constant_ifs(ir::Graph& graph, const std::map<std::string, ir::Tensor>& constants) {
  bool any = false;
  for (const ir::Node& n : graph.nodes) any |= chosen_branch(n, constants) != nullptr;
  if (!any) return false;
  std::set<std::string> names;
  collect_names(graph, names);
  std::vector<ir::Node> nodes;
  for (ir::Node& n : graph.nodes) {
    const ir::Graph* branch = chosen_branch(n, constants);
    if (!branch) {
      nodes.push_back(std::move(n));
      continue;
    }
    // The branch's own values take names of their own in the graph; what it
    // reads from the enclosing scopes keeps its name.
    std::map<std::string, std::string> renamed;
    auto rename = [&](const std::string& name) {
      std::string fresh = n.name + "/" + name;
      for (int i = 1; names.count(fresh); ++i) fresh = n.name + "/" + name + "_" + std::to_string(i);
      names.insert(fresh);
      renamed[name] = fresh;
    };
    for (const auto& [name, t] : branch->initializers) rename(name);
    for (const auto& b : branch->nodes)
      for (const auto& o : b.outputs)
        if (!o.empty()) rename(o);
    auto name_of = [&](const std::string& name) {
      const auto it = renamed.find(name);
      return it == renamed.end() ? name : it->second;
    };
    for (const auto& [name, t] : branch->initializers) graph.initializers[renamed[name]] = t;
    for (const auto& [name, info] : branch->value_info)
      if (renamed.count(name)) {
        ir::ValueInfo v = info;
        v.name = renamed[name];
        graph.value_info[v.name] = v;
      }
    for (ir::Node b : branch->nodes) {
      for (auto& in : b.inputs)
        if (!in.empty()) in = name_of(in);
      for (auto& out : b.outputs)
        if (!out.empty()) out = name_of(out);
      b.name = n.name + "/" + b.name;
      nodes.push_back(std::move(b));
    }
    // The If's results are the branch's outputs under the If's names.
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (n.outputs[i].empty()) continue;
      ir::Node identity;
      identity.name = n.name + "/output_" + std::to_string(i);
      identity.op_type = "Identity";
      identity.opset = n.opset;
      identity.inputs = {name_of(branch->outputs[i].name)};
      identity.outputs = {n.outputs[i]};
      nodes.push_back(std::move(identity));
    }
  }
  graph.nodes = std::move(nodes);
  return true;
}

}  // namespace kiln::passes
