#include <set>

#include "runtime/passes/passes.hpp"

namespace kiln::passes {

int remove_dead_nodes(ir::Graph& graph) {
  std::set<std::string> live;
  for (const auto& o : graph.outputs) live.insert(o.name);
  std::vector<bool> dead(graph.nodes.size(), true);
  for (size_t i = graph.nodes.size(); i-- > 0;) {
    const ir::Node& node = graph.nodes[i];
    for (const auto& o : node.outputs) dead[i] = dead[i] && (o.empty() || !live.count(o));
    if (!dead[i])
      for (const auto& name : ir::values_read(node)) live.insert(name);
  }
  const int removed = ir::erase_nodes(graph, dead);
  std::set<std::string> inputs;
  for (const auto& in : graph.inputs) inputs.insert(in.name);
  for (auto it = graph.initializers.begin(); it != graph.initializers.end();) {
    if (!live.count(it->first) && !inputs.count(it->first))
      it = graph.initializers.erase(it);
    else
      ++it;
  }
  return removed;
}

}  // namespace kiln::passes
