// Micro-benchmarks of single operators (and one fused elementwise chain),
// each a tiny ONNX model built in memory and compiled through the public API,
// so what is timed is exactly what a caller of Model::run gets: the compiled
// kernel plus the runtime's per-call overhead.
//
//   build/bench/kiln_kernel_benchmarks [--backend NAME] [--threads N] [benchmark flags]
//
// Counters: GFLOP/s (conv, matmul) or GB/s (elementwise), which Google
// Benchmark prints as rates ("GFLOP=376/s"), and what the specialization
// reports: compile_ms, compiled_nodes, fallback_nodes. A nonzero
// fallback_nodes means the reference kernel was timed, not oneDNN or
// generated code.
#include <benchmark/benchmark.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"

namespace {

struct Config {
  std::string backend = "cpu";
  int threads = 0;
};
Config config;

// Builds a one-graph ModelProto; every value gets a declared shape so the
// model is self-describing without shape inference.
class GraphBuilder {
 public:
  GraphBuilder() {
    model_.set_ir_version(8);
    model_.set_producer_name("kiln_kernel_benchmarks");
    auto* opset = model_.add_opset_import();
    opset->set_domain("");
    opset->set_version(17);
    graph_ = model_.mutable_graph();
    graph_->set_name("kernel");
  }

  void input(const std::string& name, const kiln::Shape& shape) { declare(graph_->add_input(), name, shape); }
  void output(const std::string& name, const kiln::Shape& shape) { declare(graph_->add_output(), name, shape); }

  // Uniform in [-scale, scale) from a seed fixed by the initializer's
  // position, so every run of the suite multiplies the same numbers.
  void initializer(const std::string& name, const kiln::Shape& shape, float scale) {
    auto* t = graph_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    int64_t n = 1;
    for (int64_t d : shape) {
      t->add_dims(d);
      n *= d;
    }
    std::mt19937 rng(uint32_t(1000 + graph_->initializer_size()));
    std::uniform_real_distribution<float> u(-scale, scale);
    t->mutable_float_data()->Reserve(int(n));
    for (int64_t i = 0; i < n; ++i) t->add_float_data(u(rng));
  }

  onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& inputs, const std::vector<std::string>& outputs) {
    auto* n = graph_->add_node();
    n->set_op_type(op);
    n->set_name(op + "_" + std::to_string(graph_->node_size()));
    for (const auto& i : inputs) n->add_input(i);
    for (const auto& o : outputs) n->add_output(o);
    return n;
  }

  static void ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& values) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t v : values) a->add_ints(v);
  }
  static void integer(onnx::NodeProto* n, const std::string& name, int64_t value) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(value);
  }

  std::string bytes() const { return model_.SerializeAsString(); }

 private:
  static void declare(onnx::ValueInfoProto* v, const std::string& name, const kiln::Shape& shape) {
    v->set_name(name);
    auto* tensor = v->mutable_type()->mutable_tensor_type();
    tensor->set_elem_type(onnx::TensorProto::FLOAT);
    auto* s = tensor->mutable_shape();
    for (int64_t d : shape) s->add_dim()->set_dim_value(d);
  }

  onnx::ModelProto model_;
  onnx::GraphProto* graph_ = nullptr;
};

// What one benchmark case needs: the model bytes, the runtime inputs and the
// work one run does.
struct Case {
  std::string model;
  std::vector<std::pair<std::string, kiln::Shape>> inputs;
  double flops = 0;        // for GFLOP/s; 0 when the case is memory-bound
  bool bandwidth = false;  // report GB/s over the runtime inputs and outputs
};

