// Graph passes keep results and do what they say.
#include <gtest/gtest.h>

#include <algorithm>

#include "backends/reference/reference_executor.hpp"
#include "imported_model.hpp"
#include "random_data.hpp"
#include "runtime/passes/memory_plan.hpp"
#include "runtime/passes/passes.hpp"

using kiln::ir::Tensor;
using kiln::test::ModelBuilder;
using kiln::test::random_values;

TEST(Passes, BatchNormFoldsIntoConvAndKeepsTheResult) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {1, 3, 6, 6}).output("y", onnx::TensorProto::FLOAT, {1, 4, 6, 6});
  b.initializer(ModelBuilder::float_tensor("w", {4, 3, 3, 3}, random_values(108, 1)));
  b.initializer(ModelBuilder::float_tensor("cb", {4}, random_values(4, 2)));
  b.initializer(ModelBuilder::float_tensor("scale", {4}, {1.5f, 0.5f, -1.0f, 2.0f}));
  b.initializer(ModelBuilder::float_tensor("shift", {4}, {0.1f, -0.2f, 0.3f, 0.0f}));
  b.initializer(ModelBuilder::float_tensor("mean", {4}, {0.05f, -0.1f, 0.2f, 0.0f}));
  b.initializer(ModelBuilder::float_tensor("var", {4}, {1.0f, 0.25f, 4.0f, 0.5f}));
  auto& conv = b.node("Conv", {"x", "w", "cb"}, {"c"}, "conv");
  ModelBuilder::attr_ints(conv, "pads", {1, 1, 1, 1});
  b.node("BatchNormalization", {"c", "scale", "shift", "mean", "var"}, {"y"}, "bn");
  auto m = kiln::test::import(b);
  Tensor x = Tensor::from_vector<float>({1, 3, 6, 6}, random_values(108, 3));
  auto before = kiln::ref::run_graph(*m.graph, {{"x", x}})[0].to_float_vector();

  auto spec = kiln::ir::specialize(*m.graph, {{"x", {kiln::ir::DType::Float32, {1, 3, 6, 6}}}}, kiln::ref::constant_evaluator());
  EXPECT_EQ(kiln::passes::fold_batch_norm(*m.graph, spec), 1);
  ASSERT_EQ(m.graph->nodes.size(), 1u);
  EXPECT_EQ(m.graph->nodes[0].op_type, "Conv");
  EXPECT_FALSE(m.graph->initializers.count("w"));  // the unfolded weights are gone
  for (size_t i = 1; i < 3; ++i) {                 // the specialization knows the new weights (backends plan only what it knows)
    const std::string& name = m.graph->nodes[0].inputs[i];
    ASSERT_TRUE(spec.result.values.count(name)) << name;
    EXPECT_EQ(spec.result.values.at(name).shape.concrete(), m.graph->initializers.at(name).dims());
    EXPECT_TRUE(spec.result.constants.count(name)) << name;
  }
  auto after = kiln::ref::run_graph(*m.graph, {{"x", x}})[0].to_float_vector();
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) EXPECT_NEAR(before[i], after[i], 1e-5f) << i;
}

TEST(Passes, BatchNormStaysWhenTheConvOutputIsUsedElsewhere) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {1, 1, 2, 2})
      .output("y", onnx::TensorProto::FLOAT, {})
      .output("c", onnx::TensorProto::FLOAT, {});
  b.initializer(ModelBuilder::float_tensor("w", {1, 1, 1, 1}, {2}));
  for (const char* n : {"scale", "shift", "mean", "var"}) b.initializer(ModelBuilder::float_tensor(n, {1}, {1}));
  b.node("Conv", {"x", "w"}, {"c"});
  b.node("BatchNormalization", {"c", "scale", "shift", "mean", "var"}, {"y"});
  auto m = kiln::test::import(b);
  auto spec = kiln::ir::specialize(*m.graph, {{"x", {kiln::ir::DType::Float32, {1, 1, 2, 2}}}}, kiln::ref::constant_evaluator());
  EXPECT_EQ(kiln::passes::fold_batch_norm(*m.graph, spec), 0);
  EXPECT_EQ(m.graph->nodes.size(), 2u);
}

