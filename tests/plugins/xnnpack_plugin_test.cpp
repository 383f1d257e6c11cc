// plugins/xnnpack through the public API: models of convolutions, poolings,
// fully connected layers and elementwise operations, at two batch sizes,
// held against the reference backend, with the nodes the plugin must take
// (or leave to the cpu backend); its partitions back from the cache with no
// compile; its runs on the Runtime's threads.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.hpp"
#include "model_builder.hpp"
#include "random_data.hpp"

namespace fs = std::filesystem;

namespace {

using kiln::test::ModelBuilder;
constexpr int kFloat = onnx::TensorProto::FLOAT;
const std::string kPlugin = KILN_XNNPACK_PLUGIN;

unsigned g_seed = 1;

// A constant of random values in [-scale, scale).
void weights(ModelBuilder& b, const std::string& name, std::vector<int64_t> dims, float scale = 0.5f) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v = kiln::test::random_values(size_t(n), g_seed++);
  for (float& x : v) x *= scale;
  b.initializer(ModelBuilder::float_tensor(name, dims, v));
}

onnx::NodeProto& conv(ModelBuilder& b, const std::string& x, const std::string& w, const std::string& bias, const std::string& y,
                      std::vector<int64_t> pads) {
  std::vector<std::string> in = {x, w};
  if (!bias.empty()) in.push_back(bias);
  auto& n = b.node("Conv", in, {y}, "conv_" + y);
  if (!pads.empty()) ModelBuilder::attr_ints(n, "pads", pads);
  return n;
}

struct OpCase {
  const char* name;
  // Builds the model at batch size `batch` (inputs, outputs, nodes, constants).
  std::function<void(ModelBuilder&, int64_t batch)> build;
  bool all_taken = true;  // the plugin takes every node; else the cpu backend takes some
  int64_t opset = 13;
};

