// The lowering's entry points (lowering.hpp): the context runs it, the op
// table says what the backend compiles.
#include "backends/cpu/lowering.hpp"

#include "backends/cpu/lower/context.hpp"
#include "backends/cpu/lower/op_table.hpp"
#include "backends/reference/reference_executor.hpp"
#include "runtime/ir/environment.hpp"

namespace kiln::cpu {

Tuning Tuning::of(const backends::CompileOptions& options) {
  Tuning t;
  t.channel_blocks_from = options.channel_blocks_from ? *options.channel_blocks_from : env::channel_blocks_from();
  if (t.channel_blocks_from < 0)
    ir::fail(ir::ErrorKind::InvalidArgument, "channel_blocks_from " + std::to_string(t.channel_blocks_from) + ": expected bytes");
  t.winograd = options.winograd ? *options.winograd : env::winograd();
  return t;
}

bool lowers_natively(const ir::Node& node) {
  const lowering::OpLowering* op = lowering::find_op(node);
  return op && op->claimed;
}

bool lowers(const ir::Node& node, const ir::Specialization& spec) {
  for (const auto& name : ir::values_read(node))
    if (!lowering::is_static(spec, name)) return false;
  for (const auto& name : node.outputs)
    if (!name.empty() && !lowering::is_static(spec, name)) return false;
  return lowers_natively(node) || ref::has_kernel(node.domain, node.op_type);
}

Program lower(const ir::Graph& graph, const ir::Specialization& spec, KernelFamily family, DeferredWork* deferred,
              std::vector<ImplementationTrial>* trials, const Tuning& tuning, const BodyCompiler* bodies) {
  DeferredWork work;
  Program p = lowering::Context(graph, spec, family, deferred ? *deferred : work, trials, tuning, bodies).run();
  p.graph_nodes = int(graph.nodes.size());
  for (auto& task : work) task();
  return p;
}

}  // namespace kiln::cpu
