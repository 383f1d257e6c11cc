// Symbolic shape inference and specialization to concrete shapes.
#include <gtest/gtest.h>

#include <set>

#include "backends/reference/kernel_registry.hpp"
#include "backends/reference/reference_executor.hpp"
#include "imported_model.hpp"
#include "runtime/ir/shape_inference.hpp"
#include "runtime/ir/shape_rules/shape_rule.hpp"

using kiln::ir::Dims;
using kiln::ir::DType;
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

// Operators whose outputs used to take the model's declared shape: with a
// symbolic batch that is not static, so these nodes and everything after
// them were left to the interpreter (a U-Net's decoder ran 8x slower). The
// inferred shapes must be what the reference kernels produce.
TEST(ShapeInference, TransposedConvolutionsRecurrentLayersAndRearrangements) {
  ModelBuilder b(14);
  b.input("x", onnx::TensorProto::FLOAT, {"N", 4, 5, 7});
  b.input("seq", onnx::TensorProto::FLOAT, {"N", "T", 3});
  for (const char* out : {"up", "same", "fixed", "y", "y_h", "y_c", "g", "g_h", "space", "depth", "top", "top_i"})
    b.output(out, onnx::TensorProto::FLOAT, {});
  b.initializer(ModelBuilder::float_tensor("w", {4, 3, 3, 2}, std::vector<float>(72, 0.1f)));
  b.initializer(ModelBuilder::float_tensor("lstm_w", {2, 4 * 6, 3}, std::vector<float>(144, 0.1f)));
  b.initializer(ModelBuilder::float_tensor("lstm_r", {2, 4 * 6, 6}, std::vector<float>(288, 0.1f)));
  b.initializer(ModelBuilder::float_tensor("gru_w", {1, 3 * 5, 3}, std::vector<float>(45, 0.1f)));
  b.initializer(ModelBuilder::float_tensor("gru_r", {1, 3 * 5, 5}, std::vector<float>(75, 0.1f)));
  b.initializer(ModelBuilder::int64_tensor("k", {1}, {2}));
  auto& up = b.node("ConvTranspose", {"x", "w"}, {"up"});
  ModelBuilder::attr_ints(up, "strides", {2, 3});
  ModelBuilder::attr_ints(up, "pads", {1, 0, 0, 2});
  ModelBuilder::attr_ints(up, "output_padding", {1, 2});
  ModelBuilder::attr_ints(up, "dilations", {2, 1});
  ModelBuilder::attr_int(up, "group", 2);  // 3 output channels per group
  auto& same = b.node("ConvTranspose", {"x", "w"}, {"same"});
  ModelBuilder::attr_ints(same, "strides", {2, 2});
  ModelBuilder::attr_string(same, "auto_pad", "SAME_UPPER");
  auto& fixed = b.node("ConvTranspose", {"x", "w"}, {"fixed"});
  ModelBuilder::attr_ints(fixed, "strides", {3, 3});
  ModelBuilder::attr_ints(fixed, "output_shape", {16, 20});
  auto& lstm = b.node("LSTM", {"seq", "lstm_w", "lstm_r"}, {"y", "y_h", "y_c"});
  ModelBuilder::attr_string(lstm, "direction", "bidirectional");
  ModelBuilder::attr_int(lstm, "layout", 1);
  auto& gru = b.node("GRU", {"seq", "gru_w", "gru_r"}, {"g", "g_h"});
  ModelBuilder::attr_int(gru, "hidden_size", 5);
  ModelBuilder::attr_int(b.node("DepthToSpace", {"x"}, {"space"}), "blocksize", 2);
  ModelBuilder::attr_int(b.node("SpaceToDepth", {"space"}, {"depth"}), "blocksize", 2);
  ModelBuilder::attr_int(b.node("TopK", {"x", "k"}, {"top", "top_i"}), "axis", 1);
  const auto model = kiln::test::import(b);

  auto r = kiln::ir::infer_shapes(*model.graph);
  auto shape = [&](const std::string& name) { return r.values.at(name).shape.to_string(); };
  EXPECT_EQ(shape("up"), "[N,6,13,20]");
  EXPECT_EQ(shape("same"), "[N,3,10,14]");
  EXPECT_EQ(shape("fixed"), "[N,3,16,20]");
  EXPECT_EQ(shape("y"), "[N,T,2,6]");  // layout 1: batch first
  EXPECT_EQ(shape("y_h"), "[N,2,6]");
  EXPECT_EQ(shape("y_c"), "[N,2,6]");
  EXPECT_EQ(shape("g"), "[N,1,T,5]");  // layout 0: X is read as [T, N, 3]
  EXPECT_EQ(shape("g_h"), "[1,T,5]");
  EXPECT_EQ(shape("space"), "[N,1,10,14]");
  EXPECT_EQ(shape("depth"), "[N,4,5,7]");
  EXPECT_EQ(shape("top"), "[N,2,5,7]");
  EXPECT_EQ(r.values.at("top_i").dtype, DType::Int64);

  const auto spec =
      kiln::ir::specialize(*model.graph, {{"x", {DType::Float32, {2, 4, 5, 7}}}, {"seq", {DType::Float32, {2, 3, 3}}}},
                           kiln::ref::constant_evaluator());
  const auto out = kiln::ref::run_graph(*model.graph, {{"x", kiln::ir::Tensor(DType::Float32, {2, 4, 5, 7})},
                                                       {"seq", kiln::ir::Tensor(DType::Float32, {2, 3, 3})}});
  ASSERT_EQ(out.size(), model.graph->outputs.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const auto& name = model.graph->outputs[i].name;
    EXPECT_EQ(spec.result.values.at(name).shape.to_string(), kiln::ir::Shape::from_dims(out[i].dims()).to_string()) << name;
  }
}

