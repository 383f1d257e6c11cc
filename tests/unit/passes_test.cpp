// Graph passes keep results and do what they say.
#include <gtest/gtest.h>


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

  EXPECT_EQ(kiln::passes::fold_batch_norm(*m.graph), 1);
  ASSERT_EQ(m.graph->nodes.size(), 1u);
  EXPECT_EQ(m.graph->nodes[0].op_type, "Conv");
  EXPECT_FALSE(m.graph->initializers.count("w"));  // the unfolded weights are gone
  auto after = kiln::ref::run_graph(*m.graph, {{"x", x}})[0].to_float_vector();
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) EXPECT_NEAR(before[i], after[i], 1e-5f) << i;
}

TEST(Passes, BatchNormStaysWhenTheConvOutputIsUsedElsewhere) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {1, 1, 2, 2}).output("y", onnx::TensorProto::FLOAT, {}).output("c", onnx::TensorProto::FLOAT, {});
  b.initializer(ModelBuilder::float_tensor("w", {1, 1, 1, 1}, {2}));
  for (const char* n : {"scale", "shift", "mean", "var"}) b.initializer(ModelBuilder::float_tensor(n, {1}, {1}));
  b.node("Conv", {"x", "w"}, {"c"});
  b.node("BatchNormalization", {"c", "scale", "shift", "mean", "var"}, {"y"});
  auto m = kiln::test::import(b);
  EXPECT_EQ(kiln::passes::fold_batch_norm(*m.graph), 0);
  EXPECT_EQ(m.graph->nodes.size(), 2u);
}

TEST(Passes, ConstantChainsFoldButOverridableInitializersDoNot) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {2}).input("k", onnx::TensorProto::FLOAT, {2});
  b.output("y", onnx::TensorProto::FLOAT, {2});
  b.initializer(ModelBuilder::float_tensor("a", {2}, {1, 2}));
  b.initializer(ModelBuilder::float_tensor("k", {2}, {10, 10}));  // also an input: the caller may replace it
  b.node("Mul", {"a", "a"}, {"a2"});
  b.node("Add", {"a2", "a"}, {"c"});   // folds: depends on constants only
  b.node("Add", {"c", "k"}, {"ck"});   // stays: k may be overridden
  b.node("Add", {"x", "ck"}, {"y"});
  auto m = kiln::test::import(b);
  EXPECT_EQ(kiln::passes::fold_constants(*m.graph, kiln::ref::constant_evaluator()), 2);
  EXPECT_EQ(m.graph->nodes.size(), 2u);
  EXPECT_EQ(m.graph->initializers.at("c").to_float_vector(), (std::vector<float>{2, 6}));
  EXPECT_EQ(kiln::passes::remove_dead_nodes(*m.graph), 0);
  EXPECT_FALSE(m.graph->initializers.count("a2"));  // no longer used
  auto y = kiln::ref::run_graph(*m.graph, {{"x", Tensor::from_vector<float>({2}, {0, 1})},
                                           {"k", Tensor::from_vector<float>({2}, {100, 100})}});
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
