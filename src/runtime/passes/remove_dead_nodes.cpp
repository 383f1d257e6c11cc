#include <set>

#include "runtime/passes/passes.hpp"

namespace kiln::passes {

int remove_dead_nodes(ir::Graph& graph) {
  std::set<std::string> live;
  for (const auto& o : graph.outputs) live.insert(o.name);
  std::vector<bool> keep(graph.nodes.size(), false);
  for (size_t i = graph.nodes.size(); i-- > 0;) {
    const ir::Node& node = graph.nodes[i];
    for (const auto& o : node.outputs) keep[i] = keep[i] || (!o.empty() && live.count(o));
    if (keep[i])
      for (const auto& name : ir::values_read(node)) live.insert(name);
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
