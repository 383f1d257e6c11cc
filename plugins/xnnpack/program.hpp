// A compiled partition as this plugin keeps it: the tensors and operations
// of an XNNPACK subgraph, written so that a later process can define the
// same subgraph again without deciding anything (serialize/deserialize).
//
// Weights are not in it: a static tensor names the partition's constant it
// is made from and how (a transpose to XNNPACK's filter layout, say), and
// is made again from the constants the host shows deserialize. The host
// already keeps those constants beside the blob in its cache, so the blob
// stays a few hundred bytes per operation instead of a second copy of the
// weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph.hpp"

namespace kiln_xnnpack {

// XNNPACK's subgraph nodes this plugin defines. Numbers are part of the blob format.
enum class OpType : uint32_t {
  Conv =
      1,  // x, filter [O,kh,kw,I/g], bias [O]; ints: pads t r b l, kh kw, strides h w, dilations h w, groups, group in, group out
  DepthwiseConv =
      2,  // x, filter [1,kh,kw,C*m], bias [C*m]; ints: pads t r b l, kh kw, strides h w, dilations h w, multiplier, channels
  FullyConnected = 3,     // x [...,K], filter [N,K], bias [N] or none
  MaxPool = 4,            // x; ints: pads t r b l, kh kw, strides h w, dilations h w
  AveragePool = 5,        // x; ints: pads t r b l, kh kw, strides h w
  GlobalAveragePool = 6,  // x [N,H,W,C] -> [N,1,1,C]
  Add = 7,
  Subtract = 8,
  Multiply = 9,
  Divide = 10,
  Maximum = 11,
  Minimum = 12,
  Clamp = 13,  // floats: min, max
  Sigmoid = 14,
  HardSwish = 15,
  LeakyRelu = 16,  // floats: slope
  Elu = 17,        // floats: alpha
  Abs = 18,
  Negate = 19,
  Floor = 20,
  Ceiling = 21,
  SquareRoot = 22,
  BankersRounding = 23,
  Softmax = 24,  // over the last dimension
  PRelu = 25,    // x [N,H,W,C], slope [C]
  Reshape = 26,  // to the output's dims
};

// How a static tensor is made from the partition's constant `source`.
enum class Transform : uint32_t {
  Copy = 1,         // the same elements, the tensor's dims
  Zero = 2,         // zeros, no source (a convolution without bias)
  OihwToOhwi = 3,   // ONNX Conv weights [O,I,kh,kw] -> XNNPACK's [O,kh,kw,I]
  OihwToHwo = 4,    // depthwise weights [O,1,kh,kw] -> [1,kh,kw,O]
  Transpose2d = 5,  // [K,N] -> [N,K]
  NchwToNhwc = 6,   // a constant broadcast against NHWC data: padded to rank 4 with leading 1s, then [a,b,c,d] -> [a,c,d,b]
  Broadcast = 7,    // one element repeated to the tensor's dims
};

enum class Role : uint32_t {
  Internal = 0,
  Input = 1,   // the partition's input `index`
  Output = 2,  // the partition's output `index`
  Static = 3,  // made from the constant `source` by `transform`
};

struct Tensor {
  std::vector<int64_t> dims;  // as XNNPACK sees them (NHWC for NHWC data)
  Role role = Role::Internal;
  int64_t index = -1;   // Input/Output: position in the partition's inputs/outputs
  bool nhwc = false;    // Input/Output: the host's NCHW buffer is converted at the boundary
  int64_t source = -1;  // Static: a value of the partition
  Transform transform = Transform::Copy;
};

constexpr uint32_t kNone = 0xFFFFFFFFu;  // an absent optional input (XNN_INVALID_VALUE_ID)

struct Op {
  OpType type = OpType::Add;
  std::vector<uint32_t> inputs;  // tensor indices, kNone for an absent optional one
  uint32_t output = 0;
  std::vector<int64_t> ints;
  std::vector<float> floats;
};

struct Program {
  int64_t partition_inputs = 0;
  int64_t partition_outputs = 0;
  std::vector<Tensor> tensors;
  std::vector<Op> ops;
};

const char* op_name(OpType type);

// Bytes that decode() reads back; decode() refuses (Decline) anything else:
// another magic or format version, a checksum that does not match, a count
// larger than the bytes left, trailing bytes.
std::string encode(const Program& p);
Program decode(const void* bytes, size_t size);

// Everything XNNPACK will rely on, checked against the partition the host
// shows (whose boundary is `inputs` and `outputs`): boundary tensors match them, static tensors its
// constants, every tensor is made once before it is read, and each
// operation's output dims follow from its inputs and parameters as XNNPACK
// computes them (so that no kernel writes past a buffer). Compile checks
// what it made, deserialize what it read; Decline names the first problem.
void validate(const Program& p, const Graph& partition, const std::vector<int64_t>& inputs, const std::vector<int64_t>& outputs);

// Writes the numel(t.dims) elements of a static tensor, made from the
// partition's constant (validate() has checked that they fit).
void static_data(const Tensor& t, const Graph& partition, float* out);

}  // namespace kiln_xnnpack
