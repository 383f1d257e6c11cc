#include "backends/pipeline.hpp"

#include "backends/reference/reference_executor.hpp"
#include "runtime/passes/passes.hpp"

namespace kiln::backends {

InputShapes shapes_of(const std::map<std::string, ir::Tensor>& inputs) {
  InputShapes shapes;
  for (const auto& [name, t] : inputs) shapes[name] = {t.dtype(), t.dims()};
  return shapes;
}

InputShapes shapes_of(const std::map<std::string, ir::Value>& inputs) {
  InputShapes shapes;
  for (const auto& [name, v] : inputs)
    if (v.is_tensor()) shapes[name] = {v.tensor.dtype(), v.tensor.dims()};
  return shapes;
}

Specialized specialize_and_optimize(const ir::Graph& graph, const InputShapes& shapes) {
  Specialized s;
  s.spec = ir::specialize(graph, shapes, ref::constant_evaluator());
  s.graph = std::make_shared<ir::Graph>(graph);
  // The branches an If takes at these shapes join the graph, typed by a
  // second specialization.
  if (passes::inline_constant_ifs(*s.graph, s.spec.result.constants))
    s.spec = ir::specialize(*s.graph, shapes, ref::constant_evaluator());
  passes::optimize_specialization(*s.graph, s.spec, ref::constant_evaluator());
  return s;
}

PartitionedCompile compile_for_shapes(const ir::Graph& graph, const InputShapes& shapes,
                                      const std::vector<const Backend*>& backends, const CompileOptions& options) {
  Specialized s = specialize_and_optimize(graph, shapes);
  return compile_partitioned(std::move(s.graph), s.spec, backends, options);
}

PartitionedCompile reload(const Executable& executable, std::shared_ptr<const ir::Graph> graph,
                          const std::vector<const Backend*>& backends, const CompileOptions& options) {
  // The saved artifact may point into the executable: it stays alive until the copy is made.
  return load_partitioned(copy_to_memory(executable.save()), std::move(graph), backends, options);
}

}  // namespace kiln::backends
