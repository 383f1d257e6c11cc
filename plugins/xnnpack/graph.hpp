// The host's graph (include/kiln/backend.h's accessors) as the XNNPACK
// plugin reads it: typed attribute lookups with defaults, and Decline, what
// every check throws when a node cannot be run exactly as ONNX defines it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/backend.h"

namespace kiln_xnnpack {

// A node, a partition or a blob this plugin does not take: the message says why.
struct Decline : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Graph {
 public:
  Graph(const kiln_backend_graph_api& api, const kiln_backend_graph* g) : api_(api), g_(g) {}

  int64_t node_count() const { return api_.node_count(g_); }
  int64_t value_count() const { return api_.value_count(g_); }
  std::vector<int64_t> inputs() const;
  std::vector<int64_t> outputs() const;

  std::string op(int64_t n) const { return text(api_.node_op_type(g_, n)); }
  std::string domain(int64_t n) const { return text(api_.node_domain(g_, n)); }
  std::string name(int64_t n) const { return text(api_.node_name(g_, n)); }
  int64_t opset(int64_t n) const { return api_.node_opset(g_, n); }
  std::vector<int64_t> node_inputs(int64_t n) const;   // -1 for an omitted input
  std::vector<int64_t> node_outputs(int64_t n) const;  // -1 for an omitted output
  // The input or output at i, -1 if omitted or beyond the list.
  int64_t input(int64_t n, int64_t i) const;
  int64_t output(int64_t n, int64_t i) const;
  std::vector<std::string> attribute_names(int64_t n) const;

  // Attributes, the default when absent; a present attribute of another type declines.
  int64_t attr_int(int64_t n, const char* name, int64_t fallback) const;
  float attr_float(int64_t n, const char* name, float fallback) const;
  std::string attr_string(int64_t n, const char* name, const std::string& fallback) const;
  std::vector<int64_t> attr_ints(int64_t n, const char* name, const std::vector<int64_t>& fallback) const;
  bool has_attr(int64_t n, const char* name) const;

  std::string value_name(int64_t v) const { return text(api_.value_name(g_, v)); }
  int32_t dtype(int64_t v) const { return api_.value_dtype(g_, v); }
  // Concrete dims; declines a value whose shape the host does not know.
  std::vector<int64_t> dims(int64_t v) const;
  // A constant's data and size in bytes, nullptr if the value is not a constant.
  const void* constant(int64_t v, size_t* bytes) const;
  bool is_constant(int64_t v) const;
  // A float32 constant's elements (declines anything else).
  std::vector<float> floats(int64_t v) const;
  // An int64 constant's elements (declines anything else).
  std::vector<int64_t> int64s(int64_t v) const;

  std::string describe(int64_t n) const;  // "node 'conv1' (Conv)", for messages

 private:
  static std::string text(const char* s) { return s ? s : ""; }
  bool attribute(int64_t n, const char* name, int32_t type, kiln_backend_attribute* out) const;

  const kiln_backend_graph_api& api_;
  const kiln_backend_graph* g_;
};

int64_t numel(const std::vector<int64_t>& dims);

}  // namespace kiln_xnnpack
