#pragma once
// Kiln's graph IR: values are named, nodes refer to values by name, shapes
// may be symbolic. Nothing here knows about ONNX protobufs or any backend.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "runtime/ir/value.hpp"

namespace kiln::ir {

// One dimension: a concrete size, a named symbol ("batch"), or unknown
// (neither; an unnamed dynamic dimension).
struct Dim {
  std::optional<int64_t> value;
  std::string symbol;

  static Dim known(int64_t v) { return Dim{v, {}}; }
  static Dim named(std::string s) { return Dim{std::nullopt, std::move(s)}; }
  static Dim unknown() { return Dim{}; }
  bool is_known() const { return value.has_value(); }
  bool operator==(const Dim& o) const { return value == o.value && symbol == o.symbol; }
  bool operator!=(const Dim& o) const { return !(*this == o); }
  std::string to_string() const;  // "3", "batch" or "?"
};

struct Shape {
  std::vector<Dim> dims;
  bool rank_known = true;  // false: nothing is known about the shape

  static Shape unknown_rank() { return Shape{{}, false}; }
  static Shape from_dims(const Dims& d);
  int rank() const { return int(dims.size()); }
  bool is_concrete() const;
  Dims concrete() const;          // requires is_concrete()
  std::string to_string() const;  // "[batch,3,224,224]", "[?]" style
};

struct ValueInfo {
  std::string name;
  DType dtype = DType::Undefined;
  Shape shape = Shape::unknown_rank();
  // A sequence's or an optional's dtype and shape are those of its tensors.
  ValueKind kind = ValueKind::Tensor;
  ValueKind element_kind = ValueKind::Tensor;  // an optional's: Tensor or Sequence
  // A plain tensor of numbers: what every backend, plugin and bundle takes.
  bool is_plain_tensor() const { return kind == ValueKind::Tensor && dtype != DType::String; }
};

struct Graph;

struct Attribute {
  enum class Kind { Float, Int, String, Tensor, Graph, Floats, Ints, Strings, Tensors, Graphs, Type };
  Kind kind = Kind::Int;
  float f = 0;
  int64_t i = 0;
  std::string s;
  ir::Tensor t;
  std::shared_ptr<Graph> g;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::vector<ir::Tensor> tensors;
  std::vector<std::shared_ptr<Graph>> graphs;
  ValueInfo type;  // Type: a value's kind, dtype and shape (Optional's 'type')
};
const char* attribute_kind_name(Attribute::Kind k);
// Attributes the graph passes write.
Attribute int_attribute(int64_t value);
Attribute ints_attribute(std::vector<int64_t> values);

struct Node {
  std::string name;  // may be empty in the file; importer assigns "<op>_<index>"
  std::string op_type;
  std::string domain;                // "" for ai.onnx
  int opset = 0;                     // version of the node's domain in the model
  std::vector<std::string> inputs;   // "" marks an omitted optional input
  std::vector<std::string> outputs;  // "" marks an omitted optional output
  std::map<std::string, Attribute> attributes;

  const Attribute* attr(const std::string& key) const;
  // "node 'conv1' (Conv)" for error messages.
  std::string describe() const;
};

struct Graph {
  std::string name;
  std::vector<ValueInfo> inputs;  // graph inputs, including ones that have an initializer
  std::vector<ValueInfo> outputs;
  std::vector<Node> nodes;  // topologically sorted
  std::map<std::string, Tensor> initializers;
  std::map<std::string, ValueInfo> value_info;  // declared or inferred intermediate types

  const ValueInfo* find_input(const std::string& name) const;
  // An initializer that is not also a graph input (the caller may replace
  // those): a value fixed when the model is compiled. nullptr otherwise.
  const Tensor* constant(const std::string& name) const;
  // Inputs the caller must provide (no initializer behind them).
  std::vector<const ValueInfo*> required_inputs() const;
  // Names this graph uses but does not define (outer-scope references of a subgraph).
  std::vector<std::string> outer_references() const;
};

// Every value `node` reads: its inputs and what its subgraphs take from the
// enclosing scope. Omitted optional inputs ("") are left out.
std::vector<std::string> values_read(const Node& node);

// How often each value is read: once per node input (values_read) and once
// per graph output naming it.
std::map<std::string, int> use_counts(const Graph& graph);

// Removes the nodes whose `drop` entry is true, keeping the others' order;
// returns how many went.
int erase_nodes(Graph& graph, const std::vector<bool>& drop);

// Calls f on every node of `graph` and of its subgraphs, depth first.
void visit_nodes(const Graph& graph, const std::function<void(const Node&)>& f);

struct OpsetImport {
  std::string domain;
  int64_t version = 0;
};

struct Model {
  std::shared_ptr<Graph> graph;
  std::vector<OpsetImport> opsets;
  int64_t ir_version = 0;
  std::string producer_name;
  std::string producer_version;
  std::string source_path;   // where it was loaded from, for messages ("<memory>" if none)
  std::string content_hash;  // XXH3-128 (hex) of the file and its external weights: the model part of cache keys
  // Set while initializers are still read-only views of the model file
  // (onnx_import::own_weights copies them out).
  std::shared_ptr<void> mapped_file;

  int64_t opset(const std::string& domain = "") const;  // 0 if not imported
};

}  // namespace kiln::ir
