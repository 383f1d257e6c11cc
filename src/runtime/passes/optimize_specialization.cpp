#include "runtime/passes/passes.hpp"

namespace kiln::passes {

void optimize_specialization(ir::Graph& graph, const ir::Specialization& spec) {
  bake_constants(graph, spec.result.constants);
  fold_batch_norm(graph);
  remove_dead_nodes(graph);
}

}  // namespace kiln::passes
