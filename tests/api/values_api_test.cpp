// Model::run_values: models whose inputs and outputs are sequences,
// optionals or string tensors, through the public API only.
#include <gtest/gtest.h>

#include <functional>

#include "kiln/kiln.h"
#include "kiln/kiln.hpp"
#include "model_builder.hpp"

namespace {

using kiln::test::ModelBuilder;
constexpr int kFloat = onnx::TensorProto::FLOAT, kString = onnx::TensorProto::STRING;

std::pair<kiln::ErrorCode, std::string> error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return {e.code(), e.what()};
  }
  return {kiln::ErrorCode::Internal, "(no error)"};
}

kiln::Model load(const kiln::Runtime& rt, const ModelBuilder& b) {
  const std::string bytes = b.bytes();
  return kiln::Model::load_from_memory(rt, bytes.data(), bytes.size());
}

// seq (a sequence of float) and x (float [2]) -> x appended to seq, and the new length.
ModelBuilder append_model() {
  ModelBuilder b(13);
  b.typed_input("seq", ModelBuilder::sequence_type(kFloat)).input("x", kFloat, {2});
  b.typed_output("out", ModelBuilder::sequence_type(kFloat)).output("length", onnx::TensorProto::INT64, {});
  b.node("Relu", {"x"}, {"r"});
  b.node("SequenceInsert", {"seq", "r"}, {"out"});
  b.node("SequenceLength", {"out"}, {"length"});
  return b;
}

// opt (an optional float tensor) -> whether it holds one, and itself.
ModelBuilder optional_model() {
  ModelBuilder b(16);
  b.typed_input("opt", ModelBuilder::optional_type(kFloat)).output("has", onnx::TensorProto::BOOL, {});
  b.typed_output("same", ModelBuilder::optional_type(kFloat));
  b.node("OptionalHasElement", {"opt"}, {"has"});
  b.node("Identity", {"opt"}, {"same"});
  return b;
}

kiln::Tensor floats(kiln::Shape shape, std::vector<float> v) {
  return kiln::Tensor::from_vector<float>(kiln::DType::Float32, std::move(shape), v);
}

std::vector<float> values_of(const kiln::Tensor& t) {
  const float* p = t.data_as<float>();
  return {p, p + t.numel()};
}

}  // namespace

class ValuesApi : public ::testing::TestWithParam<std::string> {};

TEST_P(ValuesApi, SequenceInAndOut) {
  kiln::RuntimeOptions opts;
  opts.backend = GetParam();
  kiln::Runtime rt(opts);
  auto model = load(rt, append_model());
  ASSERT_EQ(model.inputs().size(), 2u);
  EXPECT_EQ(model.inputs()[0].kind, kiln::ValueKind::Sequence);
  EXPECT_EQ(model.inputs()[0].dtype, kiln::DType::Float32);
  EXPECT_EQ(model.inputs()[1].kind, kiln::ValueKind::Tensor);
  EXPECT_EQ(model.outputs()[0].kind, kiln::ValueKind::Sequence);

  auto out = model.run_values({{"seq", kiln::Value::sequence({floats({1}, {7})})}, {"x", floats({2}, {-1, 2})}});
  ASSERT_EQ(out.size(), 2u);
  ASSERT_EQ(out[0].kind(), kiln::ValueKind::Sequence);
  ASSERT_EQ(out[0].tensors().size(), 2u);
  EXPECT_EQ(values_of(out[0].tensors()[0]), (std::vector<float>{7}));
  EXPECT_EQ(values_of(out[0].tensors()[1]), (std::vector<float>{0, 2}));
  EXPECT_EQ(out[1].tensor().data_as<int64_t>()[0], 2);
  // An empty sequence is a sequence too.
  out = model.run_values({{"seq", kiln::Value::sequence({})}, {"x", floats({2}, {3, 4})}});
  EXPECT_EQ(out[1].tensor().data_as<int64_t>()[0], 1);
}