const std::vector<OpCase>& cases() {
  static const std::vector<OpCase> list = {
      {"conv3x3_pads_bias",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 3, 9, 9}).output("y", kFloat, {n, 4, 9, 9});
         weights(b, "w", {4, 3, 3, 3}), weights(b, "bias", {4});
         conv(b, "x", "w", "bias", "y", {1, 1, 1, 1});
       }},
      {"conv_strided_dilated_asymmetric_pads",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 4, 11, 10}).output("y", kFloat, {n, 6, 4, 9});
         weights(b, "w", {6, 4, 3, 3});
         auto& c = conv(b, "x", "w", "", "y", {0, 1, 1, 0});
         ModelBuilder::attr_ints(c, "strides", {2, 1});
         ModelBuilder::attr_ints(c, "dilations", {2, 1});
       }},
      {"conv_grouped",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 4, 8, 8}).output("y", kFloat, {n, 6, 8, 8});
         weights(b, "w", {6, 2, 3, 3}), weights(b, "bias", {6});
         ModelBuilder::attr_int(conv(b, "x", "w", "bias", "y", {1, 1, 1, 1}), "group", 2);
       }},
      {"conv_depthwise_strided",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 8, 10, 10}).output("y", kFloat, {n, 8, 5, 5});
         weights(b, "w", {8, 1, 3, 3}), weights(b, "bias", {8});
         auto& c = conv(b, "x", "w", "bias", "y", {1, 1, 1, 1});
         ModelBuilder::attr_int(c, "group", 8);
         ModelBuilder::attr_ints(c, "strides", {2, 2});
       }},
      {"conv_depthwise_multiplier2",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 8, 10, 10}).output("y", kFloat, {n, 16, 10, 10});
         weights(b, "w", {16, 1, 5, 5});
         ModelBuilder::attr_int(conv(b, "x", "w", "", "y", {2, 2, 2, 2}), "group", 8);
       }},
      {"conv_same_upper",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 3, 7, 7}).output("y", kFloat, {n, 5, 4, 4});
         weights(b, "w", {5, 3, 4, 4});
         auto& c = conv(b, "x", "w", "", "y", {});
         ModelBuilder::attr_string(c, "auto_pad", "SAME_UPPER");
         ModelBuilder::attr_ints(c, "strides", {2, 2});
       }},
      {"conv_same_lower",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 3, 7, 7}).output("y", kFloat, {n, 5, 4, 4});
         weights(b, "w", {5, 3, 4, 4});
         auto& c = conv(b, "x", "w", "", "y", {});
         ModelBuilder::attr_string(c, "auto_pad", "SAME_LOWER");
         ModelBuilder::attr_ints(c, "strides", {2, 2});
       }},
      {"conv1x1_relu",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 16, 6, 6}).output("y", kFloat, {n, 8, 6, 6});
         weights(b, "w", {8, 16, 1, 1}), weights(b, "bias", {8});
         conv(b, "x", "w", "bias", "c", {});
         b.node("Relu", {"c"}, {"y"}, "relu");
       }},
      {"maxpool3x3_stride2_pads",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 4, 9, 9}).output("y", kFloat, {n, 4, 5, 5});
         auto& p = b.node("MaxPool", {"x"}, {"y"}, "pool");
         ModelBuilder::attr_ints(p, "kernel_shape", {3, 3});
         ModelBuilder::attr_ints(p, "strides", {2, 2});
         ModelBuilder::attr_ints(p, "pads", {1, 1, 1, 1});
       }},
      {"maxpool_ceil_mode",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 3, 7, 7}).output("y", kFloat, {n, 3, 4, 4});
         auto& p = b.node("MaxPool", {"x"}, {"y"}, "pool");
         ModelBuilder::attr_ints(p, "kernel_shape", {2, 2});
         ModelBuilder::attr_ints(p, "strides", {2, 2});
         ModelBuilder::attr_int(p, "ceil_mode", 1);
       }},
      {"maxpool_dilated",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 3, 10, 10}).output("y", kFloat, {n, 3, 6, 6});
         auto& p = b.node("MaxPool", {"x"}, {"y"}, "pool");
         ModelBuilder::attr_ints(p, "kernel_shape", {3, 3});
         ModelBuilder::attr_ints(p, "dilations", {2, 2});
       }},
      {"avgpool3x3_pads_excluded",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 4, 8, 8}).output("y", kFloat, {n, 4, 8, 8});
         auto& p = b.node("AveragePool", {"x"}, {"y"}, "pool");
         ModelBuilder::attr_ints(p, "kernel_shape", {3, 3});
         ModelBuilder::attr_ints(p, "pads", {1, 1, 1, 1});
       }},
      {"avgpool_ceil_mode",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 3, 8, 8}).output("y", kFloat, {n, 3, 4, 4});
         auto& p = b.node("AveragePool", {"x"}, {"y"}, "pool");
         ModelBuilder::attr_ints(p, "kernel_shape", {3, 3});
         ModelBuilder::attr_ints(p, "strides", {2, 2});
         ModelBuilder::attr_int(p, "ceil_mode", 1);
       }},
      {"global_pools",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 5, 6, 7}).output("avg", kFloat, {n, 5, 1, 1}).output("max", kFloat, {n, 5, 1, 1});
         b.node("GlobalAveragePool", {"x"}, {"avg"}, "gap");
         b.node("GlobalMaxPool", {"x"}, {"max"}, "gmp");
       }},
      {"gemm_transposed_weights_bias",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 20}).output("y", kFloat, {n, 12});
         weights(b, "w", {12, 20}), weights(b, "c", {12});
         ModelBuilder::attr_int(b.node("Gemm", {"x", "w", "c"}, {"y"}, "gemm"), "transB", 1);
       }},
      {"gemm_bias_row",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 20}).output("y", kFloat, {n, 12});
         weights(b, "w", {20, 12}), weights(b, "c", {1, 12});
         b.node("Gemm", {"x", "w", "c"}, {"y"}, "gemm");
       }},
      {"matmul_rank3",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 5, 16}).output("y", kFloat, {n, 5, 8});
         weights(b, "w", {16, 8});
         b.node("MatMul", {"x", "w"}, {"y"}, "matmul");
       }},
      {"residual_block_and_classifier",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 8, 8, 8}).output("y", kFloat, {n, 10});
         weights(b, "w1", {8, 8, 3, 3}, 0.2f), weights(b, "b1", {8}), weights(b, "w2", {8, 8, 3, 3}, 0.2f);
         weights(b, "fc", {10, 8}), weights(b, "fcb", {10});
         conv(b, "x", "w1", "b1", "c1", {1, 1, 1, 1});
         b.node("Relu", {"c1"}, {"r1"}, "relu1");
         conv(b, "r1", "w2", "", "c2", {1, 1, 1, 1});
         b.node("Add", {"c2", "x"}, {"s"}, "residual");
         b.node("Relu", {"s"}, {"r2"}, "relu2");
         b.node("GlobalAveragePool", {"r2"}, {"g"}, "gap");
         b.node("Flatten", {"g"}, {"f"}, "flatten");
         ModelBuilder::attr_int(b.node("Gemm", {"f", "fc", "fcb"}, {"z"}, "fc"), "transB", 1);
         b.node("Softmax", {"z"}, {"y"}, "softmax");
       }},
      {"constants_broadcast_against_nhwc",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 4, 6, 6}).output("y", kFloat, {n, 4, 6, 6});
         weights(b, "w", {4, 4, 1, 1}), weights(b, "per_channel", {4, 1, 1}), weights(b, "scalar", {});
         weights(b, "nchw", {1, 4, 1, 1}), weights(b, "per_column", {6}), weights(b, "per_pixel", {4, 6, 6});
         conv(b, "x", "w", "", "c", {});
         b.node("Add", {"c", "per_channel"}, {"a"}, "add");
         b.node("Mul", {"a", "scalar"}, {"m"}, "mul");
         b.node("Sub", {"nchw", "m"}, {"s"}, "sub");
         b.node("Mul", {"s", "per_column"}, {"d"}, "mul_columns");
         b.node("Max", {"d", "per_pixel"}, {"y"}, "max");
       }},
      {"data_broadcast_against_nhwc",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 4, 6, 6}).input("per_channel", kFloat, {4, 1, 1}).input("per_column", kFloat, {6});
         b.output("y", kFloat, {n, 4, 6, 6});
         weights(b, "w", {4, 4, 3, 3});
         conv(b, "x", "w", "", "c", {1, 1, 1, 1});
         b.node("Add", {"c", "per_channel"}, {"a"}, "add");
         b.node("Mul", {"a", "per_column"}, {"y"}, "mul");
       }},
      {"activations",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 10, 7});
         b.initializer(ModelBuilder::float_tensor("lo", {}, {-0.5f})).initializer(ModelBuilder::float_tensor("hi", {}, {0.3f}));
         const std::vector<std::pair<const char*, std::vector<std::string>>> ops = {
             {"Sigmoid", {"x"}}, {"HardSwish", {"x"}}, {"Abs", {"x"}},
             {"Neg", {"x"}},     {"Floor", {"x"}},     {"Ceil", {"x"}},
             {"Round", {"x"}},   {"Relu", {"x"}},      {"Clip", {"x", "lo", "hi"}}};
         for (const auto& [op, in] : ops) {
           b.output(std::string("y_") + op, kFloat, {n, 10, 7});
           b.node(op, in, {std::string("y_") + op}, op);
         }
         b.output("y_LeakyRelu", kFloat, {n, 10, 7}).output("y_Elu", kFloat, {n, 10, 7}).output("y_Sqrt", kFloat, {n, 10, 7});
         ModelBuilder::attr_float(b.node("LeakyRelu", {"x"}, {"y_LeakyRelu"}, "leaky"), "alpha", 0.2f);
         ModelBuilder::attr_float(b.node("Elu", {"x"}, {"y_Elu"}, "elu"), "alpha", 0.5f);
         b.node("Abs", {"x"}, {"abs_x"}, "abs_for_sqrt");
         b.node("Sqrt", {"abs_x"}, {"y_Sqrt"}, "sqrt");
       },
       true, 14},
      {"activations_on_nhwc",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 3, 5, 5}).output("y", kFloat, {n, 6, 5, 5});
         weights(b, "w", {6, 3, 3, 3}), weights(b, "slope", {6, 1, 1});
         conv(b, "x", "w", "", "c", {1, 1, 1, 1});
         b.node("HardSwish", {"c"}, {"h"}, "hardswish");
         b.node("Sigmoid", {"h"}, {"s"}, "sigmoid");
         b.node("Mul", {"c", "s"}, {"silu"}, "silu");
         b.node("PRelu", {"silu", "slope"}, {"y"}, "prelu");
       },
       true, 14},
      {"clip_with_attributes",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 3, 5}).output("y", kFloat, {n, 3, 5});
         auto& c = b.node("Clip", {"x"}, {"y"}, "clip");
         ModelBuilder::attr_float(c, "min", -0.2f);
         ModelBuilder::attr_float(c, "max", 0.4f);
       },
       true, 6},
      {"binary_operations_on_data",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 3, 4, 4}).input("z", kFloat, {n, 3, 4, 4});
         b.initializer(ModelBuilder::float_tensor("one", {}, {1.0f}));
         b.node("Mul", {"z", "z"}, {"zz"}, "square");
         b.node("Add", {"zz", "one"}, {"denominator"}, "plus_one");
         const std::vector<std::pair<const char*, std::string>> ops = {{"Add", "z"}, {"Sub", "z"}, {"Mul", "z"},
                                                                       {"Max", "z"}, {"Min", "z"}, {"Div", "denominator"}};
         for (const auto& [op, second] : ops) {
           b.output(std::string("y_") + op, kFloat, {n, 3, 4, 4});
           b.node(op, {"x", second}, {std::string("y_") + op}, op);
         }
       }},
      {"softmax_last_axis_rank4",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 3, 4, 5}).output("y", kFloat, {n, 3, 4, 5});
         b.node("Softmax", {"x"}, {"y"}, "softmax");
       }},
      // Outputs no node makes (an input, a constant): with every node taken,
      // the host hands the plugin the whole graph, these outputs too.
      {"outputs_no_node_makes",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 3, 4}).output("y", kFloat, {n, 3, 4}).output("x", kFloat, {n, 3, 4});
         b.output("k", kFloat, {2, 5});
         weights(b, "k", {2, 5});
         b.node("Relu", {"x"}, {"y"}, "relu");
       }},
      // A Softmax over the last axis of a convolution's output (W) would
      // have to read NHWC data as NCHW: the cpu backend takes it.
      {"softmax_after_conv_goes_to_cpu",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 3, 6, 6}).output("y", kFloat, {n, 4, 6, 6});
         weights(b, "w", {4, 3, 3, 3});
         conv(b, "x", "w", "", "c", {1, 1, 1, 1});
         b.node("Softmax", {"c"}, {"y"}, "softmax");
       },
       false},
      // A [4,6,6] input broadcast against NHWC data would need a transpose.
      {"reordering_broadcast_goes_to_cpu",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 4, 6, 6}).input("t", kFloat, {4, 6, 6}).output("y", kFloat, {n, 4, 6, 6});
         weights(b, "w", {4, 4, 1, 1});
         conv(b, "x", "w", "", "c", {});
         b.node("Mul", {"c", "t"}, {"y"}, "mul");
       },
       false},
      // Flatten orders [C,H,W]: NHWC data would come out in another order.
      // The convolution's partition hands its output over in NCHW.
      {"flatten_of_feature_maps_goes_to_cpu",
       [](ModelBuilder& b, int64_t n) {
         b.input("x", kFloat, {n, 1, 12, 12}).output("y", kFloat, {n, 10});
         weights(b, "w", {4, 1, 5, 5}), weights(b, "bias", {4}), weights(b, "fc", {4 * 4 * 4, 10}, 0.2f);
         conv(b, "x", "w", "bias", "c", {});
         b.node("Relu", {"c"}, {"r"}, "relu");
         auto& p = b.node("MaxPool", {"r"}, {"p"}, "pool");
         ModelBuilder::attr_ints(p, "kernel_shape", {2, 2});
         ModelBuilder::attr_ints(p, "strides", {2, 2});
         b.node("Flatten", {"p"}, {"f"}, "flatten");
         b.node("MatMul", {"f", "fc"}, {"y"}, "fc");
       },
       false},
  };
  return list;
}

