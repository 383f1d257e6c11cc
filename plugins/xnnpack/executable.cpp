#include "executable.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>

#include <xnnpack.h>

namespace kiln_xnnpack {

namespace {

const char* status_text(xnn_status s) {
  switch (s) {
    case xnn_status_success: return "success";
    case xnn_status_uninitialized: return "XNNPACK is not initialized";
    case xnn_status_invalid_parameter: return "invalid parameter";
    case xnn_status_invalid_state: return "invalid state";
    case xnn_status_unsupported_parameter: return "unsupported parameter";
    case xnn_status_unsupported_hardware: return "unsupported hardware";
    case xnn_status_out_of_memory: return "out of memory";
  }
  return "unknown status";
}

void check(xnn_status s, const std::string& what) {
  if (s == xnn_status_out_of_memory) throw std::bad_alloc();
  if (s != xnn_status_success) throw std::runtime_error("XNNPACK's " + what + " failed: " + status_text(s));
}

struct Subgraph {
  ~Subgraph() {
    if (g) xnn_delete_subgraph(g);
  }
  xnn_subgraph_t g = nullptr;
};

// Defines every tensor and operation; statics[i] is static tensor i's data.
void define(const Program& p, const std::vector<const float*>& statics, const std::vector<uint32_t>& externals, Subgraph& sg) {
  check(xnn_create_subgraph(uint32_t(externals.size()), 0, &sg.g), "xnn_create_subgraph");
  std::vector<uint32_t> id(p.tensors.size(), XNN_INVALID_VALUE_ID);
  for (size_t e = 0; e < externals.size(); ++e) id[externals[e]] = uint32_t(e);
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const Tensor& t = p.tensors[i];
    const std::vector<size_t> dims(t.dims.begin(), t.dims.end());
    const uint32_t flags = t.role == Role::Input    ? XNN_VALUE_FLAG_EXTERNAL_INPUT
                           : t.role == Role::Output ? XNN_VALUE_FLAG_EXTERNAL_OUTPUT
                                                    : 0;
    check(xnn_define_tensor_value(sg.g, xnn_datatype_fp32, dims.size(), dims.data(),
                                  t.role == Role::Static ? statics[i] : nullptr, id[i], flags, &id[i]),
          "xnn_define_tensor_value for tensor " + std::to_string(i));
  }
  for (size_t k = 0; k < p.ops.size(); ++k) {
    const Op& op = p.ops[k];
    auto in = [&](size_t i) { return op.inputs[i] == kNone ? XNN_INVALID_VALUE_ID : id[op.inputs[i]]; };
    const uint32_t out = id[op.output];
    auto u = [&](size_t i) { return uint32_t(op.ints[i]); };
    const float inf = std::numeric_limits<float>::infinity();
    xnn_subgraph_t g = sg.g;
    xnn_status s = xnn_status_invalid_parameter;
    switch (op.type) {
      case OpType::Conv:
        s = xnn_define_convolution_2d(g, u(0), u(1), u(2), u(3), u(4), u(5), u(6), u(7), u(8), u(9), u(10), op.ints[11],
                                      op.ints[12], -inf, inf, in(0), in(1), in(2), out, 0);
        break;
      case OpType::DepthwiseConv:
        s = xnn_define_depthwise_convolution_2d(g, u(0), u(1), u(2), u(3), u(4), u(5), u(6), u(7), u(8), u(9), u(10), op.ints[11],
                                                -inf, inf, in(0), in(1), in(2), out, 0);
        break;
      case OpType::FullyConnected: s = xnn_define_fully_connected(g, -inf, inf, in(0), in(1), in(2), out, 0); break;
      case OpType::MaxPool:
        s = xnn_define_max_pooling_2d(g, u(0), u(1), u(2), u(3), u(4), u(5), u(6), u(7), u(8), u(9), -inf, inf, in(0), out, 0);
        break;
      case OpType::AveragePool:
        s = xnn_define_average_pooling_2d(g, u(0), u(1), u(2), u(3), u(4), u(5), u(6), u(7), -inf, inf, in(0), out, 0);
        break;
      case OpType::GlobalAveragePool: s = xnn_define_global_average_pooling_2d(g, -inf, inf, in(0), out, 0); break;
      case OpType::Add: s = xnn_define_add2(g, -inf, inf, in(0), in(1), out, 0); break;
      case OpType::Subtract: s = xnn_define_subtract(g, -inf, inf, in(0), in(1), out, 0); break;
      case OpType::Multiply: s = xnn_define_multiply2(g, -inf, inf, in(0), in(1), out, 0); break;
      case OpType::Divide: s = xnn_define_divide(g, -inf, inf, in(0), in(1), out, 0); break;
      case OpType::Maximum: s = xnn_define_maximum2(g, in(0), in(1), out, 0); break;
      case OpType::Minimum: s = xnn_define_minimum2(g, in(0), in(1), out, 0); break;
      case OpType::Clamp: s = xnn_define_clamp(g, op.floats[0], op.floats[1], in(0), out, 0); break;
      case OpType::Sigmoid: s = xnn_define_sigmoid(g, in(0), out, 0); break;
      case OpType::HardSwish: s = xnn_define_hardswish(g, in(0), out, 0); break;
      case OpType::LeakyRelu: s = xnn_define_leaky_relu(g, op.floats[0], in(0), out, 0); break;
      case OpType::Elu: s = xnn_define_elu(g, op.floats[0], in(0), out, 0); break;
      case OpType::Abs: s = xnn_define_abs(g, in(0), out, 0); break;
      case OpType::Negate: s = xnn_define_negate(g, in(0), out, 0); break;
      case OpType::Floor: s = xnn_define_floor(g, in(0), out, 0); break;
      case OpType::Ceiling: s = xnn_define_ceiling(g, in(0), out, 0); break;
      case OpType::SquareRoot: s = xnn_define_square_root(g, in(0), out, 0); break;
      case OpType::BankersRounding: s = xnn_define_bankers_rounding(g, in(0), out, 0); break;
      case OpType::Softmax: s = xnn_define_softmax(g, in(0), out, 0); break;
      case OpType::PRelu: s = xnn_define_prelu(g, in(0), in(1), out, 0); break;
      case OpType::Reshape: {
        const std::vector<size_t> dims(p.tensors[op.output].dims.begin(), p.tensors[op.output].dims.end());
        s = xnn_define_static_reshape(g, dims.size(), dims.data(), in(0), out, 0);
        break;
      }
    }
    if (s != xnn_status_success)
      throw Decline(std::string("XNNPACK refuses operation ") + std::to_string(k) + " (" + op_name(op.type) +
                    "): " + status_text(s));
  }
}

std::vector<uint32_t> external_tensors(const Program& p) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < p.tensors.size(); ++i)
    if (p.tensors[i].role == Role::Input || p.tensors[i].role == Role::Output) out.push_back(uint32_t(i));
  return out;
}

