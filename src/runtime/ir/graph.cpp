#include "runtime/ir/graph.hpp"

#include <set>

namespace kiln::ir {

std::string Dim::to_string() const {
  if (value) return std::to_string(*value);
  if (!symbol.empty()) return symbol;
  return "?";
}

Shape Shape::from_dims(const Dims& d) {
  Shape s;
  for (int64_t v : d) s.dims.push_back(Dim::known(v));
  return s;
}

bool Shape::is_concrete() const {
  if (!rank_known) return false;
  for (const auto& d : dims)
    if (!d.is_known()) return false;
  return true;
}

Dims Shape::concrete() const {
  Dims out;
  for (const auto& d : dims) out.push_back(d.value.value_or(-1));
  return out;
}

std::string Shape::to_string() const {
  if (!rank_known) return "[unknown rank]";
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ',';
    s += dims[i].to_string();
  }
  return s + "]";
}

const char* attribute_kind_name(Attribute::Kind k) {
  switch (k) {
    case Attribute::Kind::Float: return "float";
    case Attribute::Kind::Int: return "int";
    case Attribute::Kind::String: return "string";
    case Attribute::Kind::Tensor: return "tensor";
    case Attribute::Kind::Graph: return "graph";
    case Attribute::Kind::Floats: return "floats";
    case Attribute::Kind::Ints: return "ints";
    case Attribute::Kind::Strings: return "strings";
    case Attribute::Kind::Tensors: return "tensors";
    case Attribute::Kind::Graphs: return "graphs";
    case Attribute::Kind::Type: return "type";
  }
  return "?";
}

const Attribute* Node::attr(const std::string& key) const {
  auto it = attributes.find(key);
  return it == attributes.end() ? nullptr : &it->second;
}

std::string Node::describe() const { return "node '" + name + "' (" + (domain.empty() ? "" : domain + ".") + op_type + ")"; }

const ValueInfo* Graph::find_input(const std::string& n) const {
  for (const auto& v : inputs)
    if (v.name == n) return &v;
  return nullptr;
}

const Tensor* Graph::constant(const std::string& n) const {
  auto it = initializers.find(n);
  return it == initializers.end() || find_input(n) ? nullptr : &it->second;
}

std::vector<const ValueInfo*> Graph::required_inputs() const {
  std::vector<const ValueInfo*> out;
  for (const auto& v : inputs)
    if (!initializers.count(v.name)) out.push_back(&v);
  return out;
}

std::vector<std::string> Graph::outer_references() const {
  std::set<std::string> defined;
  for (const auto& v : inputs) defined.insert(v.name);
  for (const auto& [n, t] : initializers) defined.insert(n);
  std::vector<std::string> out;
  std::set<std::string> seen;
  auto use = [&](const std::string& n) {
    if (!n.empty() && !defined.count(n) && seen.insert(n).second) out.push_back(n);
  };
  for (const auto& node : nodes) {
    for (const auto& r : values_read(node)) use(r);
    for (const auto& o : node.outputs) defined.insert(o);
  }
  for (const auto& o : outputs) use(o.name);
  return out;
}

std::vector<std::string> values_read(const Node& node) {
  std::vector<std::string> out;
  for (const auto& in : node.inputs)
    if (!in.empty()) out.push_back(in);
  for (const auto& [k, a] : node.attributes) {
    if (a.g)
      for (const auto& r : a.g->outer_references()) out.push_back(r);
    for (const auto& g : a.graphs)
      for (const auto& r : g->outer_references()) out.push_back(r);
  }
  return out;
}

Attribute int_attribute(int64_t value) {
  Attribute a;
  a.kind = Attribute::Kind::Int;
  a.i = value;
  return a;
}

Attribute ints_attribute(std::vector<int64_t> values) {
  Attribute a;
  a.kind = Attribute::Kind::Ints;
  a.ints = std::move(values);
  return a;
}

int erase_nodes(Graph& graph, const std::vector<bool>& drop) {
  std::vector<Node> kept;
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    if (!drop[i]) kept.push_back(std::move(graph.nodes[i]));
  const int erased = int(graph.nodes.size() - kept.size());
  graph.nodes = std::move(kept);
  return erased;
}

std::map<std::string, int> use_counts(const Graph& graph) {
  std::map<std::string, int> uses;
  for (const auto& n : graph.nodes)
    for (const auto& name : values_read(n)) uses[name]++;
  for (const auto& o : graph.outputs) uses[o.name]++;
  return uses;
}

void visit_nodes(const Graph& graph, const std::function<void(const Node&)>& f) {
  for (const auto& n : graph.nodes) {
    f(n);
    for (const auto& [k, a] : n.attributes) {
      if (a.g) visit_nodes(*a.g, f);
      for (const auto& g : a.graphs) visit_nodes(*g, f);
    }
  }
}

int64_t Model::opset(const std::string& domain) const {
  for (const auto& o : opsets)
    if (o.domain == domain || (domain.empty() && o.domain == "ai.onnx")) return o.version;
  return 0;
}

}  // namespace kiln::ir
