#include "program.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

namespace kiln_xnnpack {

namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'X', 'N', 'N', 'P'};
constexpr uint32_t kFormat = 1;
constexpr size_t kMaxRank = 6;  // XNN_MAX_TENSOR_DIMS

// FNV-1a: a flipped byte in a cached blob is refused before it is parsed.
uint64_t checksum(const char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ uint8_t(p[i])) * 1099511628211ull;
  return h;
}

class Writer {
 public:
  template <typename T>
  void put(T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  template <typename T>
  void put_list(const std::vector<T>& v) {
    put(uint64_t(v.size()));
    if (!v.empty()) out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  std::string out;
};

class Reader {
 public:
  Reader(const char* p, size_t n) : p_(p), left_(n) {}
  template <typename T>
  T get() {
    if (left_ < sizeof(T)) throw Decline("the blob ends early");
    T v;
    std::memcpy(&v, p_, sizeof v);
    p_ += sizeof v;
    left_ -= sizeof v;
    return v;
  }
  // A count of items of `item` bytes each, no more than the bytes left could hold.
  uint64_t count(size_t item) {
    const uint64_t n = get<uint64_t>();
    if (n > left_ / item)
      throw Decline("the blob counts " + std::to_string(n) + " items where " + std::to_string(left_) + " bytes are left");
    return n;
  }
  template <typename T>
  std::vector<T> get_list() {
    std::vector<T> v(count(sizeof(T)));
    if (!v.empty()) std::memcpy(v.data(), p_, v.size() * sizeof(T));
    p_ += v.size() * sizeof(T);
    left_ -= v.size() * sizeof(T);
    return v;
  }
  size_t left() const { return left_; }

 private:
  const char* p_;
  size_t left_;
};

struct Arity {
  size_t inputs, optional, ints, floats;  // `optional` of the inputs may be kNone
};

Arity arity(OpType t) {
  switch (t) {
    case OpType::Conv: return {3, 0, 13, 0};
    case OpType::DepthwiseConv: return {3, 0, 12, 0};
    case OpType::FullyConnected: return {3, 1, 0, 0};
    case OpType::MaxPool: return {1, 0, 10, 0};
    case OpType::AveragePool: return {1, 0, 8, 0};
    case OpType::Add:
    case OpType::Subtract:
    case OpType::Multiply:
    case OpType::Divide:
    case OpType::Maximum:
    case OpType::Minimum:
    case OpType::PRelu: return {2, 0, 0, 0};
    case OpType::Clamp: return {1, 0, 0, 2};
    case OpType::LeakyRelu:
    case OpType::Elu: return {1, 0, 0, 1};
    case OpType::GlobalAveragePool:
    case OpType::Sigmoid:
    case OpType::HardSwish:
    case OpType::Abs:
    case OpType::Negate:
    case OpType::Floor:
    case OpType::Ceiling:
    case OpType::SquareRoot:
    case OpType::BankersRounding:
    case OpType::Softmax:
    case OpType::Reshape: return {1, 0, 0, 0};
  }
  throw Decline("an operation of unknown type " + std::to_string(uint32_t(t)));
}

std::string dims_text(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

// The output size XNNPACK computes for a window of `kernel` elements spaced
// `dilation` apart, moved by `stride` over `in` padded by `pad`.
int64_t window_out(int64_t in, int64_t pad, int64_t kernel, int64_t stride, int64_t dilation) {
  const int64_t padded = in + pad, effective = (kernel - 1) * dilation + 1;
  if (padded < effective)
    throw Decline("a window of " + std::to_string(effective) + " over " + std::to_string(padded) + " elements");
  return (padded - effective) / stride + 1;
}

// Checks a pooling or convolution's parameters and returns its output height and width.
std::pair<int64_t, int64_t> spatial_out(const std::vector<int64_t>& x, const std::vector<int64_t>& p, bool dilated) {
  for (size_t i = 0; i < 4; ++i)
    if (p[i] < 0) throw Decline("negative padding");
  for (size_t i = 4; i < (dilated ? 10 : 8); ++i)
    if (p[i] < 1) throw Decline("a kernel size, stride or dilation below 1");
  const int64_t dh = dilated ? p[8] : 1, dw = dilated ? p[9] : 1;
  return {window_out(x[1], p[0] + p[2], p[4], p[6], dh), window_out(x[2], p[1] + p[3], p[5], p[7], dw)};
}

std::vector<int64_t> broadcast(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::vector<int64_t> out(std::max(a.size(), b.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t x = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    const int64_t y = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    if (x != y && x != 1 && y != 1) throw Decline("dims " + dims_text(a) + " and " + dims_text(b) + " do not broadcast");
    out[i] = std::max(x, y);
  }
  return out;
}

// The output dims op must have, from its inputs' dims and its parameters.
std::vector<int64_t> output_dims(const Op& op, const std::vector<const std::vector<int64_t>*>& in) {
  const std::vector<int64_t>& x = *in[0];
  auto need_rank = [&](const std::vector<int64_t>& d, size_t rank) {
    if (d.size() != rank)
      throw Decline(std::string(op_name(op.type)) + " wants rank " + std::to_string(rank) + ", not " + dims_text(d));
  };
  const std::vector<int64_t>& p = op.ints;
  switch (op.type) {
    case OpType::Conv: {
      need_rank(x, 4), need_rank(*in[1], 4), need_rank(*in[2], 1);
      const int64_t groups = p[10], gin = p[11], gout = p[12];
      if (groups < 1 || gin < 1 || gout < 1 || x[3] != groups * gin ||
          *in[1] != std::vector<int64_t>{groups * gout, p[4], p[5], gin} || (*in[2])[0] != groups * gout)
        throw Decline("a convolution's filter or bias does not fit its groups and channels");
      const auto [h, w] = spatial_out(x, p, true);
      return {x[0], h, w, groups * gout};
    }
    case OpType::DepthwiseConv: {
      need_rank(x, 4), need_rank(*in[1], 4), need_rank(*in[2], 1);
      const int64_t m = p[10], c = p[11];
      if (m < 1 || x[3] != c || *in[1] != std::vector<int64_t>{1, p[4], p[5], c * m} || (*in[2])[0] != c * m)
        throw Decline("a depthwise convolution's filter or bias does not fit its channels");
      const auto [h, w] = spatial_out(x, p, true);
      return {x[0], h, w, c * m};
    }
    case OpType::FullyConnected: {
      need_rank(*in[1], 2);
      if (x.empty() || x.back() != (*in[1])[1] || (in[2] && *in[2] != std::vector<int64_t>{(*in[1])[0]}))
        throw Decline("a fully connected operation's filter or bias does not fit its input");
      std::vector<int64_t> out = x;
      out.back() = (*in[1])[0];
      return out;
    }
    case OpType::MaxPool:
    case OpType::AveragePool: {
      need_rank(x, 4);
      const bool dilated = op.type == OpType::MaxPool;
      // XNNPACK refuses pooling a single element and strides longer than the window.
      if (p[4] * p[5] < 2 || p[6] > p[4] || p[7] > p[5])
        throw Decline("a pooling window of one element or with a stride beyond it");
      const auto [h, w] = spatial_out(x, p, dilated);
      return {x[0], h, w, x[3]};
    }
    case OpType::GlobalAveragePool: need_rank(x, 4); return {x[0], 1, 1, x[3]};
    case OpType::Add:
    case OpType::Subtract:
    case OpType::Multiply:
    case OpType::Divide:
    case OpType::Maximum:
    case OpType::Minimum: return broadcast(x, *in[1]);
    case OpType::PRelu:
      need_rank(x, 4);
      if (*in[1] != std::vector<int64_t>{x[3]}) throw Decline("a PRelu slope that is not one per channel");
      return x;
    case OpType::Clamp:
      if (!(op.floats[0] < op.floats[1])) throw Decline("a clamp whose bounds are not in order");
      return x;
    case OpType::Reshape: return {};  // any dims of the same count: checked by the caller
    default: return x;
  }
}

}  // namespace

const char* op_name(OpType type) {
  switch (type) {
    case OpType::Conv: return "Conv";
    case OpType::DepthwiseConv: return "DepthwiseConv";
    case OpType::FullyConnected: return "FullyConnected";
    case OpType::MaxPool: return "MaxPool";
    case OpType::AveragePool: return "AveragePool";
    case OpType::GlobalAveragePool: return "GlobalAveragePool";
    case OpType::Add: return "Add";
    case OpType::Subtract: return "Subtract";
    case OpType::Multiply: return "Multiply";
    case OpType::Divide: return "Divide";
    case OpType::Maximum: return "Maximum";
    case OpType::Minimum: return "Minimum";
    case OpType::Clamp: return "Clamp";
    case OpType::Sigmoid: return "Sigmoid";
    case OpType::HardSwish: return "HardSwish";
    case OpType::LeakyRelu: return "LeakyRelu";
    case OpType::Elu: return "Elu";
    case OpType::Abs: return "Abs";
    case OpType::Negate: return "Negate";
    case OpType::Floor: return "Floor";
    case OpType::Ceiling: return "Ceiling";
    case OpType::SquareRoot: return "SquareRoot";
    case OpType::BankersRounding: return "BankersRounding";
    case OpType::Softmax: return "Softmax";
    case OpType::PRelu: return "PRelu";
    case OpType::Reshape: return "Reshape";
  }
  return "an unknown operation";
}

std::string encode(const Program& p) {
  Writer w;
  w.put(p.partition_inputs);
  w.put(p.partition_outputs);
  w.put(uint64_t(p.tensors.size()));
  for (const Tensor& t : p.tensors) {
    w.put(uint32_t(t.role));
    w.put(uint32_t(t.nhwc));
    w.put(t.index);
    w.put(t.source);
    w.put(uint32_t(t.transform));
    w.put_list(t.dims);
  }
  w.put(uint64_t(p.ops.size()));
  for (const Op& op : p.ops) {
    w.put(uint32_t(op.type));
    w.put(op.output);
    w.put_list(op.inputs);
    w.put_list(op.ints);
    w.put_list(op.floats);
  }
  std::string blob(kMagic, sizeof kMagic);
  Writer head;
  head.put(kFormat);
  head.put(uint32_t(0));
  head.put(checksum(w.out.data(), w.out.size()));
  return blob + head.out + w.out;
}

Program decode(const void* bytes, size_t size) {
  const char* p = static_cast<const char*>(bytes);
  constexpr size_t head = sizeof kMagic + 2 * sizeof(uint32_t) + sizeof(uint64_t);
  if (!p || size < head || std::memcmp(p, kMagic, sizeof kMagic) != 0)
    throw Decline("these bytes are not a partition this plugin serialized");
  Reader r(p + sizeof kMagic, head - sizeof kMagic);
  const uint32_t format = r.get<uint32_t>(), reserved = r.get<uint32_t>();
  const uint64_t sum = r.get<uint64_t>();
  if (format != kFormat || reserved != 0)
    throw Decline("a partition of format " + std::to_string(format) + "." + std::to_string(reserved) +
                  ", this plugin reads format " + std::to_string(kFormat) + ".0");
  if (checksum(p + head, size - head) != sum) throw Decline("the partition's bytes do not match their checksum");
  Reader in(p + head, size - head);
  Program prog;
  prog.partition_inputs = in.get<int64_t>();
  prog.partition_outputs = in.get<int64_t>();
  // The smallest tensor and operation each take this many bytes.
  prog.tensors.resize(in.count(3 * 4 + 3 * 8));
  for (Tensor& t : prog.tensors) {
    t.role = Role(in.get<uint32_t>());
    t.nhwc = in.get<uint32_t>() != 0;
    t.index = in.get<int64_t>();
    t.source = in.get<int64_t>();
    t.transform = Transform(in.get<uint32_t>());
    t.dims = in.get_list<int64_t>();
  }
  prog.ops.resize(in.count(2 * 4 + 3 * 8));
  for (Op& op : prog.ops) {
    op.type = OpType(in.get<uint32_t>());
    op.output = in.get<uint32_t>();
    op.inputs = in.get_list<uint32_t>();
    op.ints = in.get_list<int64_t>();
    op.floats = in.get_list<float>();
  }
  if (in.left()) throw Decline(std::to_string(in.left()) + " bytes after the partition");
  return prog;
}

void validate(const Program& p, const Graph& g, const std::vector<int64_t>& inputs, const std::vector<int64_t>& outputs) {
  if (p.partition_inputs != int64_t(inputs.size()) || p.partition_outputs != int64_t(outputs.size()))
    throw Decline("made for a partition of " + std::to_string(p.partition_inputs) + " inputs and " +
                  std::to_string(p.partition_outputs) + " outputs, this one has " + std::to_string(inputs.size()) + " and " +
                  std::to_string(outputs.size()));
  if (p.tensors.size() >= kNone) throw Decline("too many tensors");
  std::vector<int> input_seen(inputs.size()), output_seen(outputs.size());
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const Tensor& t = p.tensors[i];
    const std::string what = "tensor " + std::to_string(i);
    if (t.dims.empty() || t.dims.size() > kMaxRank) throw Decline(what + " has rank " + std::to_string(t.dims.size()));
    for (int64_t d : t.dims)
      if (d < 1 || d > std::numeric_limits<int32_t>::max()) throw Decline(what + " has dims " + dims_text(t.dims));
    numel(t.dims);
    if (t.role == Role::Input || t.role == Role::Output) {
      const std::vector<int64_t>& list = t.role == Role::Input ? inputs : outputs;
      std::vector<int>& seen = t.role == Role::Input ? input_seen : output_seen;
      if (t.index < 0 || t.index >= int64_t(list.size()) || seen[size_t(t.index)]++)
        throw Decline(what + " names boundary value " + std::to_string(t.index) + " wrongly");
      const int64_t v = list[size_t(t.index)];
      std::vector<int64_t> want = g.dims(v);
      if (want.empty()) want = {1};
      std::vector<int64_t> have = t.dims;
      if (t.nhwc) {
        if (have.size() != 4) throw Decline(what + " is NHWC and not of rank 4");
        have = {have[0], have[3], have[1], have[2]};
      }
      if (g.dtype(v) != KILN_BACKEND_FLOAT32 || have != want)
        throw Decline(what + " is float32 " + dims_text(have) + ", the partition's '" + g.value_name(v) + "' is " +
                      dims_text(want));
    } else if (t.role == Role::Static) {
      if (t.transform == Transform::Zero) continue;
      size_t bytes = 0;
      if (t.source < 0 || t.source >= g.value_count() || !g.constant(t.source, &bytes) ||
          g.dtype(t.source) != KILN_BACKEND_FLOAT32)
        throw Decline(what + " is made from value " + std::to_string(t.source) + ", not a float32 constant of the partition");
      std::vector<int64_t> s = g.dims(t.source);
      if (bytes != size_t(numel(s)) * sizeof(float)) throw Decline(what + "'s constant has the wrong size");
      const std::vector<int64_t>& d = t.dims;
      bool fits = false;
      switch (t.transform) {
        case Transform::Copy: fits = numel(s) == numel(d); break;
        case Transform::OihwToOhwi: fits = s.size() == 4 && d == std::vector<int64_t>{s[0], s[2], s[3], s[1]}; break;
        case Transform::OihwToHwo: fits = s.size() == 4 && s[1] == 1 && d == std::vector<int64_t>{1, s[2], s[3], s[0]}; break;
        case Transform::Transpose2d: fits = s.size() == 2 && d == std::vector<int64_t>{s[1], s[0]}; break;
        case Transform::NchwToNhwc:
          if (s.size() <= 4) {
            s.insert(s.begin(), 4 - s.size(), 1);
            fits = d == std::vector<int64_t>{s[0], s[2], s[3], s[1]};
          }
          break;
        case Transform::Broadcast: fits = numel(s) == 1; break;
        default: throw Decline(what + " has an unknown transform");
      }
      if (!fits) throw Decline(what + " " + dims_text(d) + " cannot be made from a constant " + dims_text(g.dims(t.source)));
    } else if (t.role != Role::Internal) {
      throw Decline(what + " has an unknown role");
    }
  }
  for (size_t i = 0; i < outputs.size(); ++i)
    if (!output_seen[i]) throw Decline("nothing makes the partition's output '" + g.value_name(outputs[i]) + "'");

  // Made once, before it is read: inputs and statics exist from the start.
  std::vector<char> made(p.tensors.size());
  for (size_t i = 0; i < p.tensors.size(); ++i) made[i] = p.tensors[i].role == Role::Input || p.tensors[i].role == Role::Static;
  for (size_t k = 0; k < p.ops.size(); ++k) {
    const Op& op = p.ops[k];
    const std::string what = "operation " + std::to_string(k) + " (" + op_name(op.type) + ")";
    const Arity a = arity(op.type);
    if (op.inputs.size() != a.inputs || op.ints.size() != a.ints || op.floats.size() != a.floats)
      throw Decline(what + " has the wrong number of inputs or parameters");
    for (int64_t v : op.ints)
      if (v < 0 || v > std::numeric_limits<uint32_t>::max() / 2) throw Decline(what + " has a parameter out of range");
    std::vector<const std::vector<int64_t>*> in;
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      const uint32_t id = op.inputs[i];
      const bool optional = i >= a.inputs - a.optional;
      if (id == kNone && optional) {
        in.push_back(nullptr);
        continue;
      }
      if (id >= p.tensors.size() || !made[id]) throw Decline(what + " reads a tensor that is not made before it");
      in.push_back(&p.tensors[id].dims);
    }
    // Filters and biases are packed when the runtime is made: XNNPACK wants them static.
    if (op.type == OpType::Conv || op.type == OpType::DepthwiseConv || op.type == OpType::FullyConnected)
      for (size_t i = 1; i < op.inputs.size(); ++i)
        if (op.inputs[i] != kNone && p.tensors[op.inputs[i]].role != Role::Static)
          throw Decline(what + " has a filter or bias that is not static");
    if (op.output >= p.tensors.size() || made[op.output] ||
        (p.tensors[op.output].role != Role::Internal && p.tensors[op.output].role != Role::Output))
      throw Decline(what + " writes a tensor that is an input, a constant or made twice");
    made[op.output] = 1;
    const std::vector<int64_t>& out = p.tensors[op.output].dims;
    const std::vector<int64_t> want = output_dims(op, in);
    if (op.type == OpType::Reshape ? numel(out) != numel(*in[0]) : out != want)
      throw Decline(what + " makes " + dims_text(op.type == OpType::Reshape ? *in[0] : want) + ", its output tensor is " +
                    dims_text(out));
  }
  for (size_t i = 0; i < p.tensors.size(); ++i)
    if (p.tensors[i].role == Role::Output && !made[i]) throw Decline("no operation makes output tensor " + std::to_string(i));
}

void static_data(const Tensor& t, const Graph& g, float* out) {
  const int64_t n = numel(t.dims);
  if (t.transform == Transform::Zero) {
    std::fill(out, out + n, 0.0f);
    return;
  }
  const float* src = static_cast<const float*>(g.constant(t.source, nullptr));
  std::vector<int64_t> s = g.dims(t.source);
  switch (t.transform) {
    case Transform::Copy: std::copy(src, src + n, out); break;
    case Transform::Broadcast: std::fill(out, out + n, src[0]); break;
    case Transform::Transpose2d:
      for (int64_t k = 0; k < s[0]; ++k)
        for (int64_t j = 0; j < s[1]; ++j) out[j * s[0] + k] = src[k * s[1] + j];
      break;
    case Transform::OihwToHwo:
      s = {1, s[0], s[2], s[3]};  // [O,1,kh,kw] read as [1,O,kh,kw]: the NCHW -> NHWC permutation
      [[fallthrough]];
    case Transform::OihwToOhwi:
    case Transform::NchwToNhwc: {
      s.insert(s.begin(), 4 - s.size(), 1);
      const int64_t c = s[1], hw = s[2] * s[3];
      for (int64_t a = 0; a < s[0]; ++a)
        for (int64_t i = 0; i < c; ++i)
          for (int64_t j = 0; j < hw; ++j) out[(a * hw + j) * c + i] = src[(a * c + i) * hw + j];
      break;
    }
    default: break;
  }
}

}  // namespace kiln_xnnpack
