#include "runtime/passes/passes.hpp"

namespace kiln::passes {

int fold_constants(ir::Graph& graph, const ir::ConstantEvaluator& evaluator, int64_t max_elements) {
  int folded = 0;
  std::vector<ir::Node> kept;
  for (ir::Node& node : graph.nodes) {
    bool constant = ir::may_fold(node) && !node.outputs.empty();
    std::vector<const ir::Tensor*> inputs;
    for (const auto& name : node.inputs) {
      if (!constant) break;
      if (name.empty()) {
        inputs.push_back(nullptr);
        continue;
      }
      const ir::Tensor* t = graph.constant(name);
      constant = t != nullptr;
      inputs.push_back(t);
    }
    if (inputs.empty()) constant = false;  // nothing to fold from
    std::optional<std::vector<ir::Tensor>> values;
    if (constant) {
      try {
        values = evaluator(node, inputs);
      } catch (const ir::Error&) {
        values.reset();  // let the run report it, with the caller's context
      }
    }
    bool small = values.has_value();
    if (values)
      for (const auto& t : *values) small &= t.numel() <= max_elements;
    if (!small) {
      kept.push_back(std::move(node));
      continue;
    }
    for (size_t i = 0; i < node.outputs.size() && i < values->size(); ++i)
      if (!node.outputs[i].empty()) graph.initializers[node.outputs[i]] = (*values)[i];
    ++folded;
  }
  graph.nodes = std::move(kept);
  return folded;
}

int bake_constants(ir::Graph& graph, const std::map<std::string, ir::Tensor>& constants, int64_t max_elements) {
  int baked = 0;
  std::vector<ir::Node> kept;
  for (ir::Node& node : graph.nodes) {
    bool known = !node.outputs.empty();
    for (const auto& o : node.outputs) {
      if (o.empty()) continue;
      auto it = constants.find(o);
      known = known && it != constants.end() && it->second.numel() <= max_elements;
    }
    if (!known) {
      kept.push_back(std::move(node));
      continue;
    }
    for (const auto& o : node.outputs)
      if (!o.empty()) graph.initializers[o] = constants.at(o);
    ++baked;
  }
  graph.nodes = std::move(kept);
  return baked;
}

}  // namespace kiln::passes
