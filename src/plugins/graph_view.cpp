#include "plugins/graph_view.hpp"

#include <algorithm>
#include <cstring>

namespace kiln::plugins {

namespace {

int32_t attribute_type(ir::Attribute::Kind k) {
  using K = ir::Attribute::Kind;
  switch (k) {
    case K::Float: return KILN_BACKEND_ATTRIBUTE_FLOAT;
    case K::Int: return KILN_BACKEND_ATTRIBUTE_INT;
    case K::String: return KILN_BACKEND_ATTRIBUTE_STRING;
    case K::Tensor: return KILN_BACKEND_ATTRIBUTE_TENSOR;
    case K::Graph: return KILN_BACKEND_ATTRIBUTE_GRAPH;
    case K::Floats: return KILN_BACKEND_ATTRIBUTE_FLOATS;
    case K::Ints: return KILN_BACKEND_ATTRIBUTE_INTS;
    case K::Strings: return KILN_BACKEND_ATTRIBUTE_STRINGS;
    default: return KILN_BACKEND_ATTRIBUTE_OTHER;
  }
}

GraphView::Attribute convert(const std::string& name, const ir::Attribute& a) {
  GraphView::Attribute out;
  out.name = name;
  kiln_backend_attribute& c = out.c;
  c.struct_size = sizeof(kiln_backend_attribute);
  c.type = attribute_type(a.kind);
  c.i = a.i;
  c.f = a.f;
  c.s = a.s.c_str();
  c.s_bytes = a.s.size();
  switch (a.kind) {
    case ir::Attribute::Kind::Ints:
      c.ints = a.ints.data();
      c.count = a.ints.size();
      break;
    case ir::Attribute::Kind::Floats:
      c.floats = a.floats.data();
      c.count = a.floats.size();
      break;
    case ir::Attribute::Kind::Strings:
      for (const auto& s : a.strings) out.strings.push_back(s.c_str());
      c.count = a.strings.size();
      break;
    case ir::Attribute::Kind::Tensor:
      if (a.t.defined()) {
        c.tensor_dtype = int32_t(a.t.dtype());
        c.tensor_rank = int32_t(a.t.dims().size());
        c.tensor_dims = a.t.dims().data();
        c.tensor_data = a.t.raw();
        c.tensor_bytes = a.t.nbytes();
      }
      break;
    default: break;
  }
  return out;
}

// Index checks: a plugin may pass anything.
const GraphView::Node* node_at(const kiln_backend_graph* g, int64_t i) {
  return g && i >= 0 && uint64_t(i) < g->nodes.size() ? &g->nodes[size_t(i)] : nullptr;
}
const GraphView::Value* value_at(const kiln_backend_graph* g, int64_t i) {
  return g && i >= 0 && uint64_t(i) < g->values.size() ? &g->values[size_t(i)] : nullptr;
}
int64_t element(const std::vector<int64_t>* list, int64_t i) {
  return list && i >= 0 && uint64_t(i) < list->size() ? (*list)[size_t(i)] : -1;
}

const kiln_backend_graph_api kApi = {
    sizeof(kiln_backend_graph_api),
    0,
    [](const kiln_backend_graph* g) -> int64_t { return g ? int64_t(g->nodes.size()) : 0; },
    [](const kiln_backend_graph* g) -> int64_t { return g ? int64_t(g->values.size()) : 0; },
    [](const kiln_backend_graph* g) -> int64_t { return g ? int64_t(g->inputs.size()) : 0; },
    [](const kiln_backend_graph* g, int64_t i) { return element(g ? &g->inputs : nullptr, i); },
    [](const kiln_backend_graph* g) -> int64_t { return g ? int64_t(g->outputs.size()) : 0; },
    [](const kiln_backend_graph* g, int64_t i) { return element(g ? &g->outputs : nullptr, i); },
    [](const kiln_backend_graph* g, int64_t n) -> const char* {
      const auto* node = node_at(g, n);
      return node ? node->node->op_type.c_str() : nullptr;
    },
    [](const kiln_backend_graph* g, int64_t n) -> const char* {
      const auto* node = node_at(g, n);
      return node ? node->node->domain.c_str() : nullptr;
    },
    [](const kiln_backend_graph* g, int64_t n) -> const char* {
      const auto* node = node_at(g, n);
      return node ? node->node->name.c_str() : nullptr;
    },
    [](const kiln_backend_graph* g, int64_t n) -> int64_t {
      const auto* node = node_at(g, n);
      return node ? node->node->opset : -1;
    },
    [](const kiln_backend_graph* g, int64_t n) -> int64_t {
      const auto* node = node_at(g, n);
      return node ? int64_t(node->inputs.size()) : 0;
    },
    [](const kiln_backend_graph* g, int64_t n, int64_t i) {
      const auto* node = node_at(g, n);
      return element(node ? &node->inputs : nullptr, i);
    },
    [](const kiln_backend_graph* g, int64_t n) -> int64_t {
      const auto* node = node_at(g, n);
      return node ? int64_t(node->outputs.size()) : 0;
    },
    [](const kiln_backend_graph* g, int64_t n, int64_t i) {
      const auto* node = node_at(g, n);
      return element(node ? &node->outputs : nullptr, i);
    },
    [](const kiln_backend_graph* g, int64_t n) -> int64_t {
      const auto* node = node_at(g, n);
      return node ? int64_t(node->attributes.size()) : 0;
    },
    [](const kiln_backend_graph* g, int64_t n, int64_t i) -> const char* {
      const auto* node = node_at(g, n);
      if (!node || i < 0 || uint64_t(i) >= node->attributes.size()) return nullptr;
      return node->attributes[size_t(i)].name.c_str();
    },
    [](const kiln_backend_graph* g, int64_t n, const char* name, kiln_backend_attribute* out) {
      const auto* node = node_at(g, n);
      if (!node || !name || !out || out->struct_size < sizeof(uint32_t)) return KILN_BACKEND_INVALID_ARGUMENT;
      for (const auto& a : node->attributes) {
        if (a.name != name) continue;
        kiln_backend_attribute c = a.c;
        c.strings = a.strings.data();
        // As much as the caller's struct holds (an older plugin's is smaller).
        const size_t bytes = std::min<size_t>(out->struct_size, sizeof c);
        c.struct_size = uint32_t(bytes);
        std::memcpy(static_cast<void*>(out), &c, bytes);
        return KILN_BACKEND_OK;
      }
      return KILN_BACKEND_NOT_FOUND;
    },
    [](const kiln_backend_graph* g, int64_t v) -> const char* {
      const auto* value = value_at(g, v);
      return value ? value->name.c_str() : nullptr;
    },
    [](const kiln_backend_graph* g, int64_t v) -> int32_t {
      const auto* value = value_at(g, v);
      return value ? value->dtype : 0;
    },
    [](const kiln_backend_graph* g, int64_t v) -> int32_t {
      const auto* value = value_at(g, v);
      return value ? value->rank : -1;
    },
    [](const kiln_backend_graph* g, int64_t v) -> const int64_t* {
      const auto* value = value_at(g, v);
      return value && value->rank >= 0 ? value->dims.data() : nullptr;
    },
    [](const kiln_backend_graph* g, int64_t v, size_t* bytes) -> const void* {
      const auto* value = value_at(g, v);
      if (bytes) *bytes = value && value->constant ? value->constant->nbytes() : 0;
      return value && value->constant ? value->constant->raw() : nullptr;
    },
};

}  // namespace

const kiln_backend_graph_api& graph_api() { return kApi; }

std::unique_ptr<GraphView> make_graph_view(std::shared_ptr<const ir::Graph> graph,
                                           const std::map<std::string, ir::ValueInfo>& values) {
  auto view = std::make_unique<GraphView>();
  auto add_value = [&](const std::string& name) -> int64_t {
    if (name.empty()) return -1;
    auto [it, fresh] = view->value_index.emplace(name, int64_t(view->values.size()));
    if (!fresh) return it->second;
    GraphView::Value v;
    v.name = name;
    if (auto info = values.find(name); info != values.end()) {
      v.dtype = int32_t(info->second.dtype);
      if (info->second.shape.is_concrete()) {
        v.dims = info->second.shape.concrete();
        v.rank = int32_t(v.dims.size());
      }
    }
    // A graph input with an initializer is a default the caller may replace:
    // not a constant.
    if (!graph->find_input(name)) v.constant = graph->constant(name);
    // A constant's shape is its data's (a graph pass may have made it after
    // the shapes were inferred).
    if (v.constant) {
      v.dtype = int32_t(v.constant->dtype());
      v.dims = v.constant->dims();
      v.rank = int32_t(v.dims.size());
    }
    view->values.push_back(std::move(v));
    return it->second;
  };
  for (const auto& in : graph->inputs) view->inputs.push_back(add_value(in.name));
  for (const auto& node : graph->nodes) {
    GraphView::Node n;
    n.node = &node;
    for (const auto& name : node.inputs) n.inputs.push_back(add_value(name));
    for (const auto& name : node.outputs) n.outputs.push_back(add_value(name));
    for (const auto& [name, a] : node.attributes) n.attributes.push_back(convert(name, a));
    view->nodes.push_back(std::move(n));
  }
  for (const auto& out : graph->outputs) view->outputs.push_back(add_value(out.name));
  view->graph = std::move(graph);
  return view;
}

}  // namespace kiln::plugins