// DenseNet's pattern: the BatchNormalization reads a Concat, not a Conv.
TEST(Passes, OtherBatchNormsBecomeDepthwiseConvs) {
  ModelBuilder b;
  b.input("a", onnx::TensorProto::FLOAT, {2, 2, 5, 5}).input("v", onnx::TensorProto::FLOAT, {4, 4});
  b.output("y", onnx::TensorProto::FLOAT, {2, 4, 5, 5}).output("z", onnx::TensorProto::FLOAT, {4, 4});
  for (const char* n : {"scale", "shift", "mean"}) b.initializer(ModelBuilder::float_tensor(n, {4}, random_values(4, 7)));
  b.initializer(ModelBuilder::float_tensor("var", {4}, {0.5f, 1.0f, 2.0f, 0.25f}));
  b.node("Mul", {"a", "a"}, {"a2"});
  ModelBuilder::attr_int(b.node("Concat", {"a", "a2"}, {"c"}), "axis", 1);
  auto& bn = b.node("BatchNormalization", {"c", "scale", "shift", "mean", "var"}, {"y"}, "bn");
  ModelBuilder::attr_float(bn, "epsilon", 1e-3f);
  b.node("BatchNormalization", {"v", "scale", "shift", "mean", "var"}, {"z"});  // [N, C]: no spatial axes, stays
  auto m = kiln::test::import(b);
  const Tensor a = Tensor::from_vector<float>({2, 2, 5, 5}, random_values(100, 9));
  const Tensor v = Tensor::from_vector<float>({4, 4}, random_values(16, 10));
  const auto before = kiln::ref::run_graph(*m.graph, {{"a", a}, {"v", v}});

  auto spec =
      kiln::ir::specialize(*m.graph, {{"a", {kiln::ir::DType::Float32, {2, 2, 5, 5}}}, {"v", {kiln::ir::DType::Float32, {4, 4}}}},
                           kiln::ref::constant_evaluator());
  EXPECT_EQ(kiln::passes::fold_batch_norm(*m.graph, spec), 0);
  EXPECT_EQ(kiln::passes::batch_norm_as_conv(*m.graph, spec), 1);
  const kiln::ir::Node* conv = nullptr;
  for (const auto& n : m.graph->nodes)
    if (n.name == "bn") conv = &n;
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->op_type, "Conv");
  ASSERT_NE(conv->attr("group"), nullptr);
  EXPECT_EQ(conv->attr("group")->i, 4);
  ASSERT_EQ(conv->inputs.size(), 3u);
  EXPECT_EQ(m.graph->initializers.at(conv->inputs[1]).dims(), (kiln::ir::Dims{4, 1, 1, 1}));
  EXPECT_TRUE(spec.result.values.count(conv->inputs[1]) && spec.result.values.count(conv->inputs[2]));
  const auto after = kiln::ref::run_graph(*m.graph, {{"a", a}, {"v", v}});
  for (size_t k = 0; k < 2; ++k) {
    const auto want = before[k].to_float_vector(), got = after[k].to_float_vector();
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f) << k << ": " << i;
  }
}

// torchvision's Inception pools with Pad -> AveragePool; TensorFlow
// conversions pad before a Conv.
TEST(Passes, PadsOfZerosBecomeTheReadersPadding) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {1, 2, 5, 5});
  b.initializer(ModelBuilder::int64_tensor("hw1", {8}, {0, 0, 1, 1, 0, 0, 1, 1}));
  b.initializer(ModelBuilder::int64_tensor("uneven", {8}, {0, 0, 0, 2, 0, 0, 1, 0}));
  b.initializer(ModelBuilder::int64_tensor("channels", {8}, {0, 1, 0, 0, 0, 0, 0, 0}));
  b.initializer(ModelBuilder::float_tensor("one", {}, {1}));
  b.initializer(ModelBuilder::float_tensor("w", {3, 2, 3, 3}, random_values(54, 4)));
  b.initializer(ModelBuilder::float_tensor("w3", {3, 3, 3, 3}, random_values(81, 5)));
  struct Case {
    std::string pad;
    std::vector<std::string> pad_inputs;
    std::string op;
    bool folds;
  };
  const std::vector<Case> cases = {
      {"pad_pool", {"x", "hw1"}, "AveragePool", true},  // count_include_pad = 0 before: the zeros counted
      {"pad_conv", {"x", "uneven"}, "Conv", true},      // added to the Conv's own pads
      {"pad_max", {"x", "hw1"}, "MaxPool", false},      // its padding is -inf, not 0
      {"pad_ones", {"x", "hw1", "one"}, "AveragePool", false},
      {"pad_channel", {"x", "channels"}, "Conv", false},  // not a spatial axis
  };
  for (const auto& c : cases) {
    b.node("Pad", c.pad_inputs, {c.pad + "_p"}, c.pad);
    auto& reader = b.node(c.op, {c.pad + "_p"}, {c.pad + "_y"});
    if (c.op == "Conv") reader.add_input(c.pad == "pad_channel" ? "w3" : "w");
    if (c.op != "Conv") ModelBuilder::attr_ints(reader, "kernel_shape", {3, 3});
    if (c.pad == "pad_conv") ModelBuilder::attr_ints(reader, "pads", {1, 1, 1, 1});
    b.output_untyped(c.pad + "_y");
  }
  auto m = kiln::test::import(b);
  const Tensor x = Tensor::from_vector<float>({1, 2, 5, 5}, random_values(50, 6));
  const auto before = kiln::ref::run_graph(*m.graph, {{"x", x}});

  EXPECT_EQ(kiln::passes::fold_pad(*m.graph), 2);
  for (const auto& c : cases) {
    bool pad_left = false;
    for (const auto& n : m.graph->nodes) pad_left |= n.name == c.pad;
    EXPECT_EQ(pad_left, !c.folds) << c.pad;
  }
  for (const auto& n : m.graph->nodes) {
    if (n.op_type == "Conv" && n.inputs[0] == "x") EXPECT_EQ(n.attr("pads")->ints, (std::vector<int64_t>{1, 3, 2, 1}));
    if (n.op_type == "AveragePool" && n.inputs[0] == "x") EXPECT_EQ(n.attr("count_include_pad")->i, 1);
  }
  const auto after = kiln::ref::run_graph(*m.graph, {{"x", x}});
  ASSERT_EQ(after.size(), before.size());
  for (size_t k = 0; k < before.size(); ++k) {
    ASSERT_EQ(after[k].dims(), before[k].dims()) << k;
    const auto want = before[k].to_float_vector(), got = after[k].to_float_vector();
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f) << k << ": " << i;
  }
}

