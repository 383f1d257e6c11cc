#pragma once
// The IR as JSON values (binary payloads for tensor bytes), for what the
// on-disk cache stores: a node run by its reference kernel inside a compiled
// specialization, with its attributes and subgraphs. Encode the result with
// nlohmann::json::to_cbor; decoding checks every field and throws
// ir::Error(InvalidModel) naming what is wrong, never crashes on bad input.
#include <nlohmann/json.hpp>

#include "runtime/ir/graph.hpp"

namespace kiln::ir {

nlohmann::json tensor_to_json(const Tensor& t);
Tensor tensor_from_json(const nlohmann::json& j);

nlohmann::json node_to_json(const Node& n);
Node node_from_json(const nlohmann::json& j);

nlohmann::json graph_to_json(const Graph& g);
Graph graph_from_json(const nlohmann::json& j);

// Reads a field of an object, failing with InvalidModel if it is missing or
// has another type ("what": where the object came from, for the message).
template <typename T>
T json_field(const nlohmann::json& j, const char* key, const std::string& what) {
  auto it = j.is_object() ? j.find(key) : j.end();
  if (it == j.end()) fail(ErrorKind::InvalidModel, what + ": field '" + key + "' is missing");
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::InvalidModel, what + ": field '" + key + "' has the wrong type (" + e.what() + ")");
  }
}

}  // namespace kiln::ir