struct Param {
  const OpCase* c;
  int64_t batch;
};
void PrintTo(const Param& p, std::ostream* os) { *os << p.c->name << " batch " << p.batch; }

std::vector<Param> params() {
  std::vector<Param> out;
  for (const OpCase& c : cases())
    for (int64_t batch : {1, 3}) out.push_back({&c, batch});
  return out;
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(info.param.c->name) + "_batch" + std::to_string(info.param.batch);
}

std::string model_bytes(const OpCase& c, int64_t batch) {
  g_seed = 1;
  ModelBuilder b(c.opset);
  c.build(b, batch);
  return b.bytes();
}

// Random inputs for every input of the model, by its declared shape.
std::vector<std::pair<std::string, kiln::Tensor>> inputs_of(const std::string& bytes) {
  onnx::ModelProto m;
  m.ParseFromString(bytes);
  std::vector<std::pair<std::string, kiln::Tensor>> out;
  unsigned seed = 1000;
  for (const auto& in : m.graph().input()) {
    std::vector<int64_t> dims;
    for (const auto& d : in.type().tensor_type().shape().dim()) dims.push_back(d.dim_value());
    kiln::Tensor t(kiln::DType::Float32, dims);
    const std::vector<float> v = kiln::test::random_values(size_t(t.numel()), seed++);
    std::copy(v.begin(), v.end(), t.data_as<float>());
    out.emplace_back(in.name(), std::move(t));
  }
  return out;
}

