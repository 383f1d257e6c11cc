#include <set>

#include "runtime/passes/passes.hpp"

namespace kiln::passes {

namespace {
void add_uses(const ir::Node& node, std::set<std::string>& live) {
  for (const auto& in : node.inputs) live.insert(in);
  // Subgraphs may read any outer value.
  for (const auto& [k, a] : node.attributes) {
    if (a.g)
      for (const auto& r : a.g->outer_references()) live.insert(r);
    for (const auto& g : a.graphs)
      for (const auto& r : g->outer_references()) live.insert(r);
  }
}
}  // namespace

int remove_dead_nodes(ir::Graph& graph) {
  std::set<std::string> live;
  for (const auto& o : graph.outputs) live.insert(o.name);
  std::vector<bool> keep(graph.nodes.size(), false);
  for (size_t i = graph.nodes.size(); i-- > 0;) {
    const ir::Node& node = graph.nodes[i];
    for (const auto& o : node.outputs) keep[i] = keep[i] || (!o.empty() && live.count(o));
    if (keep[i]) add_uses(node, live);
  }
  int removed = 0;
  std::vector<ir::Node> kept;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (keep[i]) kept.push_back(std::move(graph.nodes[i]));
    else ++removed;
  }
  graph.nodes = std::move(kept);
  std::set<std::string> inputs;
  for (const auto& in : graph.inputs) inputs.insert(in.name);
  for (auto it = graph.initializers.begin(); it != graph.initializers.end();) {
    if (!live.count(it->first) && !inputs.count(it->first)) it = graph.initializers.erase(it);
    else ++it;
  }
  return removed;
}

}  // namespace kiln::passes