TEST_P(ValuesApi, OptionalHoldingATensorAndEmpty) {
  kiln::RuntimeOptions opts;
  opts.backend = GetParam();
  kiln::Runtime rt(opts);
  auto model = load(rt, optional_model());
  EXPECT_EQ(model.inputs()[0].kind, kiln::ValueKind::Optional);
  EXPECT_EQ(model.inputs()[0].element_kind, kiln::ValueKind::Tensor);

  auto out = model.run_values({{"opt", kiln::Value::optional(floats({3}, {1, 2, 3}))}});
  EXPECT_TRUE(out[0].tensor().data_as<bool>()[0]);
  ASSERT_TRUE(out[1].has_element());
  EXPECT_EQ(values_of(out[1].element().tensor()), (std::vector<float>{1, 2, 3}));

  out = model.run_values({{"opt", kiln::Value::empty_optional()}});
  EXPECT_FALSE(out[0].tensor().data_as<bool>()[0]);
  EXPECT_FALSE(out[1].has_element());
  EXPECT_EQ(error_of([&] { out[1].element(); }).first, kiln::ErrorCode::InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Backends, ValuesApi, ::testing::Values("reference", "cpu"));

TEST(ValuesApi, TensorModelsRunThroughEitherOverload) {
  kiln::Runtime rt;
  ModelBuilder b(13);
  b.input("x", kFloat, {2}).output("y", kFloat, {2});
  b.node("Relu", {"x"}, {"y"});
  auto model = load(rt, b);
  auto by_value = model.run_values({{"x", floats({2}, {-1, 5})}});
  auto by_tensor = model.run({{"x", floats({2}, {-1, 5})}});
  EXPECT_EQ(values_of(by_value[0].tensor()), values_of(by_tensor[0]));
  EXPECT_EQ(values_of(by_tensor[0]), (std::vector<float>{0, 5}));
}

TEST(ValuesApi, WrongKindsAreInvalidArguments) {
  kiln::Runtime rt;
  auto model = load(rt, append_model());
  // The tensor-only run of a model with a sequence says what to use instead.
  auto [code, message] = error_of([&] { model.run({{"x", floats({2}, {1, 2})}}); });
  EXPECT_EQ(code, kiln::ErrorCode::InvalidArgument);
  EXPECT_NE(message.find("'seq' is a sequence"), std::string::npos) << message;
  EXPECT_NE(message.find("run_values"), std::string::npos) << message;

  auto run = [&](kiln::Value seq, kiln::Value x) { return error_of([&] { model.run_values({{"seq", seq}, {"x", x}}); }); };
  const kiln::Value x = floats({2}, {1, 2});
  std::tie(code, message) = run(floats({1}, {1}), x);
  EXPECT_EQ(code, kiln::ErrorCode::InvalidArgument);
  EXPECT_NE(message.find("input 'seq' is a sequence, was given a tensor"), std::string::npos) << message;
  std::tie(code, message) = run(kiln::Value::optional(floats({1}, {1})), x);
  EXPECT_NE(message.find("was given an optional"), std::string::npos) << message;
  std::tie(code, message) = run(kiln::Value::sequence({kiln::Tensor::from_vector<int32_t>(kiln::DType::Int32, {1}, {1})}), x);
  EXPECT_EQ(code, kiln::ErrorCode::InvalidArgument);
  EXPECT_NE(message.find("tensor 0 is int32, expected float32"), std::string::npos) << message;
  std::tie(code, message) = run(kiln::Value::sequence({}), kiln::Value::sequence({}));
  EXPECT_NE(message.find("input 'x' is a tensor, was given a sequence"), std::string::npos) << message;
  std::tie(code, message) = error_of([&] { model.run_values({{"x", x}}); });
  EXPECT_NE(message.find("input 'seq' (a sequence of float32"), std::string::npos) << message;

  auto optional = load(rt, optional_model());
  std::tie(code, message) =
      error_of([&] { optional.run_values({{"opt", kiln::Value::optional(kiln::Value::sequence({floats({1}, {1})}))}}); });
  EXPECT_EQ(code, kiln::ErrorCode::InvalidArgument);
  EXPECT_NE(message.find("an optional of a tensor, was given one of a sequence"), std::string::npos) << message;
  EXPECT_EQ(error_of([] { kiln::Value::optional(kiln::Value::empty_optional()); }).first, kiln::ErrorCode::InvalidArgument);
}

TEST(ValuesApi, StringTensorsHoldStdStrings) {
  kiln::Runtime rt;
  ModelBuilder b(13);
  b.input("x", kString, {3}).output("y", kString, {"n"});
  auto& n = b.node("StringNormalizer", {"x"}, {"y"});
  ModelBuilder::attr_string(n, "case_change_action", "LOWER");
  ModelBuilder::attr_strings(n, "stopwords", {"b"});
  auto model = load(rt, b);
  EXPECT_EQ(model.inputs()[0].dtype, kiln::DType::String);
  kiln::Tensor x(kiln::DType::String, {3});
  std::string* in = x.data_as<std::string>();
  in[0] = "A";
  in[1] = "b";
  in[2] = "C";
  auto y = model.run({{"x", x}});
  ASSERT_EQ(y[0].shape(), (kiln::Shape{2}));
  EXPECT_EQ(y[0].data_as<std::string>()[0], "a");
  EXPECT_EQ(y[0].data_as<std::string>()[1], "c");
  std::vector<kiln::Tensor> buffers{kiln::Tensor(kiln::DType::String, {2})};
  EXPECT_EQ(error_of([&] { model.run({{"x", x}}, buffers); }).first, kiln::ErrorCode::InvalidArgument);
}

TEST(ValuesApi, TheCApiRefusesSequencesAndStringsClearly) {
  kiln_runtime* rt = nullptr;
  ASSERT_EQ(kiln_runtime_create(nullptr, &rt), KILN_OK);
  const std::string bytes = optional_model().bytes();
  kiln_model* model = nullptr;
  ASSERT_EQ(kiln_model_load_from_memory(rt, bytes.data(), bytes.size(), nullptr, &model), KILN_OK);
  kiln_tensor* outputs[2] = {nullptr, nullptr};
  EXPECT_EQ(kiln_model_run(model, nullptr, nullptr, 0, outputs, 2), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kiln_last_error()).find("'opt' is an optional: the C API runs tensors only"), std::string::npos)
      << kiln_last_error();
  kiln_tensor* t = nullptr;
  const int64_t dims[1] = {1};
  EXPECT_EQ(kiln_tensor_create(kiln_dtype(8), dims, 1, &t), KILN_ERROR_INVALID_ARGUMENT);
  kiln_model_destroy(model);
  kiln_runtime_destroy(rt);
}
