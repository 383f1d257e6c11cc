// Symbolic shape inference and specialization to concrete shapes.
#include <gtest/gtest.h>

#include "backends/reference/reference_executor.hpp"
#include "imported_model.hpp"
#include "runtime/ir/shape_inference.hpp"

using kiln::ir::DType;
using kiln::ir::Dims;
using kiln::test::ModelBuilder;

TEST(ShapeInference, SymbolicBatchFlowsThroughTheDigitsModel) {
  auto m = kiln::onnx_import::import_model_file(std::string(KILN_SOURCE_DIR) + "/examples/digits/digits.onnx");
  auto r = kiln::ir::infer_shapes(*m.graph);
  EXPECT_EQ(r.values.at("flat").shape.to_string(), "[batch,64]");
  EXPECT_EQ(r.values.at("hidden").shape.to_string(), "[batch,64]");
  EXPECT_EQ(r.values.at("logits").shape.to_string(), "[batch,10]");
}

TEST(ShapeInference, ConvPoolAndBroadcastWithSymbols) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {"N", 3, 32, 32});
  b.input("w", onnx::TensorProto::FLOAT, {16, 3, 3, 3});
  b.input("s", onnx::TensorProto::FLOAT, {16, 1, 1});
  b.output("z", onnx::TensorProto::FLOAT, {});
  auto& conv = b.node("Conv", {"x", "w"}, {"c"}, "conv");
  ModelBuilder::attr_ints(conv, "pads", {1, 1, 1, 1});
  ModelBuilder::attr_ints(conv, "strides", {2, 2});
  b.node("Mul", {"c", "s"}, {"m"});
  auto& pool = b.node("MaxPool", {"m"}, {"p"}, "pool");
  ModelBuilder::attr_ints(pool, "kernel_shape", {2, 2});
  ModelBuilder::attr_ints(pool, "strides", {2, 2});
  b.node("GlobalAveragePool", {"p"}, {"g"});
  b.node("Flatten", {"g"}, {"z"});
  auto r = kiln::ir::infer_shapes(*kiln::test::import(b).graph);
  EXPECT_EQ(r.values.at("c").shape.to_string(), "[N,16,16,16]");
  EXPECT_EQ(r.values.at("p").shape.to_string(), "[N,16,8,8]");
  EXPECT_EQ(r.values.at("z").shape.to_string(), "[N,16]");
}

TEST(ShapeInference, InconsistentShapesNameTheNode) {
  ModelBuilder b;
  b.input("a", onnx::TensorProto::FLOAT, {"batch", 4}).input("b", onnx::TensorProto::FLOAT, {5, 3});
  b.output("y", onnx::TensorProto::FLOAT, {});
  b.node("MatMul", {"a", "b"}, {"y"}, "projection");
  try {
    kiln::ir::infer_shapes(*kiln::test::import(b).graph);
    FAIL();
  } catch (const kiln::ir::Error& e) {
    EXPECT_NE(std::string(e.what()).find("projection"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[batch,4]"), std::string::npos) << e.what();
  }

  ModelBuilder c;
  c.input("a", onnx::TensorProto::FLOAT, {2, 3}).input("b", onnx::TensorProto::FLOAT, {4, 3});
  c.output("y", onnx::TensorProto::FLOAT, {});
  c.node("Add", {"a", "b"}, {"y"}, "sum");
  EXPECT_THROW(kiln::ir::infer_shapes(*kiln::test::import(c).graph), kiln::ir::Error);
}

// The pattern exporters emit for x.view(x.size(0), -1): it must fold to a
// concrete Reshape once the input shape is known.
TEST(ShapeInference, SpecializationFoldsShapeArithmetic) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {"batch", 4, 5});
  b.output("y", onnx::TensorProto::FLOAT, {});
  b.initializer(ModelBuilder::int64_tensor("zero", {}, {0}));
  b.initializer(ModelBuilder::int64_tensor("minus_one", {1}, {-1}));
  b.node("Shape", {"x"}, {"shape"});
  auto& gather = b.node("Gather", {"shape", "zero"}, {"n"});
  ModelBuilder::attr_int(gather, "axis", 0);
  auto& unsq = b.node("Unsqueeze", {"n", "axes"}, {"n1"});
  (void)unsq;
  b.initializer(ModelBuilder::int64_tensor("axes", {1}, {0}));
  auto& cat = b.node("Concat", {"n1", "minus_one"}, {"target"});
  ModelBuilder::attr_int(cat, "axis", 0);
  b.node("Reshape", {"x", "target"}, {"y"}, "flatten_view");
  auto m = kiln::test::import(b);

  auto symbolic = kiln::ir::infer_shapes(*m.graph);
  EXPECT_EQ(symbolic.values.at("shape").shape.to_string(), "[3]");

  auto spec = kiln::ir::specialize(*m.graph, {{"x", {DType::Float32, Dims{7, 4, 5}}}}, kiln::ref::constant_evaluator());
  EXPECT_TRUE(spec.dynamic.empty());
  EXPECT_EQ(spec.result.values.at("y").shape.to_string(), "[7,20]");
  ASSERT_TRUE(spec.result.constants.count("target"));
  EXPECT_EQ(spec.result.constants.at("target").to_int64_vector(), (std::vector<int64_t>{7, -1}));
}

