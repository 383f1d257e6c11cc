// Kiln's reference kernels as a backend plugin: the oracle any backend can
// be diffed against, behind include/kiln/backend.h and nothing else of the
// host. The kernels come from a static copy of Kiln's reference library
// whose symbols this library keeps hidden, as a third party vendors a
// library (plugins/CMakeLists.txt checks that no Kiln symbol is left
// undefined or exported).
//
// It takes every node that has a reference kernel and no subgraph (ABI
// version 1 does not show subgraphs), as one group. A compiled partition is
// the partition rebuilt as a graph: there is no code to keep, so what it
// serializes is a tag that deserialize checks before it rebuilds the graph
// from the partition the host shows it again.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/reference/kernel_registry.hpp"
#include "backends/reference/reference_executor.hpp"
#include "kiln/backend.h"

namespace {

using kiln::ir::DType;
using kiln::ir::Tensor;

const kiln_backend_host* host = nullptr;
std::atomic<int64_t> compiles{0};
constexpr char kBlobTag[] = "kiln-reference-plugin partition v1";

kiln_backend_status fail(char* message, const std::string& text, kiln_backend_status status = KILN_BACKEND_ERROR) {
  std::snprintf(message, KILN_BACKEND_MESSAGE_BYTES, "%s", text.c_str());
  return status;
}

const kiln_backend_graph_api& api() { return *host->graph; }

kiln::ir::Attribute attribute(const kiln_backend_attribute& a) {
  using Kind = kiln::ir::Attribute::Kind;
  kiln::ir::Attribute out;
  switch (a.type) {
    case KILN_BACKEND_ATTRIBUTE_FLOAT:
      out.kind = Kind::Float;
      out.f = float(a.f);
      break;
    case KILN_BACKEND_ATTRIBUTE_INT:
      out.kind = Kind::Int;
      out.i = a.i;
      break;
    case KILN_BACKEND_ATTRIBUTE_STRING:
      out.kind = Kind::String;
      out.s.assign(a.s, a.s_bytes);
      break;
    case KILN_BACKEND_ATTRIBUTE_INTS:
      out.kind = Kind::Ints;
      out.ints.assign(a.ints, a.ints + a.count);
      break;
    case KILN_BACKEND_ATTRIBUTE_FLOATS:
      out.kind = Kind::Floats;
      out.floats.assign(a.floats, a.floats + a.count);
      break;
    case KILN_BACKEND_ATTRIBUTE_STRINGS:
      out.kind = Kind::Strings;
      for (size_t i = 0; i < a.count; ++i) out.strings.emplace_back(a.strings[i]);
      break;
    case KILN_BACKEND_ATTRIBUTE_TENSOR: {
      out.kind = Kind::Tensor;
      kiln::ir::Dims dims(a.tensor_dims, a.tensor_dims + a.tensor_rank);
      out.t = Tensor(DType(a.tensor_dtype), dims);
      if (out.t.nbytes() != a.tensor_bytes)
        throw kiln::ir::Error(kiln::ir::ErrorKind::InvalidModel, "tensor attribute of the wrong size");
      std::memcpy(out.t.raw(), a.tensor_data, a.tensor_bytes);
      break;
    }
    default: throw kiln::ir::Error(kiln::ir::ErrorKind::Unsupported, "an attribute of a kind this plugin does not read");
  }
  return out;
}

kiln::ir::ValueInfo value_info(const kiln_backend_graph* g, int64_t v) {
  kiln::ir::ValueInfo info;
  info.name = api().value_name(g, v);
  info.dtype = DType(api().value_dtype(g, v));
  const int32_t rank = api().value_rank(g, v);
  const int64_t* dims = api().value_dims(g, v);
  info.shape = kiln::ir::Shape::from_dims(kiln::ir::Dims(dims, dims + (rank > 0 ? rank : 0)));
  return info;
}

// A node has no subgraph attribute and a reference kernel.
bool takes(const kiln_backend_graph* g, int64_t n) {
  if (!kiln::ref::has_kernel(api().node_domain(g, n), api().node_op_type(g, n))) return false;
  for (int64_t i = 0; i < api().node_attribute_count(g, n); ++i) {
    kiln_backend_attribute a{};
    a.struct_size = sizeof a;
    if (api().node_attribute(g, n, api().node_attribute_name(g, n, i), &a) != KILN_BACKEND_OK) return false;
    if (a.type == KILN_BACKEND_ATTRIBUTE_GRAPH || a.type == KILN_BACKEND_ATTRIBUTE_OTHER) return false;
  }
  return true;
}

// The partition as a graph of Kiln's IR, its constants copied.
std::unique_ptr<kiln::ir::Graph> rebuild(const kiln_backend_graph* g) {
  auto graph = std::make_unique<kiln::ir::Graph>();
  auto name_of = [&](int64_t v) { return v < 0 ? std::string() : std::string(api().value_name(g, v)); };
  for (int64_t i = 0; i < api().input_count(g); ++i) graph->inputs.push_back(value_info(g, api().input(g, i)));
  for (int64_t i = 0; i < api().output_count(g); ++i) graph->outputs.push_back(value_info(g, api().output(g, i)));
  for (int64_t v = 0; v < api().value_count(g); ++v) {
    size_t bytes = 0;
    const void* data = api().value_constant(g, v, &bytes);
    if (!data) continue;
    kiln::ir::ValueInfo info = value_info(g, v);
    Tensor t(info.dtype, info.shape.concrete());
    if (t.nbytes() != bytes)
      throw kiln::ir::Error(kiln::ir::ErrorKind::InvalidModel, "constant '" + info.name + "' has the wrong size");
    std::memcpy(t.raw(), data, bytes);
    graph->initializers[info.name] = t;
  }
  for (int64_t n = 0; n < api().node_count(g); ++n) {
    kiln::ir::Node node;
    node.op_type = api().node_op_type(g, n);
    node.domain = api().node_domain(g, n);
    node.name = api().node_name(g, n);
    node.opset = int(api().node_opset(g, n));
    for (int64_t i = 0; i < api().node_input_count(g, n); ++i) node.inputs.push_back(name_of(api().node_input(g, n, i)));
    for (int64_t i = 0; i < api().node_output_count(g, n); ++i) node.outputs.push_back(name_of(api().node_output(g, n, i)));
    for (int64_t i = 0; i < api().node_attribute_count(g, n); ++i) {
      const char* name = api().node_attribute_name(g, n, i);
      kiln_backend_attribute a{};
      a.struct_size = sizeof a;
      if (api().node_attribute(g, n, name, &a) != KILN_BACKEND_OK)
        throw kiln::ir::Error(kiln::ir::ErrorKind::Internal, std::string("attribute '") + name + "' cannot be read");
      node.attributes[name] = attribute(a);
    }
    graph->nodes.push_back(std::move(node));
  }
  return graph;
}

struct Compiled {
  std::unique_ptr<kiln::ir::Graph> graph;
  std::vector<kiln::ir::ValueInfo> inputs, outputs;
};

// Every entry point catches everything: nothing may unwind into the host.
template <typename F>
kiln_backend_status guarded(char* message, F&& f) {
  try {
    return f();
  } catch (const kiln::ir::Error& e) {
    const kiln::ir::ErrorKind k = e.kind();
    return fail(message, e.what(),
                k == kiln::ir::ErrorKind::Unsupported       ? KILN_BACKEND_UNSUPPORTED
                : k == kiln::ir::ErrorKind::InvalidArgument ? KILN_BACKEND_INVALID_ARGUMENT
                                                            : KILN_BACKEND_ERROR);
  } catch (const std::bad_alloc&) {
    return fail(message, "out of memory", KILN_BACKEND_OUT_OF_MEMORY);
  } catch (const std::exception& e) {
    return fail(message, e.what());
  }
}

kiln_backend_status make(const kiln_backend_graph* partition, kiln_backend_compiled** out, char* message) {
  return guarded(message, [&] {
    if (!partition || !out) return fail(message, "null argument", KILN_BACKEND_INVALID_ARGUMENT);
    auto compiled = std::make_unique<Compiled>();
    compiled->graph = rebuild(partition);
    compiled->inputs = compiled->graph->inputs;
    compiled->outputs = compiled->graph->outputs;
    *out = reinterpret_cast<kiln_backend_compiled*>(compiled.release());
    return KILN_BACKEND_OK;
  });
}

const kiln_backend_api kApi = {
    sizeof(kiln_backend_api),
    KILN_BACKEND_ABI_VERSION,
    "kiln-reference",
    "kiln-reference-plugin 1 (Kiln's reference kernels)",
    0,
    0,
    nullptr,  // set by the entry point: every operator with a reference kernel is too long a list to write here
    [](const kiln_backend_graph* graph, const kiln_backend_capability* answer, char* message) {
      return guarded(message, [&] {
        if (!graph || !answer || !answer->add_partition) return fail(message, "null argument", KILN_BACKEND_INVALID_ARGUMENT);
        std::vector<int64_t> nodes;
        for (int64_t n = 0; n < api().node_count(graph); ++n)
          if (takes(graph, n)) nodes.push_back(n);
        if (nodes.empty()) return KILN_BACKEND_OK;
        const kiln_backend_status s = answer->add_partition(answer->context, nodes.data(), nodes.size());
        return s == KILN_BACKEND_OK ? s : fail(message, "the host refused the partition", s);
      });
    },
    [](const kiln_backend_graph* partition, const kiln_backend_threads*, kiln_backend_compiled** out, char* message) {
      const kiln_backend_status s = make(partition, out, message);
      if (s == KILN_BACKEND_OK) ++compiles;
      return s;
    },
    [](kiln_backend_compiled* handle, const void* const* inputs, size_t input_count, void* const* outputs, size_t output_count,
       const kiln_backend_threads*, char* message) {
      return guarded(message, [&] {
        const auto* c = reinterpret_cast<const Compiled*>(handle);
        if (!c || (input_count && !inputs) || (output_count && !outputs))
          return fail(message, "null argument", KILN_BACKEND_INVALID_ARGUMENT);
        if (input_count != c->inputs.size() || output_count != c->outputs.size())
          return fail(message,
                      "run with " + std::to_string(input_count) + " inputs and " + std::to_string(output_count) +
                          " outputs, the partition has " + std::to_string(c->inputs.size()) + " and " +
                          std::to_string(c->outputs.size()),
                      KILN_BACKEND_INVALID_ARGUMENT);
        std::map<std::string, Tensor> given;
        for (size_t i = 0; i < input_count; ++i)
          given.emplace(c->inputs[i].name,
                        Tensor::view(c->inputs[i].dtype, c->inputs[i].shape.concrete(), const_cast<void*>(inputs[i])));
        const std::vector<Tensor> made = kiln::ref::run_graph(*c->graph, given);
        for (size_t i = 0; i < output_count; ++i) {
          const kiln::ir::Dims want = c->outputs[i].shape.concrete();
          if (made[i].dtype() != c->outputs[i].dtype || made[i].dims() != want)
            return fail(message, "output '" + c->outputs[i].name + "' came out " + kiln::ir::dims_to_string(made[i].dims()) +
                                     ", the host expects " + kiln::ir::dims_to_string(want));
          std::memcpy(outputs[i], made[i].raw(), made[i].nbytes());
        }
        return KILN_BACKEND_OK;
      });
    },
    [](kiln_backend_compiled* handle, const void** bytes, size_t* size, char* message) {
      if (!handle || !bytes || !size) return fail(message, "null argument", KILN_BACKEND_INVALID_ARGUMENT);
      *bytes = kBlobTag;
      *size = sizeof kBlobTag;
      return KILN_BACKEND_OK;
    },
    [](const kiln_backend_graph* partition, const void* bytes, size_t size, const kiln_backend_threads*,
       kiln_backend_compiled** out, char* message) {
      if (!bytes || size != sizeof kBlobTag || std::memcmp(bytes, kBlobTag, size) != 0)
        return fail(message, "these bytes are not a partition this plugin serialized", KILN_BACKEND_UNSUPPORTED);
      return make(partition, out, message);
    },
    [](kiln_backend_compiled* handle) { delete reinterpret_cast<Compiled*>(handle); },
    []() -> int64_t { return compiles.load(); },
};

kiln_backend_api table = kApi;

}  // namespace

extern "C" __attribute__((visibility("default"))) kiln_backend_status kiln_backend_entry(uint32_t host_abi_version,
                                                                                         const kiln_backend_host* h,
                                                                                         const kiln_backend_api** out,
                                                                                         char* message) {
  if (!h || !out) return fail(message, "null argument", KILN_BACKEND_INVALID_ARGUMENT);
  if (host_abi_version < 1 || h->struct_size < sizeof(kiln_backend_host) || !h->graph ||
      h->graph->struct_size < sizeof(kiln_backend_graph_api))
    return fail(message, "this plugin needs backend ABI version 1 or later with its full graph accessors",
                KILN_BACKEND_UNSUPPORTED);
  host = h;
  static const std::string operators = [] {
    std::string list;
    for (const auto& op : kiln::ref::KernelRegistry::instance().op_types()) list += (list.empty() ? "" : ",") + op;
    return list;
  }();
  table.operators = operators.c_str();
  *out = &table;
  return KILN_BACKEND_OK;
}
