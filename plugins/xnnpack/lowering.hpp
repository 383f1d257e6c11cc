// ONNX nodes as XNNPACK subgraph operations, and the layout of every value.
//
// XNNPACK's convolutions and poolings read and write NHWC; ONNX's are NCHW.
// A partition keeps NHWC for the rank-4 values that reach a convolution or
// a pooling through operations that do not care about the layout
// (elementwise ones, whose constants are permuted to match) and converts
// only at its boundary; other values stay as ONNX lays them out. An
// operation that needs the ONNX layout (a Softmax over the last axis of a
// rank-4 value, a MatMul over it, a Reshape that would reorder elements) is
// not taken where its value has to be NHWC.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph.hpp"
#include "program.hpp"

namespace kiln_xnnpack {

// ONNX operators this plugin may take (for kiln_backend_api::operators).
extern const char* const kOperators;

// Whether op (of the ONNX domain) is one this plugin lowers at all.
bool knows(const std::string& op);

// Per value of the graph: 1 if the partition made of `nodes` keeps it NHWC.
// Nodes that need the ONNX layout of a value that must be NHWC are added to
// *conflicts (get_capability leaves them out; compile refuses them).
std::vector<char> plan_layouts(const Graph& g, const std::vector<int64_t>& nodes, std::vector<int64_t>* conflicts);

// The program for `nodes` (in order), whose boundary is `inputs` (the values
// they read from outside) and `outputs` (the values read after them), with
// the layouts of plan_layouts. Declines a node it cannot run exactly as ONNX
// defines it, naming the node and why.
Program lower(const Graph& g, const std::vector<int64_t>& nodes, const std::vector<int64_t>& inputs,
              const std::vector<int64_t>& outputs, const std::vector<char>& nhwc);

}  // namespace kiln_xnnpack
