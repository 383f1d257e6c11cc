#include "runtime/ir/serialize.hpp"

#include <cstring>

namespace kiln::ir {

using nlohmann::json;

namespace {

json shape_to_json(const Shape& s) {
  if (!s.rank_known) return nullptr;
  json dims = json::array();
  for (const Dim& d : s.dims) dims.push_back(d.is_known() ? json(*d.value) : json(d.symbol));  // "" is unknown
  return dims;
}

Shape shape_from_json(const json& j, const std::string& what) {
  if (j.is_null()) return Shape::unknown_rank();
  if (!j.is_array()) fail(ErrorKind::InvalidModel, what + ": a shape must be an array or null");
  Shape s;
  for (const json& d : j) {
    if (d.is_number_integer())
      s.dims.push_back(Dim::known(d.get<int64_t>()));
    else if (d.is_string())
      s.dims.push_back(d.get<std::string>().empty() ? Dim::unknown() : Dim::named(d.get<std::string>()));
    else
      fail(ErrorKind::InvalidModel, what + ": a dimension must be a number or a symbol");
  }
  return s;
}

json value_info_to_json(const ValueInfo& v) {
  json j = {{"name", v.name}, {"dtype", int(v.dtype)}, {"shape", shape_to_json(v.shape)}};
  if (v.kind != ValueKind::Tensor) j["kind"] = {int(v.kind), int(v.element_kind)};
  return j;
}

ValueInfo value_info_from_json(const json& j, const std::string& what) {
  ValueInfo v;
  v.name = json_field<std::string>(j, "name", what);
  v.dtype = DType(json_field<int>(j, "dtype", what));
  v.shape = shape_from_json(j.is_object() && j.contains("shape") ? j["shape"] : json(), what + " '" + v.name + "'");
  if (j.contains("kind")) {
    const auto [kind, element] = json_field<std::pair<int, int>>(j, "kind", what);
    auto known = [&](int k) {
      if (k < 0 || k > int(ValueKind::Optional)) fail(ErrorKind::InvalidModel, what + " '" + v.name + "': unknown value kind");
      return ValueKind(k);
    };
    v.kind = known(kind);
    v.element_kind = known(element);
  }
  return v;
}

json attribute_to_json(const Attribute& a) {
  json j = {{"kind", int(a.kind)}};
  switch (a.kind) {
    case Attribute::Kind::Float: j["v"] = a.f; break;
    case Attribute::Kind::Int: j["v"] = a.i; break;
    case Attribute::Kind::String: j["v"] = json::binary(std::vector<uint8_t>(a.s.begin(), a.s.end())); break;
    case Attribute::Kind::Tensor: j["v"] = tensor_to_json(a.t); break;
    case Attribute::Kind::Graph: j["v"] = graph_to_json(*a.g); break;
    case Attribute::Kind::Floats: j["v"] = a.floats; break;
    case Attribute::Kind::Ints: j["v"] = a.ints; break;
    case Attribute::Kind::Strings:
      j["v"] = json::array();
      for (const auto& s : a.strings) j["v"].push_back(json::binary(std::vector<uint8_t>(s.begin(), s.end())));
      break;
    case Attribute::Kind::Tensors:
      j["v"] = json::array();
      for (const auto& t : a.tensors) j["v"].push_back(tensor_to_json(t));
      break;
    case Attribute::Kind::Graphs:
      j["v"] = json::array();
      for (const auto& g : a.graphs) j["v"].push_back(graph_to_json(*g));
      break;
    case Attribute::Kind::Type: j["v"] = value_info_to_json(a.type); break;
  }
  return j;
}

std::string binary_string(const json& j, const std::string& what) {
  if (!j.is_binary()) fail(ErrorKind::InvalidModel, what + ": expected bytes");
  const auto& b = j.get_binary();
  return std::string(b.begin(), b.end());
}

Attribute attribute_from_json(const json& j, const std::string& what) {
  Attribute a;
  const int kind = json_field<int>(j, "kind", what);
  if (kind < int(Attribute::Kind::Float) || kind > int(Attribute::Kind::Type))
    fail(ErrorKind::InvalidModel, what + ": unknown attribute kind " + std::to_string(kind));
  a.kind = Attribute::Kind(kind);
  if (!j.contains("v")) fail(ErrorKind::InvalidModel, what + ": attribute has no value");
  const json& v = j["v"];
  try {
    switch (a.kind) {
      case Attribute::Kind::Float: a.f = v.get<float>(); break;
      case Attribute::Kind::Int: a.i = v.get<int64_t>(); break;
      case Attribute::Kind::String: a.s = binary_string(v, what); break;
      case Attribute::Kind::Tensor: a.t = tensor_from_json(v); break;
      case Attribute::Kind::Graph: a.g = std::make_shared<Graph>(graph_from_json(v)); break;
      case Attribute::Kind::Floats: a.floats = v.get<std::vector<float>>(); break;
      case Attribute::Kind::Ints: a.ints = v.get<std::vector<int64_t>>(); break;
      case Attribute::Kind::Strings:
        for (const json& s : v) a.strings.push_back(binary_string(s, what));
        break;
      case Attribute::Kind::Tensors:
        for (const json& t : v) a.tensors.push_back(tensor_from_json(t));
        break;
      case Attribute::Kind::Graphs:
        for (const json& g : v) a.graphs.push_back(std::make_shared<Graph>(graph_from_json(g)));
        break;
      case Attribute::Kind::Type: a.type = value_info_from_json(v, what); break;
    }
  } catch (const json::exception& e) {
    fail(ErrorKind::InvalidModel, what + ": bad attribute value (" + e.what() + ")");
  }
  return a;
}

}  // namespace

json tensor_to_json(const Tensor& t) {
  if (t.dtype() == DType::String) fail(ErrorKind::Unsupported, "string tensors cannot be serialized");
  const auto* p = static_cast<const uint8_t*>(t.raw());
  return {{"dtype", int(t.dtype())}, {"dims", t.dims()}, {"data", json::binary(std::vector<uint8_t>(p, p + t.nbytes()))}};
}

Tensor tensor_from_json(const json& j) {
  const std::string what = "serialized tensor";
  const auto dtype = DType(json_field<int>(j, "dtype", what));
  if (!dtype_supported(dtype)) fail(ErrorKind::InvalidModel, what + ": unsupported dtype " + std::to_string(int(dtype)));
  Tensor t(dtype, json_field<Dims>(j, "dims", what));
  const std::string bytes = binary_string(j.contains("data") ? j["data"] : json(), what);
  if (bytes.size() != t.nbytes())
    fail(ErrorKind::InvalidModel, what + ": " + std::to_string(bytes.size()) + " bytes for " + std::to_string(t.nbytes()));
  if (!bytes.empty()) std::memcpy(t.raw(), bytes.data(), bytes.size());
  return t;
}

json node_to_json(const Node& n) {
  json attrs = json::object();
  for (const auto& [key, a] : n.attributes) attrs[key] = attribute_to_json(a);
  return {{"name", n.name},     {"op", n.op_type},      {"domain", n.domain}, {"opset", n.opset},
          {"inputs", n.inputs}, {"outputs", n.outputs}, {"attributes", attrs}};
}

Node node_from_json(const json& j) {
  Node n;
  n.name = json_field<std::string>(j, "name", "serialized node");
  const std::string what = "serialized node '" + n.name + "'";
  n.op_type = json_field<std::string>(j, "op", what);
  n.domain = json_field<std::string>(j, "domain", what);
  n.opset = json_field<int>(j, "opset", what);
  n.inputs = json_field<std::vector<std::string>>(j, "inputs", what);
  n.outputs = json_field<std::vector<std::string>>(j, "outputs", what);
  const json attrs = json_field<json>(j, "attributes", what);
  if (!attrs.is_object()) fail(ErrorKind::InvalidModel, what + ": attributes must be an object");
  for (const auto& [key, a] : attrs.items()) n.attributes[key] = attribute_from_json(a, what + " attribute '" + key + "'");
  return n;
}

json graph_to_json(const Graph& g) {
  json j = {{"name", g.name},         {"inputs", json::array()},        {"outputs", json::array()},
            {"nodes", json::array()}, {"initializers", json::object()}, {"value_info", json::array()}};
  for (const auto& v : g.inputs) j["inputs"].push_back(value_info_to_json(v));
  for (const auto& v : g.outputs) j["outputs"].push_back(value_info_to_json(v));
  for (const auto& n : g.nodes) j["nodes"].push_back(node_to_json(n));
  for (const auto& [name, t] : g.initializers) j["initializers"][name] = tensor_to_json(t);
  for (const auto& [name, v] : g.value_info) j["value_info"].push_back(value_info_to_json(v));
  return j;
}

Graph graph_from_json(const json& j) {
  Graph g;
  g.name = json_field<std::string>(j, "name", "serialized graph");
  const std::string what = "serialized graph '" + g.name + "'";
  for (const json& v : json_field<json>(j, "inputs", what)) g.inputs.push_back(value_info_from_json(v, what));
  for (const json& v : json_field<json>(j, "outputs", what)) g.outputs.push_back(value_info_from_json(v, what));
  for (const json& n : json_field<json>(j, "nodes", what)) g.nodes.push_back(node_from_json(n));
  const json inits = json_field<json>(j, "initializers", what);
  if (!inits.is_object()) fail(ErrorKind::InvalidModel, what + ": initializers must be an object");
  for (const auto& [name, t] : inits.items()) g.initializers[name] = tensor_from_json(t);
  for (const json& v : json_field<json>(j, "value_info", what)) {
    ValueInfo info = value_info_from_json(v, what);
    g.value_info[info.name] = info;
  }
  return g;
}

}  // namespace kiln::ir