TEST(ShapeInference, SpecializationRejectsShapesThatContradictTheModel) {
  ModelBuilder b;
  b.input("a", onnx::TensorProto::FLOAT, {"batch", 4}).input("b", onnx::TensorProto::FLOAT, {"batch", 4});
  b.output("y", onnx::TensorProto::FLOAT, {});
  b.node("Add", {"a", "b"}, {"y"});
  auto m = kiln::test::import(b);
  auto expect_msg = [&](const std::map<std::string, std::pair<DType, Dims>>& shapes, const std::string& needle) {
    try {
      kiln::ir::specialize(*m.graph, shapes);
      FAIL() << "expected an error containing " << needle;
    } catch (const kiln::ir::Error& e) {
      EXPECT_EQ(e.kind(), kiln::ir::ErrorKind::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_msg({{"a", {DType::Float32, {2, 5}}}, {"b", {DType::Float32, {2, 4}}}}, "[batch,4]");
  expect_msg({{"a", {DType::Float32, {2, 4}}}, {"b", {DType::Float32, {3, 4}}}}, "batch");
  expect_msg({{"a", {DType::Int64, {2, 4}}}, {"b", {DType::Float32, {2, 4}}}}, "float32");
  expect_msg({{"a", {DType::Float32, {2, 4}}}}, "'b'");
  auto ok = kiln::ir::specialize(*m.graph, {{"a", {DType::Float32, {3, 4}}}, {"b", {DType::Float32, {3, 4}}}});
  EXPECT_EQ(ok.result.values.at("y").shape.to_string(), "[3,4]");
}

TEST(ShapeInference, ReshapeKeepsTheSymbolWhenTheRestIsFixed) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {"batch", 3, 4});
  b.output("y", onnx::TensorProto::FLOAT, {});
  b.initializer(ModelBuilder::int64_tensor("to", {2}, {0, -1}));
  b.node("Reshape", {"x", "to"}, {"y"});
  auto r = kiln::ir::infer_shapes(*kiln::test::import(b).graph);
  EXPECT_EQ(r.values.at("y").shape.to_string(), "[batch,12]");
}

TEST(ShapeInference, MatMulBroadcastsBatchDimensions) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {"batch", "seq", 256}).input("w", onnx::TensorProto::FLOAT, {256, 64});
  b.input("v", onnx::TensorProto::FLOAT, {64});
  b.output("y", onnx::TensorProto::FLOAT, {}).output("z", onnx::TensorProto::FLOAT, {});
  b.node("MatMul", {"x", "w"}, {"y"});
  b.node("MatMul", {"y", "v"}, {"z"});
  auto r = kiln::ir::infer_shapes(*kiln::test::import(b).graph);
  EXPECT_EQ(r.values.at("y").shape.to_string(), "[batch,seq,64]");
  EXPECT_EQ(r.values.at("z").shape.to_string(), "[batch,seq]");
}

// Exporters resize to a fixed size with constant scales or sizes; the output
// shape must be what the kernel produces, or everything after it would be
// left to the reference backend.
TEST(ShapeInference, ResizeWithConstantScalesOrSizesAndNonZero) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {"N", 3, 10, 7});
  b.output("by_scales", onnx::TensorProto::FLOAT, {}).output("by_sizes", onnx::TensorProto::FLOAT, {});
  b.output("where", onnx::TensorProto::INT64, {});
  b.initializer(ModelBuilder::float_tensor("scales", {4}, {1, 1, 0.5f, 1.55f}));
  b.initializer(ModelBuilder::float_tensor("no_scales", {0}, {}));
  b.initializer(ModelBuilder::int64_tensor("sizes", {4}, {2, 3, 4, 9}));
  b.node("Resize", {"x", "", "scales"}, {"by_scales"});
  b.node("Resize", {"x", "", "no_scales", "sizes"}, {"by_sizes"});
  b.node("NonZero", {"x"}, {"where"});
  const auto model = kiln::test::import(b);
  auto r = kiln::ir::infer_shapes(*model.graph);
  EXPECT_EQ(r.values.at("by_scales").shape.to_string(), "[N,3,5,10]");
  EXPECT_EQ(r.values.at("by_sizes").shape.to_string(), "[2,3,4,9]");
  EXPECT_EQ(r.values.at("where").shape.to_string(), "[4,?]");

  // The kernels agree.
  kiln::ir::Tensor x(DType::Float32, {2, 3, 10, 7});
  const auto out = kiln::ref::run_graph(*model.graph, {{"x", x}});
  EXPECT_EQ(out[0].dims(), (Dims{2, 3, 5, 10}));
  EXPECT_EQ(out[1].dims(), (Dims{2, 3, 4, 9}));
  EXPECT_EQ(out[2].dims(), (Dims{4, 0}));
}

// ONNX's own NonZero test declares its output 2x3, the count for the one
// input it ships; another input has another count.
TEST(ShapeInference, ADeclaredCountDoesNotFixWhatTheDataDecides) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {2, 2});
  b.output("where", onnx::TensorProto::INT64, {2, 3});
  b.output("y", onnx::TensorProto::FLOAT, {2, 2});
  b.node("NonZero", {"x"}, {"where"});
  b.node("Relu", {"x"}, {"y"});
  const auto m = kiln::test::import(b);
  const auto spec = kiln::ir::specialize(*m.graph, {{"x", {DType::Float32, {2, 2}}}}, kiln::ref::constant_evaluator());
  EXPECT_EQ(spec.result.values.at("where").shape.to_string(), "[2,?]");
  EXPECT_EQ(spec.result.values.at("y").shape.to_string(), "[2,2]");
  const auto out = kiln::ref::run_graph(*m.graph, {{"x", kiln::ir::Tensor::from_vector<float>({2, 2}, {1, 2, 0, 3})}});
  EXPECT_EQ(out[0].dims(), (Dims{2, 3}));
}