struct Result {
  std::vector<std::vector<float>> outputs;
  kiln::SpecializationStats stats;
};

class XnnpackPlugin : public ::testing::Test {
 protected:
  kiln::RuntimeOptions options(bool plugin, const std::string& cache_dir = "", int threads = 2) {
    kiln::RuntimeOptions o;
    if (plugin)
      o.plugins = {kPlugin};
    else
      o.backend = "reference";
    o.threads = threads;
    o.cache = !cache_dir.empty();
    o.cache_dir = cache_dir;
    o.logger = [this](kiln::LogLevel level, const std::string& m) {
      // With a foreign pthreadpool the plugin warns once, when it is loaded:
      // the warning that configuration exists to see.
      if (std::getenv("KILN_TEST_FOREIGN_PTHREADPOOL") && m.find("do not reach this plugin") != std::string::npos) return;
      if (level >= kiln::LogLevel::Warning) warnings += m + "\n";
    };
    return o;
  }
  Result run(kiln::Runtime& rt, const std::string& bytes, bool cached = false) {
    kiln::Model model = kiln::Model::load_from_memory(rt, bytes.data(), bytes.size(), kiln::Model::MemoryLoadOptions{"", cached});
    const auto out = model.run(inputs_of(bytes));
    Result r;
    for (const auto& t : out) {
      const float* data = t.data_as<float>();
      r.outputs.emplace_back(data, data + t.numel());
    }
    r.stats = model.specializations().at(0);
    rt.wait_for_cache();
    return r;
  }
  std::string warnings;
};

