#pragma once
// Values a graph pass adds: a name nothing in the graph or the
// specialization has yet, and the value's type recorded in the
// specialization (a backend plans only values the specialization knows).
#include <string>

#include "runtime/ir/graph.hpp"
#include "runtime/ir/shape_inference.hpp"

namespace kiln::passes {

inline std::string fresh_name(const ir::Graph& graph, const ir::Specialization& spec, const std::string& base) {
  std::string name = base;
  for (int i = 1; spec.result.values.count(name) || graph.initializers.count(name); ++i) name = base + "_" + std::to_string(i);
  return name;
}

inline std::string new_value(const ir::Graph& graph, ir::Specialization& spec, const std::string& base, ir::DType dtype,
                             const ir::Dims& dims) {
  const std::string name = fresh_name(graph, spec, base);
  spec.result.values[name] = ir::ValueInfo{name, dtype, ir::Shape::from_dims(dims)};
  return name;
}

// A new initializer, known to the specialization as a constant too.
inline std::string new_constant(ir::Graph& graph, ir::Specialization& spec, const std::string& base, ir::Tensor t) {
  const std::string name = new_value(graph, spec, base, t.dtype(), t.dims());
  spec.result.constants[name] = t;
  graph.initializers[name] = std::move(t);
  return name;
}

}  // namespace kiln::passes