// What Swin, at 224x224, pads to a multiple of its window size is a Pad of zeros.
TEST(Passes, NodesThatChangeNothingBecomeIdentity) {
  ModelBuilder b;
  const std::vector<int64_t> x_dims{2, 3, 4};
  b.input("x", onnx::TensorProto::FLOAT, {2, 3, 4});
  auto i64 = [&](const std::string& name, const std::vector<int64_t>& v) {
    b.initializer(ModelBuilder::int64_tensor(name, {int64_t(v.size())}, v));
  };
  i64("zeros", {0, 0, 0, 0, 0, 0});
  i64("shift", {0, 0, 1, 0, 0, -1});  // same shape, moved by one
  i64("start0", {0}), i64("end_max", {INT64_MAX}), i64("axis2", {2});
  i64("start_last", {-1}), i64("end_min", {INT64_MIN}), i64("step_back", {-1});
  i64("same_shape", x_dims), i64("broadcast_shape", {1, 1, 4}), i64("ones", {1, 1, 1});
  struct Expect {
    const char* op;
    std::vector<std::string> inputs;
    bool no_op;
  };
  const std::vector<std::pair<std::string, Expect>> cases = {
      {"pad_zeros", {"Pad", {"x", "zeros"}, true}},
      {"pad_shift", {"Pad", {"x", "shift"}, false}},
      {"slice_all", {"Slice", {"x", "start0", "end_max", "axis2"}, true}},
      {"slice_reversed", {"Slice", {"x", "start_last", "end_min", "axis2", "step_back"}, false}},
      {"expand_same", {"Expand", {"x", "same_shape"}, true}},
      {"expand_broadcast", {"Expand", {"x", "broadcast_shape"}, true}},
      {"tile_ones", {"Tile", {"x", "ones"}, true}},
      {"cast_float", {"Cast", {"x"}, true}},
      {"transpose_same", {"Transpose", {"x"}, true}},
      {"transpose_default", {"Transpose", {"x"}, false}},  // reverses the axes
  };
  for (const auto& [name, e] : cases) {
    auto& n = b.node(e.op, e.inputs, {name}, name);
    if (name == "cast_float") ModelBuilder::attr_int(n, "to", onnx::TensorProto::FLOAT);
    if (name == "transpose_same") ModelBuilder::attr_ints(n, "perm", {0, 1, 2});
    if (name == "transpose_default")
      b.output(name, onnx::TensorProto::FLOAT, {4, 3, 2});
    else
      b.output(name, onnx::TensorProto::FLOAT, {2, 3, 4});
  }
  auto m = kiln::test::import(b);
  const Tensor x = Tensor::from_vector<float>(x_dims, random_values(24, 3));
  const auto before = kiln::ref::run_graph(*m.graph, {{"x", x}});

  auto spec = kiln::ir::specialize(*m.graph, {{"x", {kiln::ir::DType::Float32, x_dims}}}, kiln::ref::constant_evaluator());
  EXPECT_EQ(kiln::passes::no_ops_as_identity(*m.graph, spec), 7);
  for (const auto& n : m.graph->nodes) {
    bool no_op = false;
    for (const auto& [name, e] : cases) no_op |= name == n.name && e.no_op;
    EXPECT_EQ(n.op_type == "Identity", no_op) << n.name;
    if (no_op) EXPECT_EQ(n.inputs, std::vector<std::string>{"x"}) << n.name;
  }
  const auto after = kiln::ref::run_graph(*m.graph, {{"x", x}});
  ASSERT_EQ(after.size(), before.size());
  for (size_t k = 0; k < before.size(); ++k) {
    EXPECT_EQ(after[k].dims(), before[k].dims()) << k;
    EXPECT_EQ(after[k].to_float_vector(), before[k].to_float_vector()) << k;
  }
}