kiln::Tensor random_tensor(const kiln::Shape& shape, uint32_t seed) {
  kiln::Tensor t(kiln::DType::Float32, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  float* p = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
  return t;
}

// Weights scaled by 1/sqrt(fan_in) keep activations near unit size, so no
// denormals or infinities make a kernel look slower than it is.
float fan_in_scale(int64_t fan_in) { return 1.0f / std::sqrt(float(fan_in)); }

struct ConvSpec {
  int64_t c_in, c_out, hw, kernel, group;
  bool relu;
};

Case conv_case(const ConvSpec& c) {
  GraphBuilder b;
  const int64_t pad = c.kernel / 2;
  const kiln::Shape x{1, c.c_in, c.hw, c.hw};
  const kiln::Shape y{1, c.c_out, c.hw, c.hw};  // stride 1, "same" padding
  b.input("x", x);
  b.initializer("w", {c.c_out, c.c_in / c.group, c.kernel, c.kernel}, fan_in_scale(c.c_in / c.group * c.kernel * c.kernel));
  b.initializer("b", {c.c_out}, 0.1f);
  auto* conv = b.node("Conv", {"x", "w", "b"}, {c.relu ? "conv" : "y"});
  GraphBuilder::ints(conv, "kernel_shape", {c.kernel, c.kernel});
  GraphBuilder::ints(conv, "pads", {pad, pad, pad, pad});
  GraphBuilder::ints(conv, "strides", {1, 1});
  GraphBuilder::integer(conv, "group", c.group);
  if (c.relu) b.node("Relu", {"conv"}, {"y"});
  b.output("y", y);
  Case k;
  k.model = b.bytes();
  k.inputs = {{"x", x}};
  k.flops = 2.0 * double(c.c_out) * double(c.hw * c.hw) * double(c.c_in / c.group) * double(c.kernel * c.kernel);
  return k;
}

// [batch..., m, k] x [batch..., k, n]; with constant_b the right operand is an
// initializer (weights), otherwise both are runtime inputs.
Case matmul_case(const kiln::Shape& batch, int64_t m, int64_t k, int64_t n, bool constant_b, bool bias) {
  GraphBuilder b;
  kiln::Shape a_shape = batch, b_shape = batch, y_shape = batch;
  a_shape.insert(a_shape.end(), {m, k});
  b_shape.insert(b_shape.end(), {k, n});
  y_shape.insert(y_shape.end(), {m, n});
  b.input("a", a_shape);
  Case c;
  c.inputs = {{"a", a_shape}};
  if (constant_b) {
    b.initializer("b", b_shape, fan_in_scale(k));
  } else {
    b.input("b", b_shape);
    c.inputs.emplace_back("b", b_shape);
  }
  b.node("MatMul", {"a", "b"}, {bias ? "ab" : "y"});
  if (bias) {
    b.initializer("bias", {n}, 0.1f);
    b.node("Add", {"ab", "bias"}, {"y"});
  }
  b.output("y", y_shape);
  c.model = b.bytes();
  double batches = 1;
  for (int64_t d : batch) batches *= double(d);
  c.flops = 2.0 * batches * double(m) * double(k) * double(n);
  return c;
}

// y = x * sigmoid((x + bias[c]) * s): four elementwise nodes the cpu backend
// can fuse into one loop that reads x once and writes y once.
Case silu_chain_case(int64_t channels, int64_t hw) {
  GraphBuilder b;
  const kiln::Shape x{1, channels, hw, hw};
  b.input("x", x);
  b.initializer("bias", {channels, 1, 1}, 0.5f);
  b.initializer("scale", {}, 1.0f);
  b.node("Add", {"x", "bias"}, {"shifted"});
  b.node("Mul", {"shifted", "scale"}, {"scaled"});
  b.node("Sigmoid", {"scaled"}, {"gate"});
  b.node("Mul", {"x", "gate"}, {"y"});
  b.output("y", x);
  Case c;
  c.model = b.bytes();
  c.inputs = {{"x", x}};
  c.bandwidth = true;
  return c;
}

void run_case(benchmark::State& state, const std::function<Case()>& make) {
  try {
    const Case c = make();
    kiln::RuntimeOptions opts;
    opts.backend = config.backend;
    opts.threads = config.threads;
    opts.log_level = kiln::LogLevel::Error;
    kiln::Runtime runtime(opts);
    kiln::Model model = kiln::Model::load_from_memory(runtime, c.model.data(), c.model.size());

    std::vector<std::pair<std::string, kiln::Tensor>> inputs;
    uint32_t seed = 1;
    double io_bytes = 0;
    for (const auto& [name, shape] : c.inputs) {
      inputs.emplace_back(name, random_tensor(shape, seed++));
      io_bytes += double(inputs.back().second.nbytes());
    }
    // The warm-up run compiles the specialization; its outputs, reused as
    // caller buffers, keep allocation out of the timed loop.
    std::vector<kiln::Tensor> outputs = model.run(inputs);
    for (const auto& o : outputs) io_bytes += double(o.nbytes());

    for (auto _ : state) {
      model.run(inputs, outputs);
      benchmark::DoNotOptimize(outputs[0].data());
      benchmark::ClobberMemory();
    }

    const double iterations = double(state.iterations());
    if (c.flops > 0) state.counters["GFLOP"] = benchmark::Counter(c.flops * iterations / 1e9, benchmark::Counter::kIsRate);
    if (c.bandwidth) {
      state.counters["GB"] = benchmark::Counter(io_bytes * iterations / 1e9, benchmark::Counter::kIsRate);
      state.SetItemsProcessed(state.iterations() * outputs[0].numel());
    }
    const auto specs = model.specializations();
    if (!specs.empty()) {
      state.counters["compile_ms"] = specs[0].compile_ms;
      state.counters["compiled_nodes"] = double(specs[0].compiled_nodes);
      state.counters["fallback_nodes"] = double(specs[0].fallback_nodes);
      state.SetLabel(specs[0].backend);
    }
  } catch (const kiln::Error& e) {
    state.SkipWithError(e.what());
  }
}

void add(const std::string& name, std::function<Case()> make, benchmark::TimeUnit unit) {
  benchmark::RegisterBenchmark(name.c_str(), run_case, std::move(make))->Unit(unit)->UseRealTime();
}

}  // namespace

int main(int argc, char** argv) {
  // Our flags first; the rest goes to Google Benchmark.
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    auto value = [&](const char* flag) -> const char* {
      return std::strcmp(argv[i], flag) == 0 && i + 1 < argc ? argv[++i] : nullptr;
    };
    if (const char* v = value("--backend"))
      config.backend = v;
    else if (const char* v = value("--threads"))
      config.threads = std::atoi(v);
    else
      rest.push_back(argv[i]);
  }

  using benchmark::kMicrosecond;
  add("conv/3x3_64to64_56x56_bias_relu", [] { return conv_case({64, 64, 56, 3, 1, true}); }, kMicrosecond);
  add("conv/1x1_256to64_56x56_bias", [] { return conv_case({256, 64, 56, 1, 1, false}); }, kMicrosecond);
  add("conv/depthwise3x3_144_56x56_bias", [] { return conv_case({144, 144, 56, 3, 144, false}); }, kMicrosecond);
  add("matmul/128x256x1024_const_bias", [] { return matmul_case({}, 128, 256, 1024, true, true); }, kMicrosecond);
  add("matmul/512x512x512_const", [] { return matmul_case({}, 512, 512, 512, true, false); }, kMicrosecond);
  add("matmul/batched_4x128x64x128_inputs", [] { return matmul_case({4}, 128, 64, 128, false, false); }, kMicrosecond);
  add("eltwise/silu_chain_64x112x112", [] { return silu_chain_case(64, 112); }, kMicrosecond);

  int rest_argc = int(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