void expect_close(const Result& got, const Result& want) {
  ASSERT_EQ(got.outputs.size(), want.outputs.size());
  for (size_t o = 0; o < want.outputs.size(); ++o) {
    ASSERT_EQ(got.outputs[o].size(), want.outputs[o].size()) << "output " << o;
    float scale = 0;
    for (float v : want.outputs[o]) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < want.outputs[o].size(); ++i)
      ASSERT_NEAR(got.outputs[o][i], want.outputs[o][i], 1e-5f * (1 + scale) + 1e-4f * std::fabs(want.outputs[o][i]))
          << "output " << o << " element " << i;
  }
}

class XnnpackOperators : public XnnpackPlugin, public ::testing::WithParamInterface<Param> {};

TEST_P(XnnpackOperators, MatchTheReference) {
  const std::string bytes = model_bytes(*GetParam().c, GetParam().batch);
  kiln::Runtime reference_rt(options(false)), plugin_rt(options(true));
  const Result want = run(reference_rt, bytes);
  const Result got = run(plugin_rt, bytes);
  expect_close(got, want);
  EXPECT_EQ(got.stats.backend, GetParam().c->all_taken ? "xnnpack" : "xnnpack+cpu");
  EXPECT_EQ(warnings, "");
}

INSTANTIATE_TEST_SUITE_P(Models, XnnpackOperators, ::testing::ValuesIn(params()), param_name);

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/kiln-xnnpack-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string path;
};

const OpCase& find_case(const std::string& name) {
  for (const OpCase& c : cases())
    if (name == c.name) return c;
  throw std::runtime_error("no case " + name);
}