TEST(Passes, ConstantChainsFoldButOverridableInitializersDoNot) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {2}).input("k", onnx::TensorProto::FLOAT, {2});
  b.output("y", onnx::TensorProto::FLOAT, {2});
  b.initializer(ModelBuilder::float_tensor("a", {2}, {1, 2}));
  b.initializer(ModelBuilder::float_tensor("k", {2}, {10, 10}));  // also an input: the caller may replace it
  b.node("Mul", {"a", "a"}, {"a2"});
  b.node("Add", {"a2", "a"}, {"c"});  // folds: depends on constants only
  b.node("Add", {"c", "k"}, {"ck"});  // stays: k may be overridden
  b.node("Add", {"x", "ck"}, {"y"});
  auto m = kiln::test::import(b);
  EXPECT_EQ(kiln::passes::fold_constants(*m.graph, kiln::ref::constant_evaluator()), 2);
  EXPECT_EQ(m.graph->nodes.size(), 2u);
  EXPECT_EQ(m.graph->initializers.at("c").to_float_vector(), (std::vector<float>{2, 6}));
  EXPECT_EQ(kiln::passes::remove_dead_nodes(*m.graph), 0);
  EXPECT_FALSE(m.graph->initializers.count("a2"));  // no longer used
  auto y = kiln::ref::run_graph(
      *m.graph, {{"x", Tensor::from_vector<float>({2}, {0, 1})}, {"k", Tensor::from_vector<float>({2}, {100, 100})}});
  EXPECT_EQ(y[0].to_float_vector(), (std::vector<float>{102, 107}));
}

TEST(Passes, DeadBranchesAreRemoved) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {2}).output("y", onnx::TensorProto::FLOAT, {2});
  b.node("Relu", {"x"}, {"y"});
  b.node("Exp", {"x"}, {"unused"});
  b.node("Neg", {"unused"}, {"unused2"});
  auto m = kiln::test::import(b);
  EXPECT_EQ(kiln::passes::remove_dead_nodes(*m.graph), 2);
  ASSERT_EQ(m.graph->nodes.size(), 1u);
  EXPECT_EQ(m.graph->nodes[0].op_type, "Relu");
}

// A SqueezeNet fire module and the next one's squeeze: the MaxPool moves
// before the Concat, and the squeeze Conv is split over the Concat's parts.
TEST(Passes, ConcatIsDistributedOverMaxPoolAndConv) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {2, 4, 6, 6}).output("y", onnx::TensorProto::FLOAT, {2, 8, 3, 3});
  b.initializer(ModelBuilder::float_tensor("w1", {16, 4, 1, 1}, random_values(64, 1)));
  b.initializer(ModelBuilder::float_tensor("w3", {16, 4, 3, 3}, random_values(576, 2)));
  b.initializer(ModelBuilder::float_tensor("ws", {8, 32, 1, 1}, random_values(256, 3)));
  b.initializer(ModelBuilder::float_tensor("bs", {8}, random_values(8, 4)));
  b.node("Conv", {"x", "w1"}, {"e1"});
  b.node("Relu", {"e1"}, {"a"});
  auto& e3 = b.node("Conv", {"x", "w3"}, {"e3"});
  ModelBuilder::attr_ints(e3, "pads", {1, 1, 1, 1});
  b.node("Relu", {"e3"}, {"b"});
  auto& cat = b.node("Concat", {"a", "b"}, {"c"});
  ModelBuilder::attr_int(cat, "axis", 1);
  auto& pool = b.node("MaxPool", {"c"}, {"p"});
  ModelBuilder::attr_ints(pool, "kernel_shape", {2, 2});
  ModelBuilder::attr_ints(pool, "strides", {2, 2});
  b.node("Conv", {"p", "ws", "bs"}, {"y"});
  auto m = kiln::test::import(b);
  Tensor x = Tensor::from_vector<float>({2, 4, 6, 6}, random_values(288, 5));
  const auto before = kiln::ref::run_graph(*m.graph, {{"x", x}})[0].to_float_vector();

  auto spec = kiln::ir::specialize(*m.graph, {{"x", {kiln::ir::DType::Float32, {2, 4, 6, 6}}}}, kiln::ref::constant_evaluator());
  EXPECT_EQ(kiln::passes::distribute_concat(*m.graph, spec), 2);
  std::map<std::string, int> ops;
  for (const auto& n : m.graph->nodes) {
    ops[n.op_type]++;
    std::vector<std::string> touched = kiln::ir::values_read(n);
    touched.insert(touched.end(), n.outputs.begin(), n.outputs.end());
    for (const auto& v : touched) {
      auto it = spec.result.values.find(v);
      ASSERT_TRUE(it != spec.result.values.end() && it->second.shape.is_concrete())
          << v << " has no type";  // backends look them up
    }
  }
  EXPECT_EQ(ops, (std::map<std::string, int>{{"Add", 1}, {"Conv", 4}, {"MaxPool", 2}, {"Relu", 2}}));
  EXPECT_EQ(spec.result.values.at(m.graph->nodes[4].outputs[0]).shape.concrete(), (kiln::ir::Dims{2, 16, 3, 3}));
  const auto after = kiln::ref::run_graph(*m.graph, {{"x", x}})[0].to_float_vector();
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) EXPECT_NEAR(before[i], after[i], 1e-4f) << i;
}

