// If and Loop through the reference executor, with outer-scope values.
#include <gtest/gtest.h>

#include "backends/reference/reference_executor.hpp"
#include "imported_model.hpp"

using kiln::ir::Tensor;
using kiln::test::ModelBuilder;

namespace {

onnx::GraphProto branch(const std::string& name, const std::string& op) {
  ModelBuilder g;
  g.graph().set_name(name);
  g.output("r", onnx::TensorProto::FLOAT, {2});
  g.node(op, {"x", "y"}, {"r"});  // x and y come from the outer scope
  return g.graph();
}

}  // namespace

TEST(ControlFlow, IfTakesTheBranchChosenAtRunTime) {
  ModelBuilder b;
  b.input("cond", onnx::TensorProto::BOOL, {}).input("x", onnx::TensorProto::FLOAT, {2});
  b.input("y", onnx::TensorProto::FLOAT, {2}).output("out", onnx::TensorProto::FLOAT, {2});
  auto& n = b.node("If", {"cond"}, {"out"}, "choose");
  ModelBuilder::attr_graph(n, "then_branch", branch("then", "Add"));
  ModelBuilder::attr_graph(n, "else_branch", branch("else", "Mul"));
  auto m = kiln::test::import(b);
  Tensor x = Tensor::from_vector<float>({2}, {2, 3}), y = Tensor::from_vector<float>({2}, {4, 5});
  auto yes = kiln::ref::run_graph(*m.graph, {{"cond", Tensor::scalar<bool>(true)}, {"x", x}, {"y", y}});
  EXPECT_EQ(yes[0].to_float_vector(), (std::vector<float>{6, 8}));
  auto no = kiln::ref::run_graph(*m.graph, {{"cond", Tensor::scalar<bool>(false)}, {"x", x}, {"y", y}});
  EXPECT_EQ(no[0].to_float_vector(), (std::vector<float>{8, 15}));
}

// for i in range(M): acc = acc + x; scan output collects each acc.
TEST(ControlFlow, LoopCarriesStateAndCollectsScanOutputs) {
  ModelBuilder body;
  body.graph().set_name("body");
  body.input("i", onnx::TensorProto::INT64, {}).input("cond_in", onnx::TensorProto::BOOL, {});
  body.input("acc", onnx::TensorProto::FLOAT, {2});
  body.output("cond_out", onnx::TensorProto::BOOL, {}).output("acc_out", onnx::TensorProto::FLOAT, {2});
  body.output("each", onnx::TensorProto::FLOAT, {2});
  body.node("Identity", {"cond_in"}, {"cond_out"});
  body.node("Add", {"acc", "x"}, {"acc_out"});
  body.node("Identity", {"acc_out"}, {"each"});

  ModelBuilder b;
  b.input("M", onnx::TensorProto::INT64, {}).input("x", onnx::TensorProto::FLOAT, {2});
  b.input("start", onnx::TensorProto::FLOAT, {2});
  b.output("final", onnx::TensorProto::FLOAT, {2}).output("all", onnx::TensorProto::FLOAT, {"n", 2});
  b.initializer([] {
    onnx::TensorProto t;
    t.set_name("true");
    t.set_data_type(onnx::TensorProto::BOOL);
    t.add_int32_data(1);
    return t;
  }());
  auto& loop = b.node("Loop", {"M", "true", "start"}, {"final", "all"}, "accumulate");
  ModelBuilder::attr_graph(loop, "body", body.graph());
  auto m = kiln::test::import(b);
  auto out = kiln::ref::run_graph(*m.graph, {{"M", Tensor::scalar<int64_t>(3)},
                                             {"x", Tensor::from_vector<float>({2}, {1, 10})},
                                             {"start", Tensor::from_vector<float>({2}, {0, 0})}});
  EXPECT_EQ(out[0].to_float_vector(), (std::vector<float>{3, 30}));
  EXPECT_EQ(out[1].dims(), (kiln::ir::Dims{3, 2}));
  EXPECT_EQ(out[1].to_float_vector(), (std::vector<float>{1, 10, 2, 20, 3, 30}));
}
