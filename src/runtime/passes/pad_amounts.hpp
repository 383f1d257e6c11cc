#pragma once
// What two passes read off a Pad node (fold_pad, no_ops_as_identity).
#include <optional>
#include <vector>

#include "runtime/ir/graph.hpp"

namespace kiln::passes {

// A Pad's pads, [begin of every axis..., end of every axis...], when fixed
// at compile time: the attribute before opset 11, a constant input from
// then on. Opset 1 ("paddings") is not read.
inline std::optional<std::vector<int64_t>> pad_amounts(const ir::Graph& graph, const ir::Node& pad) {
  if (pad.opset < 2) return std::nullopt;
  if (pad.opset < 11) {
    const ir::Attribute* a = pad.attr("pads");
    return a ? std::optional(a->ints) : std::nullopt;
  }
  const ir::Tensor* t = pad.inputs.size() > 1 && !pad.inputs[1].empty() ? graph.constant(pad.inputs[1]) : nullptr;
  return t ? std::optional(t->to_int64_vector()) : std::nullopt;
}

}  // namespace kiln::passes