// A Conv that widens (a classifier) would write more than the Concat
// copies; a Concat that is also an output must stay.
TEST(Passes, ConcatStaysWhenDistributingDoesNotPay) {
  for (bool widen : {true, false}) {
    ModelBuilder b;
    b.input("a", onnx::TensorProto::FLOAT, {1, 4, 3, 3}).input("b", onnx::TensorProto::FLOAT, {1, 4, 3, 3});
    b.output("y", onnx::TensorProto::FLOAT, {});
    if (!widen) b.output("c", onnx::TensorProto::FLOAT, {});
    const int64_t out = widen ? 32 : 2;
    b.initializer(ModelBuilder::float_tensor("w", {out, 8, 1, 1}, random_values(size_t(out * 8), 1)));
    auto& cat = b.node("Concat", {"a", "b"}, {"c"});
    ModelBuilder::attr_int(cat, "axis", 1);
    b.node("Conv", {"c", "w"}, {"y"});
    auto m = kiln::test::import(b);
    auto spec = kiln::ir::specialize(
        *m.graph, {{"a", {kiln::ir::DType::Float32, {1, 4, 3, 3}}}, {"b", {kiln::ir::DType::Float32, {1, 4, 3, 3}}}},
        kiln::ref::constant_evaluator());
    EXPECT_EQ(kiln::passes::distribute_concat(*m.graph, spec), 0) << (widen ? "widening conv" : "concat is an output");
    EXPECT_EQ(m.graph->nodes.size(), 2u);
  }
}

TEST(MemoryPlan, AChainNeedsTwoBuffersAndResidualsStayAlive) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {"n", 256}).output("y", onnx::TensorProto::FLOAT, {"n", 256});
  b.node("Relu", {"x"}, {"a"});
  b.node("Exp", {"a"}, {"b"});
  b.node("Neg", {"b"}, {"c"});
  b.node("Abs", {"c"}, {"d"});
  b.node("Add", {"d", "a"}, {"y"});  // `a` stays alive across the chain
  auto m = kiln::test::import(b);
  auto spec = kiln::ir::specialize(*m.graph, {{"x", {kiln::ir::DType::Float32, {4, 256}}}});
  auto plan = kiln::passes::plan_memory(*m.graph, spec);
  EXPECT_EQ(kiln::passes::check_memory_plan(plan), "");
  const int64_t one = 4 * 256 * 4;
  EXPECT_EQ(plan.intermediate_bytes, 4 * one);
  EXPECT_EQ(plan.arena_bytes, 3 * one);  // a, plus two buffers alternating along b, c, d
  EXPECT_EQ(plan.slots.count("y"), 0u);  // outputs are the caller's
  EXPECT_NE(plan.slots.at("a").offset, plan.slots.at("d").offset);
}

TEST(MemoryPlan, CheckerCatchesOverlaps) {
  kiln::passes::MemoryPlan plan;
  plan.arena_bytes = 128;
  plan.slots["p"] = {0, 128, 0, 2};
  plan.slots["q"] = {64, 64, 1, 3};
  EXPECT_NE(kiln::passes::check_memory_plan(plan), "");
  plan.slots["q"] = {0, 128, 3, 4};  // same bytes, disjoint lifetimes: fine
  EXPECT_EQ(kiln::passes::check_memory_plan(plan), "");
}

