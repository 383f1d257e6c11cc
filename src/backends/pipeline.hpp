#pragma once
// The one way from a model's graph and its input shapes to an executable:
// specialize (every shape concrete), run the graph passes, partition over the
// backends in their order of preference, compile each part; and the way a
// warm start comes back from what that executable saved. The runtime, the
// conformance runner and the operator tests all go through here, so a new
// backend or plugin takes part in all of them at once. Freezing stops after
// the passes: a bundle is lowered by the cpu backend's bundle code.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/partitioner.hpp"

namespace kiln::backends {

using InputShapes = std::map<std::string, std::pair<ir::DType, ir::Dims>>;

InputShapes shapes_of(const std::map<std::string, ir::Tensor>& inputs);
// The tensors' shapes: sequences and optionals keep their declaration.
InputShapes shapes_of(const std::map<std::string, ir::Value>& inputs);

struct Specialized {
  std::shared_ptr<ir::Graph> graph;  // shares the model's weights; passes only add tensors
  ir::Specialization spec;
};

// The graph and shapes the backends see for these inputs.
Specialized specialize_and_optimize(const ir::Graph& graph, const InputShapes& shapes);

// specialize_and_optimize, then compile_partitioned.
PartitionedCompile compile_for_shapes(const ir::Graph& graph, const InputShapes& shapes,
                                      const std::vector<const Backend*>& backends, const CompileOptions& options);

// What a warm start runs: `executable` saved, then loaded again from memory
// by the same backends. `graph` is the model's, as load_partitioned takes it.
PartitionedCompile reload(const Executable& executable, std::shared_ptr<const ir::Graph> graph,
                          const std::vector<const Backend*>& backends, const CompileOptions& options);

}  // namespace kiln::backends
