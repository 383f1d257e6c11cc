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
std::vector<Part> partition(const ir::Graph& graph, const ir::Specialization& spec, const std::vector<const Backend*>& backends);

struct PartitionedCompile {
  std::unique_ptr<Executable> executable;
  std::string backends;  // "cpu", or "cpu+interpreter" when several parts run on several backends
  int64_t parts = 0;
};

// Partitions and compiles `graph`. When the first backend takes the whole
// graph, the executable is its own. Otherwise the parts run one after
// another in an executable that hands values from part to part; it saves
// every part's artifact in one, and fails to save if a part cannot.
PartitionedCompile compile_partitioned(std::shared_ptr<const ir::Graph> graph, const ir::Specialization& spec,
                                       const std::vector<const Backend*>& backends, const CompileOptions& options);

// An executable from an artifact that compile_partitioned's executable saved
// with the same `backends` (the cache key covers them): the first backend's
// own, or the parts, each loaded by its backend. `graph` is the model's.
// Throws ir::Error(InvalidModel) naming what is inconsistent.
PartitionedCompile load_partitioned(const LoadedArtifact& artifact, std::shared_ptr<const ir::Graph> graph,
                                    const std::vector<const Backend*>& backends, const CompileOptions& options);

// What the code compile_partitioned makes depends on, for cache keys: every
// backend's identity, since an entry may hold parts of each.
std::string partitioned_identity(const std::vector<const Backend*>& backends, const CompileOptions& options);

}  // namespace kiln::backends
