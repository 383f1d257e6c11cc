#pragma once
// The read-only view of a specialized graph that a plugin reads through
// kiln_backend_graph_api (include/kiln/backend.h): nodes and values by
// index, every attribute converted once, so that what the accessors return
// stays valid as long as the view.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/backend.h"
#include "runtime/ir/graph.hpp"

struct kiln_backend_graph {
  struct Value {
    std::string name;
    int32_t dtype = 0;
    int32_t rank = -1;  // -1: the shape depends on the data
    std::vector<int64_t> dims;
    const kiln::ir::Tensor* constant = nullptr;
  };
  struct Attribute {
    std::string name;
    kiln_backend_attribute c{};
    std::vector<const char*> strings;  // behind c.strings
    std::vector<int64_t> tensor_dims;  // behind c.tensor_dims
  };
  struct Node {
    const kiln::ir::Node* node = nullptr;
    std::vector<int64_t> inputs, outputs;
    std::vector<Attribute> attributes;
  };

  std::shared_ptr<const kiln::ir::Graph> graph;
  std::vector<Value> values;
  std::map<std::string, int64_t> value_index;
  std::vector<Node> nodes;
  std::vector<int64_t> inputs, outputs;
};

namespace kiln::plugins {

using GraphView = kiln_backend_graph;

// A view of `graph`, whose values have the types of `values` (a value
// missing there, or not concrete, has rank -1). Initializers that are not
// graph inputs are constants; `graph` is kept alive by the view.
std::unique_ptr<GraphView> make_graph_view(std::shared_ptr<const ir::Graph> graph,
                                           const std::map<std::string, ir::ValueInfo>& values);

// The accessors, as the host table hands them to plugins.
const kiln_backend_graph_api& graph_api();

}  // namespace kiln::plugins