TEST_F(XnnpackPlugin, PartitionsComeBackFromTheCacheWithNoCompile) {
  TempDir cache;
  const std::string bytes = model_bytes(find_case("residual_block_and_classifier"), 2);
  Result cold;
  {
    kiln::Runtime rt(options(true, cache.path));
    cold = run(rt, bytes, true);
    EXPECT_EQ(cold.stats.cache, kiln::CacheOutcome::Miss);
    EXPECT_GT(rt.codegen_runs(), 0);
  }
  kiln::Runtime rt(options(true, cache.path));
  const Result warm = run(rt, bytes, true);
  EXPECT_EQ(warm.stats.cache, kiln::CacheOutcome::Hit) << warm.stats.cache_note;
  EXPECT_EQ(warm.stats.backend, "xnnpack");
  EXPECT_EQ(rt.codegen_runs(), 0) << "a warm start compiled on some backend";
  EXPECT_EQ(warm.outputs, cold.outputs);
  EXPECT_EQ(warnings, "");
}

// A compiled partition holds one XNNPACK runtime: runs from several threads take turns on it.
TEST_F(XnnpackPlugin, RunsFromSeveralThreadsAgree) {
  const std::string bytes = model_bytes(find_case("residual_block_and_classifier"), 2);
  kiln::Runtime reference_rt(options(false));
  const Result want = run(reference_rt, bytes);
  kiln::Runtime rt(options(true));
  const kiln::Model model = kiln::Model::load_from_memory(rt, bytes.data(), bytes.size());
  std::vector<std::vector<float>> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) {
        const auto out = model.run(inputs_of(bytes));
        const float* y = out.at(0).data_as<float>();
        got[t].assign(y, y + out.at(0).numel());
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& g : got) expect_close(Result{{g}, {}}, want);
  EXPECT_EQ(model.specializations().at(0).backend, "xnnpack");
}

int thread_count() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// With XNNPACK's pthreadpool calls reaching the plugin, its runs use the
// Runtime's threads and start none; with another pthreadpool loaded first
// (the ctest configuration xnnpack_foreign_pthreadpool preloads Debian's),
// the plugin says so and runs on the calling thread. Either way the
// outputs are right and no thread is started.
TEST_F(XnnpackPlugin, RunsOnTheRuntimeThreadsAndStartsNone) {
  const bool foreign = std::getenv("KILN_TEST_FOREIGN_PTHREADPOOL") != nullptr;
  ASSERT_EQ(foreign, dlsym(RTLD_DEFAULT, "pthreadpool_create") != nullptr)
      << "KILN_TEST_FOREIGN_PTHREADPOOL is set exactly when a pthreadpool is preloaded";
  const std::string bytes = model_bytes(find_case("residual_block_and_classifier"), 4);
  kiln::Runtime reference_rt(options(false));
  const Result want = run(reference_rt, bytes);
  kiln::Runtime rt(options(true, "", 2));
  // The Runtime's own threads first, on a model no plugin takes.
  const std::string cpu_only = model_bytes(find_case("flatten_of_feature_maps_goes_to_cpu"), 4);
  run(rt, cpu_only);
  const int before = thread_count();
  const Result got = run(rt, bytes);
  run(rt, bytes);
  EXPECT_EQ(thread_count(), before);
  expect_close(got, want);
  ASSERT_EQ(rt.plugins().size(), 1u);
  const std::string identity = rt.plugins()[0].identity;
  // The plugin warns when it is loaded (once per process, before any
  // Runtime's logger), and its identity says so: `kiln plugins` shows it.
  EXPECT_EQ(identity.find("one thread") != std::string::npos, foreign) << identity;
  EXPECT_EQ(warnings, "");
}

TEST_F(XnnpackPlugin, IdentityNamesThePluginXnnpackAndTheCpu) {
  kiln::Runtime rt(options(true));
  ASSERT_EQ(rt.plugins().size(), 1u);
  const kiln::PluginInfo p = rt.plugins()[0];
  EXPECT_EQ(p.name, "xnnpack");
  EXPECT_NE(p.identity.find("kiln-xnnpack 1; XNNPACK "), std::string::npos) << p.identity;
#if defined(__x86_64__)
  EXPECT_NE(p.identity.find("sse2"), std::string::npos) << p.identity;
#endif
  EXPECT_NE(std::find(p.operators.begin(), p.operators.end(), "Conv"), p.operators.end());
}

}  // namespace
