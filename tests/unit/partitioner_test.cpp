// The partitioner over the real backends: which nodes go where, what each
// part reads and hands on, and the error when no backend takes a node.
#include <gtest/gtest.h>

#include "backends/backend.hpp"
#include "backends/partitioner.hpp"
#include "backends/reference/reference_executor.hpp"
#include "imported_model.hpp"
#include "runtime/ir/shape_inference.hpp"

namespace {

using kiln::test::ModelBuilder;

std::vector<std::string> names(const std::vector<kiln::ir::ValueInfo>& values) {
  std::vector<std::string> out;
  for (const auto& v : values) out.push_back(v.name);
  return out;
}
std::vector<std::string> ops(const kiln::ir::Graph& g) {
  std::vector<std::string> out;
  for (const auto& n : g.nodes) out.push_back(n.op_type);
  return out;
}

// x -> Relu -> a -> NonZero -> Cast -> ReduceSum -> s;  y = a * s;  z = x @ w
kiln::ir::Model data_dependent_model() {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {2, 3}).input("w", onnx::TensorProto::FLOAT, {3, 4});
  b.output("y", onnx::TensorProto::FLOAT, {2, 3}).output("z", onnx::TensorProto::FLOAT, {2, 4});
  b.initializer(ModelBuilder::float_tensor("w", {3, 4}, std::vector<float>(12, 1.0f)));
  b.node("Relu", {"x"}, {"a"});
  b.node("NonZero", {"a"}, {"where"});
  ModelBuilder::attr_int(b.node("Cast", {"where"}, {"where_f"}), "to", onnx::TensorProto::FLOAT);
  b.node("ReduceSum", {"where_f"}, {"s"});
  b.node("Mul", {"a", "s"}, {"y"});
  b.node("MatMul", {"x", "w"}, {"z"});
  return kiln::test::import(b);
}

kiln::ir::Specialization specialize(const kiln::ir::Model& m) {
  return kiln::ir::specialize(*m.graph, {{"x", {kiln::ir::DType::Float32, {2, 3}}}}, kiln::ref::constant_evaluator());
}

TEST(Partitioner, DataDependentShapesGoToTheReferenceBackendBetweenTwoCompiledParts) {
  auto cpu = kiln::backends::make_backend("cpu", 1), ref = kiln::backends::make_backend("reference", 1);
  const auto model = data_dependent_model();
  const auto parts = kiln::backends::partition(*model.graph, specialize(model), {cpu.get(), ref.get()});
  ASSERT_EQ(parts.size(), 3u);

  EXPECT_EQ(parts[0].backend, cpu.get());
  EXPECT_EQ(ops(*parts[0].graph), (std::vector<std::string>{"Relu", "MatMul"}));
  EXPECT_EQ(names(parts[0].graph->inputs), (std::vector<std::string>{"x", "w"}));
  EXPECT_EQ(parts[0].graph->initializers.count("w"), 1u) << "w's default goes with the part that reads it";
  EXPECT_EQ(names(parts[0].graph->outputs), (std::vector<std::string>{"a", "z"}));
  // Handed-on values keep their concrete shapes.
  EXPECT_TRUE(parts[0].graph->outputs[0].shape.is_concrete());

  EXPECT_EQ(parts[1].backend, ref.get());
  EXPECT_EQ(ops(*parts[1].graph), (std::vector<std::string>{"NonZero", "Cast", "ReduceSum"}));
  EXPECT_EQ(names(parts[1].graph->inputs), (std::vector<std::string>{"a"}));
  EXPECT_EQ(names(parts[1].graph->outputs), (std::vector<std::string>{"s"}));

  EXPECT_EQ(parts[2].backend, cpu.get());
  EXPECT_EQ(ops(*parts[2].graph), (std::vector<std::string>{"Mul"}));
  EXPECT_EQ(names(parts[2].graph->inputs), (std::vector<std::string>{"a", "s"}));
  EXPECT_EQ(names(parts[2].graph->outputs), (std::vector<std::string>{"y"}));
}

TEST(Partitioner, AStaticGraphIsOnePartCompiledWhole) {
  auto cpu = kiln::backends::make_backend("cpu", 1), ref = kiln::backends::make_backend("reference", 1);
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {2, 3}).output("y", onnx::TensorProto::FLOAT, {2, 3});
  b.node("Relu", {"x"}, {"r"});
  b.node("Erf", {"r"}, {"y"});  // run by its reference kernel inside the compiled part
  const auto model = kiln::test::import(b);
  const auto spec = specialize(model);
  ASSERT_EQ(kiln::backends::partition(*model.graph, spec, {cpu.get(), ref.get()}).size(), 1u);
  auto compiled = kiln::backends::compile_partitioned(model.graph, spec, {cpu.get(), ref.get()}, {});
  EXPECT_EQ(compiled.backends, "cpu");
  EXPECT_EQ(compiled.parts, 1);
  EXPECT_NO_THROW(compiled.executable->save()) << "a whole-graph executable is the backend's own and can be cached";
}

TEST(Partitioner, ANodeNoBackendTakesIsNamed) {
  auto cpu = kiln::backends::make_backend("cpu", 1);
  const auto model = data_dependent_model();
  try {
    kiln::backends::partition(*model.graph, specialize(model), {cpu.get()});
    FAIL() << "no error";
  } catch (const kiln::ir::Error& e) {
    EXPECT_EQ(e.kind(), kiln::ir::ErrorKind::Unsupported);
    const std::string m = e.what();
    EXPECT_NE(m.find("NonZero"), std::string::npos) << m;
    EXPECT_NE(m.find("tried 'cpu'"), std::string::npos) << m;
  }
}

TEST(Partitioner, SeveralPartsRunInOrderAndCannotBeCached) {
  auto cpu = kiln::backends::make_backend("cpu", 1), ref = kiln::backends::make_backend("reference", 1);
  const auto model = data_dependent_model();
  auto compiled = kiln::backends::compile_partitioned(model.graph, specialize(model), {cpu.get(), ref.get()}, {});
  EXPECT_EQ(compiled.backends, "cpu+reference");
  EXPECT_EQ(compiled.parts, 3);
  const auto x = kiln::ir::Tensor::from_vector<float>({2, 3}, {1, -2, 3, 0, 5, -1});
  const auto got = compiled.executable->run({{"x", x}});
  const auto want = kiln::ref::run_graph(*model.graph, {{"x", x}});
  ASSERT_EQ(got.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    ASSERT_EQ(got[k].dims(), want[k].dims());
    EXPECT_EQ(got[k].to_float_vector(), want[k].to_float_vector()) << "output " << k;
  }
  const auto stats = compiled.executable->stats();
  EXPECT_EQ(stats.nodes, 6);
  EXPECT_EQ(stats.compiled_nodes, 3);
  EXPECT_EQ(stats.fallback_nodes, 3);
  try {
    compiled.executable->save();
    FAIL() << "saved";
  } catch (const kiln::ir::Error& e) {
    EXPECT_EQ(e.kind(), kiln::ir::ErrorKind::Unsupported);
  }
}

}  // namespace