// Moves [n][a][b] to [n][b][a] (NCHW <-> NHWC with a, b = C, H*W or H*W, C),
// in tiles spread over the host's threads.
void transpose(const float* src, float* dst, int64_t n, int64_t a, int64_t b, const kiln_backend_threads* threads) {
  constexpr int64_t kTile = 32;
  const int64_t ta = (a + kTile - 1) / kTile, tb = (b + kTile - 1) / kTile, tiles = n * ta * tb;
  struct Job {
    const float* src;
    float* dst;
    int64_t a, b, ta, tb;
  } job{src, dst, a, b, ta, tb};
  auto range = [](void* arg, int64_t begin, int64_t end) {
    const Job& j = *static_cast<const Job*>(arg);
    for (int64_t t = begin; t < end; ++t) {
      const int64_t image = t / (j.ta * j.tb), i0 = (t / j.tb) % j.ta * kTile, k0 = t % j.tb * kTile;
      const float* s = j.src + image * j.a * j.b;
      float* d = j.dst + image * j.a * j.b;
      for (int64_t i = i0; i < std::min(i0 + kTile, j.a); ++i)
        for (int64_t k = k0; k < std::min(k0 + kTile, j.b); ++k) d[k * j.a + i] = s[i * j.b + k];
    }
  };
  if (threads && threads->count > 1 && threads->parallel_for && tiles > 1 && a * b * n >= (1 << 14))
    threads->parallel_for(threads->context, tiles, range, &job);
  else
    range(&job, 0, tiles);
}

}  // namespace

void Aligned::operator()(void* p) const { std::free(p); }

Buffer allocate(size_t bytes) {
  const size_t size = (bytes + kOverread + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, size);
  if (!p) throw std::bad_alloc();
  std::memset(static_cast<char*>(p) + bytes, 0, size - bytes);
  return Buffer(static_cast<float*>(p));
}

void check_definable(const Program& p, const Graph& g) {
  // XNNPACK keeps static pointers when it defines and reads them only when
  // it makes a runtime: the constants themselves (or any valid address)
  // stand in for the transformed data.
  static const float zero[1] = {0};
  std::vector<const float*> statics(p.tensors.size(), nullptr);
  for (size_t i = 0; i < p.tensors.size(); ++i)
    if (p.tensors[i].role == Role::Static) {
      const void* c = p.tensors[i].source >= 0 ? g.constant(p.tensors[i].source, nullptr) : nullptr;
      statics[i] = c ? static_cast<const float*>(c) : zero;
    }
  Subgraph sg;
  define(p, statics, external_tensors(p), sg);
}

