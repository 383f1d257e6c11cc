#pragma once
// Static memory plan of a specialization: every intermediate value gets an
// offset in one scratch arena, and values whose lifetimes do not overlap share
// bytes. Graph inputs, outputs and weights live outside the arena.
#include <map>
#include <string>
#include <vector>

#include "runtime/ir/graph.hpp"
#include "runtime/ir/shape_inference.hpp"

namespace kiln::passes {

struct MemoryPlan {
  struct Slot {
    int64_t offset = 0;
    int64_t bytes = 0;      // rounded up to the alignment
    size_t first_node = 0;  // index of the node that writes it
    size_t last_node = 0;   // index of the last node that reads it
  };
  static constexpr int64_t kAlignment = 64;
  std::map<std::string, Slot> slots;
  int64_t arena_bytes = 0;           // the arena's size
  int64_t intermediate_bytes = 0;    // what the intermediates would take without reuse
  std::vector<std::string> dynamic;  // shapes unknown until run time: not planned
};

// `spec` gives every value's concrete shape (see ir::specialize).
MemoryPlan plan_memory(const ir::Graph& graph, const ir::Specialization& spec);

// The same placement for buffers a backend defines itself (fused steps,
// blocked layouts): each is written at step `first` and last read at `last`.
struct BufferRequest {
  std::string name;
  int64_t bytes = 0;
  size_t first = 0, last = 0;
};
MemoryPlan plan_buffers(const std::vector<BufferRequest>& requests);

// Empty if the plan is sound (slots inside the arena, aligned, and no two
// values that are alive at the same node sharing a byte); else what is wrong.
std::string check_memory_plan(const MemoryPlan& plan);

}  // namespace kiln::passes