// MnasNet and ShuffleNet end with x.mean([2, 3]).
TEST(Passes, SpatialReductionsBecomeGlobalPools) {
  struct Case {
    std::string name, op;
    std::vector<int64_t> axes;
    int64_t keepdims;
    std::string becomes;
  };
  const std::vector<Case> cases = {
      {"mean_flat", "ReduceMean", {2, 3}, 0, "GlobalAveragePool"},
      {"mean_kept", "ReduceMean", {3, 2}, 1, "GlobalAveragePool"},
      {"max_negative", "ReduceMax", {-1, -2}, 1, "GlobalMaxPool"},
      {"with_channels", "ReduceMean", {1, 2, 3}, 1, ""},
      {"one_axis", "ReduceMean", {3}, 1, ""},
      {"sum", "ReduceSum", {2, 3}, 1, ""},  // not a pool's average
  };
  const kiln::ir::Dims x_dims{2, 3, 4, 5};
  for (int64_t opset : {13, 18}) {
    SCOPED_TRACE("opset " + std::to_string(opset));
    ModelBuilder b(opset);
    b.input("x", onnx::TensorProto::FLOAT, {2, 3, 4, 5});
    for (const auto& c : cases) {
      std::vector<std::string> inputs = {"x"};
      // ReduceSum takes its axes as an input from opset 13, the others from 18.
      if (opset >= 18 || c.op == "ReduceSum") {
        b.initializer(ModelBuilder::int64_tensor(c.name + "_axes", {int64_t(c.axes.size())}, c.axes));
        inputs.push_back(c.name + "_axes");
      }
      auto& n = b.node(c.op, inputs, {c.name}, c.name);
      if (inputs.size() == 1) ModelBuilder::attr_ints(n, "axes", c.axes);
      ModelBuilder::attr_int(n, "keepdims", c.keepdims);
      b.output_untyped(c.name);
    }
    auto m = kiln::test::import(b);
    const Tensor x = Tensor::from_vector<float>(x_dims, random_values(120, 7));
    const auto before = kiln::ref::run_graph(*m.graph, {{"x", x}});
    auto spec = kiln::ir::specialize(*m.graph, {{"x", {kiln::ir::DType::Float32, x_dims}}}, kiln::ref::constant_evaluator());
    EXPECT_EQ(kiln::passes::reduce_as_global_pool(*m.graph, spec), 3);
    for (const auto& c : cases) {
      const auto named =
          std::find_if(m.graph->nodes.begin(), m.graph->nodes.end(), [&](const auto& n) { return n.name == c.name; });
      ASSERT_NE(named, m.graph->nodes.end()) << c.name;
      EXPECT_EQ(named->op_type, c.becomes.empty() ? c.op : c.becomes) << c.name;
    }
    // The kept-dims-less mean: the pool's N x C x 1 x 1, flattened to N x C.
    const auto flatten =
        std::find_if(m.graph->nodes.begin(), m.graph->nodes.end(), [](const auto& n) { return n.op_type == "Flatten"; });
    ASSERT_NE(flatten, m.graph->nodes.end());
    EXPECT_EQ(flatten->outputs[0], "mean_flat");
    EXPECT_EQ(spec.result.values.at(flatten->inputs[0]).shape.concrete(), (kiln::ir::Dims{2, 3, 1, 1}));
    const auto after = kiln::ref::run_graph(*m.graph, {{"x", x}});
    ASSERT_EQ(after.size(), before.size());
    for (size_t k = 0; k < before.size(); ++k) {
      ASSERT_EQ(after[k].dims(), before[k].dims()) << cases[k].name;
      const auto want = before[k].to_float_vector(), got = after[k].to_float_vector();
      for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f) << cases[k].name << ": " << i;
    }
  }
}

namespace {

onnx::TensorProto int8_tensor(const std::string& name, int type, std::vector<int64_t> dims, const std::vector<int32_t>& values) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(type);
  for (int64_t d : dims) t.add_dims(d);
  for (int32_t v : values) t.add_int32_data(v);
  return t;
}

// x -> Q -> DQ -> Conv(DQ(int8 w), float bias) -> Relu -> Q -> DQ -> y, as
// a quantizer writes a convolution; `w_zero` is the weights' zero point.
ModelBuilder qdq_conv(int32_t w_zero) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {1, 2, 4, 4}).output("y", onnx::TensorProto::FLOAT, {1, 3, 4, 4});
  b.initializer(ModelBuilder::float_tensor("s", {}, {0.02f}));
  b.initializer(int8_tensor("z", onnx::TensorProto::UINT8, {}, {128}));
  b.initializer(int8_tensor("zero", onnx::TensorProto::UINT8, {}, {0}));
  std::vector<int32_t> w(3 * 2 * 3 * 3);
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = int32_t(i * 37 % 127) - 63;  // within +-64: fused on every CPU (int8_products_exact)
  b.initializer(int8_tensor("wq", onnx::TensorProto::INT8, {3, 2, 3, 3}, w));
  b.initializer(ModelBuilder::float_tensor("ws", {3}, {0.004f, 0.002f, 0.003f}));
  b.initializer(int8_tensor("wz", onnx::TensorProto::INT8, {3}, {0, w_zero, 0}));
  b.initializer(ModelBuilder::float_tensor("b", {3}, {0.1f, -0.2f, 0.05f}));
  b.node("QuantizeLinear", {"x", "s", "z"}, {"xq"});
  b.node("DequantizeLinear", {"xq", "s", "z"}, {"xd"});
  ModelBuilder::attr_int(b.node("DequantizeLinear", {"wq", "ws", "wz"}, {"w"}), "axis", 0);
  ModelBuilder::attr_ints(b.node("Conv", {"xd", "w", "b"}, {"c"}), "pads", {1, 1, 1, 1});
  b.node("Relu", {"c"}, {"r"});
  b.node("QuantizeLinear", {"r", "s", "zero"}, {"rq"});
  b.node("DequantizeLinear", {"rq", "s", "zero"}, {"y"});
  return b;
}

std::vector<std::string> ops_after_passes(ModelBuilder& b, std::vector<float>* before, std::vector<float>* after) {
  auto m = kiln::test::import(b);
  Tensor x = Tensor::from_vector<float>({1, 2, 4, 4}, random_values(32, 5));
  *before = kiln::ref::run_graph(*m.graph, {{"x", x}})[0].to_float_vector();
  auto spec = kiln::ir::specialize(*m.graph, {{"x", {kiln::ir::DType::Float32, {1, 2, 4, 4}}}}, kiln::ref::constant_evaluator());
  kiln::passes::optimize_specialization(*m.graph, spec, kiln::ref::constant_evaluator());
  *after = kiln::ref::run_graph(*m.graph, {{"x", x}})[0].to_float_vector();
  std::vector<std::string> ops;
  for (const auto& n : m.graph->nodes) ops.push_back(n.op_type);
  return ops;
}