// Both found by the importer's fuzzer (tests/fuzz/corpus/onnx_import/regress-*).
TEST(ShapeInference, AShapeNodeWithoutItsInputIsAnError) {
  ModelBuilder b;
  b.output("s", onnx::TensorProto::INT64, {});
  b.node("Shape", {}, {"s"}, "shape");
  EXPECT_THROW(kiln::ir::infer_shapes(*kiln::test::import(b).graph), kiln::ir::Error);
}

TEST(ShapeInference, AFloatCountBeyondInt64IsAnErrorNamingTheValue) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {2, 3});
  b.output("y", onnx::TensorProto::FLOAT, {});
  b.initializer(ModelBuilder::float_tensor("shape", {2}, {1e30f, 1.0f}));
  b.node("Reshape", {"x", "shape"}, {"y"}, "reshape");
  try {
    kiln::ir::infer_shapes(*kiln::test::import(b).graph);
    FAIL() << "a shape of 1e30 was accepted";
  } catch (const kiln::ir::Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit in an int64"), std::string::npos) << e.what();
  }
}

// Every operator the reference backend runs has a shape rule, or is listed
// here with the reason it has none; a listed one that gains a rule must leave
// the list. Without a rule, a node's outputs take the model's annotations.
TEST(ShapeInference, EveryReferenceOperatorHasARuleOrASaidReasonNotTo) {
  const std::set<std::string> without_rule = {
      // Constants: the importer turns Constant into an initializer, and the
      // rest are folded when their inputs are constant.
      "Constant", "EyeLike", "Range", "BlackmanWindow", "HammingWindow", "HannWindow", "MelWeightMatrix",
      // Its subgraph decides (If and Loop have a rule for the kind of value
      // they pass on; their dtypes and shapes come from the annotations).
      "Scan",
      // The data decides the output's length.
      "Compress", "NonMaxSuppression", "Unique",
      // No rule yet.
      "CenterCropPad", "Col2Im", "DFT", "Det", "Einsum", "GatherND", "GridSample", "MaxUnpool", "OneHot", "RoiAlign", "STFT",
      "TfIdfVectorizer"};
  const auto& rules = kiln::ir::shape_rules::ShapeRuleTable::instance();
  const auto& kernels = kiln::ref::KernelRegistry::instance();
  std::vector<std::string> missing, listed_with_rule, listed_not_run;
  for (const std::string& op : kernels.op_types())
    if (!rules.find(op) && !without_rule.count(op)) missing.push_back(op);
  for (const std::string& op : without_rule) {
    if (rules.find(op)) listed_with_rule.push_back(op);
    if (!kernels.find(op)) listed_not_run.push_back(op);
  }
  EXPECT_EQ(missing, std::vector<std::string>{});
  EXPECT_EQ(listed_with_rule, std::vector<std::string>{});
  EXPECT_EQ(listed_not_run, std::vector<std::string>{});
}
