#pragma once
// Splitting a specialization over backends. Each node goes to the first
// backend, in the runtime's order of preference, that takes it; the nodes
// of one backend that need nothing from another backend in between form a
// part, which that backend compiles as a graph of its own. With one part
// (the usual case) the backend compiles the whole graph, as if there were
// no partitioner.
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.hpp"

namespace kiln::backends {

struct Part {
  const Backend* backend = nullptr;
  // The part's nodes, in the graph's order. Its inputs are the values it
  // reads from outside (graph inputs, or outputs of earlier parts); its
  // outputs are what later parts or the graph's outputs read.
  std::shared_ptr<ir::Graph> graph;
};

// Parts in an order in which each one's inputs are ready. Throws
// ir::Error(Unsupported) naming the first node that no backend takes.
std::vector<Part> partition(const ir::Graph& graph, const ir::Specialization& spec,
                            const std::vector<const Backend*>& backends);

struct PartitionedCompile {
  std::unique_ptr<Executable> executable;
  std::string backends;  // "cpu", or "cpu+interpreter" when several parts run on several backends
  int64_t parts = 0;
};

// Partitions and compiles `graph`. Several parts run one after another in an
// executable that hands values from part to part; it cannot be saved for
// the cache (save() says so).
PartitionedCompile compile_partitioned(std::shared_ptr<const ir::Graph> graph, const ir::Specialization& spec,
                                       const std::vector<const Backend*>& backends, const CompileOptions& options);

}  // namespace kiln::backends