// The passes leave `kept` a float operator and make no `fused` one: the
// outputs do not change at all.
void expect_stays_float(ModelBuilder& b, const std::string& kept, const std::string& fused) {
  std::vector<float> before, after;
  const auto ops = ops_after_passes(b, &before, &after);
  EXPECT_NE(std::find(ops.begin(), ops.end(), kept), ops.end());
  EXPECT_EQ(std::find(ops.begin(), ops.end(), fused), ops.end());
  EXPECT_EQ(before, after);
}

}  // namespace

TEST(Passes, QdqConvWithItsReluBecomesOneQLinearConv) {
  ModelBuilder b = qdq_conv(0);
  std::vector<float> before, after;
  EXPECT_EQ(ops_after_passes(b, &before, &after),
            (std::vector<std::string>{"QuantizeLinear", "QLinearConv", "DequantizeLinear"}));
  ASSERT_EQ(before.size(), after.size());
  // Integer arithmetic against float: at most one step (0.02) apart.
  for (size_t i = 0; i < before.size(); ++i) EXPECT_NEAR(before[i], after[i], 0.0201f) << i;
}

TEST(Passes, QdqConvWithAsymmetricWeightsStaysFloat) {
  ModelBuilder b = qdq_conv(3);
  expect_stays_float(b, "Conv", "QLinearConv");
}

TEST(Passes, MaxPoolBetweenEqualQuantizersPoolsTheQuantizedValues) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {1, 2, 4, 4}).output("y", onnx::TensorProto::FLOAT, {1, 2, 2, 2});
  b.initializer(ModelBuilder::float_tensor("s", {}, {0.02f}));
  b.initializer(int8_tensor("z", onnx::TensorProto::UINT8, {}, {128}));
  b.node("QuantizeLinear", {"x", "s", "z"}, {"xq"});
  b.node("DequantizeLinear", {"xq", "s", "z"}, {"xd"});
  auto& pool = b.node("MaxPool", {"xd"}, {"p"});
  ModelBuilder::attr_ints(pool, "kernel_shape", {2, 2});
  ModelBuilder::attr_ints(pool, "strides", {2, 2});
  b.node("QuantizeLinear", {"p", "s", "z"}, {"pq"});
  b.node("DequantizeLinear", {"pq", "s", "z"}, {"y"});
  std::vector<float> before, after;
  EXPECT_EQ(ops_after_passes(b, &before, &after), (std::vector<std::string>{"QuantizeLinear", "MaxPool", "DequantizeLinear"}));
  EXPECT_EQ(before, after);
}

TEST(Passes, DequantizedAddThatIsQuantizedBecomesQLinearAdd) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {1, 2, 4, 4}).output("y", onnx::TensorProto::FLOAT, {1, 2, 4, 4});
  b.initializer(ModelBuilder::float_tensor("s", {}, {0.02f}));
  b.initializer(ModelBuilder::float_tensor("s2", {}, {0.05f}));
  b.initializer(int8_tensor("z", onnx::TensorProto::UINT8, {}, {128}));
  b.initializer(int8_tensor("zero", onnx::TensorProto::UINT8, {}, {0}));
  b.node("QuantizeLinear", {"x", "s", "z"}, {"xq"});
  b.node("DequantizeLinear", {"xq", "s", "z"}, {"xd"});
  b.node("Add", {"xd", "xd"}, {"sum"});
  b.node("Relu", {"sum"}, {"r"});
  b.node("QuantizeLinear", {"r", "s2", "zero"}, {"rq"});
  b.node("DequantizeLinear", {"rq", "s2", "zero"}, {"y"});
  std::vector<float> before, after;
  EXPECT_EQ(ops_after_passes(b, &before, &after), (std::vector<std::string>{"QuantizeLinear", "QLinearAdd", "DequantizeLinear"}));
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) EXPECT_NEAR(before[i], after[i], 0.0501f) << i;
}

namespace {

// x and the channel maxima of x, quantized and dequantized, added as `add`
// writes them (its operands "xd" and "md"), through a Relu and quantized.
// `axes`: the axes the maxima reduce.
ModelBuilder broadcast_add(const std::vector<std::string>& add, const std::vector<int64_t>& axes) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {1, 2, 4, 4}).output("y", onnx::TensorProto::FLOAT, {1, 2, 4, 4});
  b.initializer(ModelBuilder::float_tensor("s", {}, {0.02f}));
  b.initializer(ModelBuilder::float_tensor("s2", {}, {0.05f}));
  b.initializer(int8_tensor("z", onnx::TensorProto::UINT8, {}, {128}));
  b.initializer(int8_tensor("zero", onnx::TensorProto::UINT8, {}, {0}));
  b.node("QuantizeLinear", {"x", "s", "z"}, {"xq"});
  b.node("DequantizeLinear", {"xq", "s", "z"}, {"xd"});
  ModelBuilder::attr_ints(b.node("ReduceMax", {"x"}, {"m"}), "axes", axes);
  b.node("QuantizeLinear", {"m", "s", "z"}, {"mq"});
  b.node("DequantizeLinear", {"mq", "s", "z"}, {"md"});
  if (add.size() == 2) {
    b.node("Add", add, {"sum"});
  } else {  // both operands broadcast: x's maxima along the other axes
    ModelBuilder::attr_ints(b.node("ReduceMax", {"x"}, {"m2"}), "axes", {1});
    b.node("QuantizeLinear", {"m2", "s", "z"}, {"m2q"});
    b.node("DequantizeLinear", {"m2q", "s", "z"}, {"m2d"});
    b.node("Add", {"md", "m2d"}, {"sum"});
  }
  b.node("Relu", {"sum"}, {"r"});
  b.node("QuantizeLinear", {"r", "s2", "zero"}, {"rq"});
  b.node("DequantizeLinear", {"rq", "s2", "zero"}, {"y"});
  return b;
}

}  // namespace