Executable::Executable(Program program, const Graph& g, bool threaded) : program_(std::move(program)), blob_(encode(program_)) {
  statics_.resize(program_.tensors.size());
  std::vector<char> packed(program_.tensors.size(), 1);  // only ever a filter or bias
  for (const Op& op : program_.ops) {
    const bool packs = op.type == OpType::Conv || op.type == OpType::DepthwiseConv || op.type == OpType::FullyConnected;
    for (size_t i = 0; i < op.inputs.size(); ++i)
      if (op.inputs[i] != kNone && !(packs && i > 0)) packed[op.inputs[i]] = 0;
  }
  std::vector<const float*> data(program_.tensors.size());
  for (size_t i = 0; i < program_.tensors.size(); ++i) {
    const Tensor& t = program_.tensors[i];
    if (t.role != Role::Static) continue;
    statics_[i] = allocate(size_t(numel(t.dims)) * sizeof(float));
    static_data(t, g, statics_[i].get());
    data[i] = statics_[i].get();
  }
  externals_ = external_tensors(program_);
  Subgraph sg;
  define(program_, data, externals_, sg);
  check(xnn_create_runtime_v2(sg.g, threaded ? &pool_ : nullptr, 0, &runtime_), "xnn_create_runtime_v2");
  for (size_t i = 0; i < statics_.size(); ++i)
    if (packed[i]) statics_[i].reset();
  scratch_.resize(externals_.size());
  bytes_.resize(externals_.size());
  for (size_t e = 0; e < externals_.size(); ++e) {
    bytes_[e] = size_t(numel(program_.tensors[externals_[e]].dims)) * sizeof(float);
    if (program_.tensors[externals_[e]].nhwc) scratch_[e] = allocate(bytes_[e]);
  }
}

Executable::~Executable() {
  if (runtime_) xnn_delete_runtime(runtime_);
}

void Executable::run(const void* const* inputs, size_t input_count, void* const* outputs, size_t output_count,
                     const kiln_backend_threads* threads) {
  if (int64_t(input_count) != program_.partition_inputs || int64_t(output_count) != program_.partition_outputs)
    throw std::invalid_argument("run with " + std::to_string(input_count) + " inputs and " + std::to_string(output_count) +
                                " outputs, the partition has " + std::to_string(program_.partition_inputs) + " and " +
                                std::to_string(program_.partition_outputs));
  if (threads && threads->struct_size < sizeof(kiln_backend_threads)) threads = nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  // XNNPACK's pool is this run's threads while it runs, and no longer after.
  struct Pool {
    ~Pool() { pool.threads = nullptr; }
    pthreadpool& pool;
  } in_use{pool_};
  pool_.threads = threads;

  std::vector<void*> pointers(externals_.size());
  for (size_t e = 0; e < externals_.size(); ++e) {
    const Tensor& t = program_.tensors[externals_[e]];
    const std::vector<int64_t>& d = t.dims;  // NHWC when t.nhwc
    if (t.role == Role::Output) {
      if (!outputs[t.index]) throw std::invalid_argument("output " + std::to_string(t.index) + " is a null buffer");
      pointers[e] = t.nhwc ? scratch_[e].get() : outputs[t.index];
      continue;
    }
    const auto* src = static_cast<const float*>(inputs[t.index]);
    if (!src) throw std::invalid_argument("input " + std::to_string(t.index) + " is a null buffer");
    // XNNPACK may read past the end: harmless within the buffer's last
    // page, not beyond it, where the host's buffer is copied to scratch.
    const uintptr_t last = reinterpret_cast<uintptr_t>(src) + bytes_[e] - 1;
    if (t.nhwc) {
      transpose(src, scratch_[e].get(), d[0], d[3], d[1] * d[2], threads);
      pointers[e] = scratch_[e].get();
    } else if (last / 4096 != (last + kOverread) / 4096) {
      if (!scratch_[e]) scratch_[e] = allocate(bytes_[e]);
      std::memcpy(scratch_[e].get(), src, bytes_[e]);
      pointers[e] = scratch_[e].get();
    } else {
      pointers[e] = const_cast<float*>(src);
    }
  }
  if (pointers != bound_) {
    std::vector<xnn_external_value> values(externals_.size());
    for (size_t e = 0; e < externals_.size(); ++e) values[e] = xnn_external_value{uint32_t(e), pointers[e]};
    bound_.clear();
    check(xnn_setup_runtime(runtime_, values.size(), values.data()), "xnn_setup_runtime");
    bound_ = pointers;
  }
  check(xnn_invoke_runtime(runtime_), "xnn_invoke_runtime");
  for (size_t e = 0; e < externals_.size(); ++e) {
    const Tensor& t = program_.tensors[externals_[e]];
    if (t.role == Role::Output && t.nhwc)
      transpose(scratch_[e].get(), static_cast<float*>(outputs[t.index]), t.dims[0], t.dims[1] * t.dims[2], t.dims[3], threads);
  }
}

}  // namespace kiln_xnnpack
