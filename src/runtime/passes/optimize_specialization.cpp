#include "runtime/passes/passes.hpp"

namespace kiln::passes {

void optimize_specialization(ir::Graph& graph, ir::Specialization& spec, const ir::ConstantEvaluator& evaluator) {
  fuse_qdq(graph, spec);
  bake_constants(graph, spec.result.constants);
  // Shape inference folds only small values; this also folds weight
  // preprocessing (e.g. a Transpose of an initializer) of any size.
  fold_constants(graph, evaluator);
  fold_pad(graph);
  fold_batch_norm(graph, spec);
  batch_norm_as_conv(graph, spec);
  distribute_concat(graph, spec);
  reduce_as_global_pool(graph, spec);
  no_ops_as_identity(graph, spec);
  remove_dead_nodes(graph);
}

}  // namespace kiln::passes
