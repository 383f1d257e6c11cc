#include "runtime/passes/memory_plan.hpp"

#include <algorithm>
#include <set>

namespace kiln::passes {

namespace {

bool lifetimes_overlap(const MemoryPlan::Slot& a, const MemoryPlan::Slot& b) {
  return a.first_node <= b.last_node && b.first_node <= a.last_node;
}

int64_t round_up(int64_t v) { return (v + MemoryPlan::kAlignment - 1) / MemoryPlan::kAlignment * MemoryPlan::kAlignment; }

}  // namespace

MemoryPlan plan_memory(const ir::Graph& graph, const ir::Specialization& spec) {
  std::set<std::string> outside;  // values that never live in the arena
  for (const auto& in : graph.inputs) outside.insert(in.name);
  for (const auto& out : graph.outputs) outside.insert(out.name);
  for (const auto& [name, t] : graph.initializers) outside.insert(name);

  std::vector<BufferRequest> requests;
  std::map<std::string, size_t> index;
  std::vector<std::string> dynamic;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const ir::Node& node = graph.nodes[i];
    for (const auto& name : ir::values_read(node)) {  // subgraphs read outer values while their node runs
      auto it = index.find(name);
      if (it != index.end()) requests[it->second].last = i;
    }
    for (const auto& out : node.outputs) {
      if (out.empty() || outside.count(out)) continue;
      auto v = spec.result.values.find(out);
      if (v == spec.result.values.end() || !v->second.shape.is_concrete() || !ir::dtype_supported(v->second.dtype)) {
        dynamic.push_back(out);
        continue;
      }
      index[out] = requests.size();
      requests.push_back({out, ir::checked_numel(v->second.shape.concrete()) * int64_t(ir::dtype_size(v->second.dtype)), i, i});
    }
  }
  MemoryPlan plan = plan_buffers(requests);
  plan.dynamic = std::move(dynamic);
  return plan;
}

MemoryPlan plan_buffers(const std::vector<BufferRequest>& requests) {
  MemoryPlan plan;
  std::vector<std::string> order;  // definition order, for deterministic placement
  for (const auto& r : requests) {
    MemoryPlan::Slot slot;
    slot.bytes = round_up(r.bytes);
    slot.first_node = r.first;
    slot.last_node = r.last;
    plan.slots[r.name] = slot;
    order.push_back(r.name);
  }

  // Largest first, each at the lowest offset that is free for its lifetime.
  std::stable_sort(order.begin(), order.end(),
                   [&](const std::string& a, const std::string& b) { return plan.slots[a].bytes > plan.slots[b].bytes; });
  std::vector<const MemoryPlan::Slot*> placed;
  for (const auto& name : order) {
    MemoryPlan::Slot& slot = plan.slots[name];
    plan.intermediate_bytes += slot.bytes;
    std::vector<const MemoryPlan::Slot*> live;
    for (const auto* p : placed)
      if (lifetimes_overlap(*p, slot)) live.push_back(p);
    std::sort(live.begin(), live.end(), [](const auto* a, const auto* b) { return a->offset < b->offset; });
    int64_t offset = 0;
    for (const auto* p : live) {
      if (offset + slot.bytes <= p->offset) break;
      offset = std::max(offset, p->offset + p->bytes);
    }
    slot.offset = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + slot.bytes);
    placed.push_back(&slot);
  }
  return plan;
}

std::string check_memory_plan(const MemoryPlan& plan) {
  std::vector<std::pair<std::string, const MemoryPlan::Slot*>> all;
  for (const auto& [name, slot] : plan.slots) {
    if (slot.offset < 0 || slot.offset % MemoryPlan::kAlignment || slot.offset + slot.bytes > plan.arena_bytes)
      return "'" + name + "' lies outside the arena or is misaligned";
    all.emplace_back(name, &slot);
  }
  for (size_t i = 0; i < all.size(); ++i)
    for (size_t j = i + 1; j < all.size(); ++j) {
      const auto& a = *all[i].second;
      const auto& b = *all[j].second;
      bool bytes_overlap = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
      if (bytes_overlap && lifetimes_overlap(a, b))
        return "'" + all[i].first + "' and '" + all[j].first + "' overlap while both are alive";
    }
  return {};
}

}  // namespace kiln::passes