// A broadcast operand, second or first: QLinearAdd, within a step of the
// float Add.
TEST(Passes, BroadcastDequantizedAddBecomesQLinearAdd) {
  for (const auto& add : {std::vector<std::string>{"xd", "md"}, std::vector<std::string>{"md", "xd"}}) {
    ModelBuilder b = broadcast_add(add, {2, 3});
    std::vector<float> before, after;
    const auto ops = ops_after_passes(b, &before, &after);
    EXPECT_NE(std::find(ops.begin(), ops.end(), "QLinearAdd"), ops.end()) << add[0];
    EXPECT_EQ(std::find(ops.begin(), ops.end(), "Add"), ops.end()) << add[0];
    ASSERT_EQ(before.size(), 32u);
    ASSERT_EQ(before.size(), after.size());
    for (size_t i = 0; i < before.size(); ++i) EXPECT_NEAR(before[i], after[i], 0.0501f) << add[0] << " " << i;
  }
}

// Neither operand has the result's shape: the Add stays float.
TEST(Passes, DequantizedAddLargerThanBothOperandsStaysFloat) {
  ModelBuilder b = broadcast_add({}, {2, 3});
  expect_stays_float(b, "Add", "QLinearAdd");
}

// DQ(x) -> Gemm(DQ(int8 weights, per column), float bias) -> Q, as
// quantizers write a classifier: one QGemm with the bias in int32, within a
// step of the float Gemm.
TEST(Passes, QdqGemmBecomesQGemm) {
  for (int64_t transposed : {0, 1}) {
    ModelBuilder b;
    b.input("x", onnx::TensorProto::FLOAT, {1, 2, 4, 4}).output("y", onnx::TensorProto::FLOAT, {2, 3});
    b.initializer(ModelBuilder::float_tensor("s", {}, {0.02f}));
    b.initializer(int8_tensor("z", onnx::TensorProto::UINT8, {}, {128}));
    b.initializer(int8_tensor("zero", onnx::TensorProto::UINT8, {}, {0}));
    std::vector<int32_t> w(16 * 3);
    for (size_t i = 0; i < w.size(); ++i) w[i] = int32_t(i * 37 % 127) - 63;  // within +-64 (int8_products_exact)
    b.initializer(
        int8_tensor("wq", onnx::TensorProto::INT8, transposed ? std::vector<int64_t>{3, 16} : std::vector<int64_t>{16, 3}, w));
    b.initializer(ModelBuilder::float_tensor("ws", {3}, {0.004f, 0.002f, 0.003f}));
    b.initializer(ModelBuilder::float_tensor("bias", {3}, {0.1f, -0.2f, 0.05f}));
    b.initializer(ModelBuilder::int64_tensor("rows", {2}, {2, 16}));
    b.node("Reshape", {"x", "rows"}, {"x2"});
    b.node("QuantizeLinear", {"x2", "s", "z"}, {"xq"});
    b.node("DequantizeLinear", {"xq", "s", "z"}, {"xd"});
    ModelBuilder::attr_int(b.node("DequantizeLinear", {"wq", "ws"}, {"w"}), "axis", transposed ? 0 : 1);
    ModelBuilder::attr_int(b.node("Gemm", {"xd", "w", "bias"}, {"g"}), "transB", transposed);
    b.node("Relu", {"g"}, {"r"});
    b.node("QuantizeLinear", {"r", "s", "zero"}, {"rq"});
    b.node("DequantizeLinear", {"rq", "s", "zero"}, {"y"});
    std::vector<float> before, after;
    const auto ops = ops_after_passes(b, &before, &after);
    EXPECT_NE(std::find(ops.begin(), ops.end(), "QGemm"), ops.end()) << transposed;
    EXPECT_EQ(std::find(ops.begin(), ops.end(), "Gemm"), ops.end()) << transposed;
    ASSERT_EQ(before.size(), 6u);
    ASSERT_EQ(before.size(), after.size());
    for (size_t i = 0; i < before.size(); ++i) EXPECT_NEAR(before[i], after[i], 0.0201f) << transposed << " " << i;
  }
}
