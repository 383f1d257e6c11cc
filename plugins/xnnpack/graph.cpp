#include "graph.hpp"

#include <cstring>
#include <limits>

namespace kiln_xnnpack {

namespace {

const char* type_name(int32_t type) {
  switch (type) {
    case KILN_BACKEND_ATTRIBUTE_FLOAT: return "a float";
    case KILN_BACKEND_ATTRIBUTE_INT: return "an int";
    case KILN_BACKEND_ATTRIBUTE_STRING: return "a string";
    case KILN_BACKEND_ATTRIBUTE_INTS: return "a list of ints";
    default: return "another kind";
  }
}

}  // namespace

int64_t numel(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d > 0 && n > std::numeric_limits<int64_t>::max() / d)) throw Decline("a tensor too large to count");
    n *= d;
  }
  return n;
}

std::vector<int64_t> Graph::inputs() const {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < api_.input_count(g_); ++i) out.push_back(api_.input(g_, i));
  return out;
}

std::vector<int64_t> Graph::outputs() const {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < api_.output_count(g_); ++i) out.push_back(api_.output(g_, i));
  return out;
}

std::vector<int64_t> Graph::node_inputs(int64_t n) const {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < api_.node_input_count(g_, n); ++i) out.push_back(api_.node_input(g_, n, i));
  return out;
}

std::vector<int64_t> Graph::node_outputs(int64_t n) const {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < api_.node_output_count(g_, n); ++i) out.push_back(api_.node_output(g_, n, i));
  return out;
}

int64_t Graph::input(int64_t n, int64_t i) const { return i < api_.node_input_count(g_, n) ? api_.node_input(g_, n, i) : -1; }
int64_t Graph::output(int64_t n, int64_t i) const { return i < api_.node_output_count(g_, n) ? api_.node_output(g_, n, i) : -1; }

std::vector<std::string> Graph::attribute_names(int64_t n) const {
  std::vector<std::string> out;
  for (int64_t i = 0; i < api_.node_attribute_count(g_, n); ++i) out.push_back(text(api_.node_attribute_name(g_, n, i)));
  return out;
}

bool Graph::attribute(int64_t n, const char* name, int32_t type, kiln_backend_attribute* out) const {
  *out = kiln_backend_attribute{};
  out->struct_size = sizeof *out;
  const kiln_backend_status s = api_.node_attribute(g_, n, name, out);
  if (s == KILN_BACKEND_NOT_FOUND) return false;
  if (s != KILN_BACKEND_OK) throw Decline(describe(n) + ": attribute '" + name + "' cannot be read");
  if (out->type != type)
    throw Decline(describe(n) + ": attribute '" + name + "' is " + type_name(out->type) + ", ONNX defines " + type_name(type));
  return true;
}

bool Graph::has_attr(int64_t n, const char* name) const {
  kiln_backend_attribute a{};
  a.struct_size = sizeof a;
  return api_.node_attribute(g_, n, name, &a) == KILN_BACKEND_OK;
}

int64_t Graph::attr_int(int64_t n, const char* name, int64_t fallback) const {
  kiln_backend_attribute a;
  return attribute(n, name, KILN_BACKEND_ATTRIBUTE_INT, &a) ? a.i : fallback;
}

float Graph::attr_float(int64_t n, const char* name, float fallback) const {
  kiln_backend_attribute a;
  return attribute(n, name, KILN_BACKEND_ATTRIBUTE_FLOAT, &a) ? float(a.f) : fallback;
}

std::string Graph::attr_string(int64_t n, const char* name, const std::string& fallback) const {
  kiln_backend_attribute a;
  return attribute(n, name, KILN_BACKEND_ATTRIBUTE_STRING, &a) ? std::string(a.s, a.s_bytes) : fallback;
}

std::vector<int64_t> Graph::attr_ints(int64_t n, const char* name, const std::vector<int64_t>& fallback) const {
  kiln_backend_attribute a;
  if (!attribute(n, name, KILN_BACKEND_ATTRIBUTE_INTS, &a)) return fallback;
  return a.count ? std::vector<int64_t>(a.ints, a.ints + a.count) : std::vector<int64_t>();
}

std::vector<int64_t> Graph::dims(int64_t v) const {
  const int32_t rank = api_.value_rank(g_, v);
  const int64_t* d = api_.value_dims(g_, v);
  if (rank < 0 || (rank > 0 && !d)) throw Decline("the shape of '" + value_name(v) + "' is not known");
  return std::vector<int64_t>(d, d + rank);
}

const void* Graph::constant(int64_t v, size_t* bytes) const {
  size_t size = 0;
  const void* data = v >= 0 ? api_.value_constant(g_, v, &size) : nullptr;
  if (bytes) *bytes = data ? size : 0;
  return data;
}

bool Graph::is_constant(int64_t v) const { return constant(v, nullptr) != nullptr; }

std::vector<float> Graph::floats(int64_t v) const {
  size_t bytes = 0;
  const void* data = constant(v, &bytes);
  if (!data || dtype(v) != KILN_BACKEND_FLOAT32 || bytes != size_t(numel(dims(v))) * sizeof(float))
    throw Decline("'" + value_name(v) + "' is not a float32 constant");
  std::vector<float> out(bytes / sizeof(float));
  if (bytes) std::memcpy(out.data(), data, bytes);
  return out;
}

std::vector<int64_t> Graph::int64s(int64_t v) const {
  size_t bytes = 0;
  const void* data = constant(v, &bytes);
  if (!data || dtype(v) != KILN_BACKEND_INT64 || bytes != size_t(numel(dims(v))) * sizeof(int64_t))
    throw Decline("'" + value_name(v) + "' is not an int64 constant");
  std::vector<int64_t> out(bytes / sizeof(int64_t));
  if (bytes) std::memcpy(out.data(), data, bytes);
  return out;
}

std::string Graph::describe(int64_t n) const {
  std::string text = "node ";
  const std::string node_name = name(n);
  if (node_name.empty())
    text.append("#").append(std::to_string(n));
  else
    text.append("'").append(node_name).append("'");
  return text.append(" (").append(op(n)).append(")");
}

}  // namespace kiln_xnnpack
