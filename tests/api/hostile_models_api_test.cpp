// Small valid models that crashed Kiln (issue 37), through the public C++ and
// C APIs: loading them must not crash (`kiln inspect` and the C API's load
// only load), and running them is an InvalidModel error naming the node, on
// every backend. The sweep over every operator is hostile_shapes_test.cpp.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/kiln.hpp"
#include "model_builder.hpp"

namespace {

using kiln::test::ModelBuilder;
constexpr int kFloat = onnx::TensorProto::FLOAT;

// x (a float scalar) -> op -> outputs declared without a type, so that
// loading runs shape inference on them (as it does for such files).
std::string scalar_model(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
                         const std::function<void(onnx::NodeProto&)>& attributes = nullptr) {
  ModelBuilder b;
  b.input("x", kFloat, {});
  for (const auto& o : outputs) b.output_untyped(o);
  auto& n = b.node(op, std::move(inputs), outputs, "hostile");
  if (attributes) attributes(n);
  return b.bytes();
}

std::string split_of_a_scalar() { return scalar_model("Split", {"x"}, {"a", "b"}); }
std::string concat_of_scalars() {
  return scalar_model("Concat", {"x", "x"}, {"y"}, [](onnx::NodeProto& n) { ModelBuilder::attr_int(n, "axis", 0); });
}
std::string mvn_of_a_scalar() { return scalar_model("MeanVarianceNormalization", {"x"}, {"y"}); }

// Conv of x [1, 2, 4, 4] with constant weights [2, 2, 3, 3] and `group`.
std::string conv_with_group(int64_t group) {
  ModelBuilder b;
  b.input("x", kFloat, {1, 2, 4, 4}).output_untyped("y");
  b.initializer(ModelBuilder::float_tensor("w", {2, 2, 3, 3}, std::vector<float>(36, 0.5f)));
  ModelBuilder::attr_int(b.node("Conv", {"x", "w"}, {"y"}, "grouped"), "group", group);
  return b.bytes();
}

class HostileModels : public ::testing::TestWithParam<std::string> {
 protected:
  kiln::Runtime runtime() {
    kiln::RuntimeOptions o;
    o.backend = GetParam();
    o.cache = false;
    o.logger = [this](kiln::LogLevel, const std::string& m) { logged += m + "\n"; };
    return kiln::Runtime(o);
  }
  // Loads `bytes` and runs it on x: the error's code and message.
  std::pair<kiln::ErrorCode, std::string> load_and_run(const std::string& bytes, std::vector<int64_t> x_dims) {
    kiln::Runtime rt = runtime();
    kiln::Model model = kiln::Model::load_from_memory(rt, bytes.data(), bytes.size());
    try {
      model.run({{"x", kiln::Tensor(kiln::DType::Float32, x_dims)}});
    } catch (const kiln::Error& e) {
      return {e.code(), e.what()};
    }
    ADD_FAILURE() << "the run succeeded";
    return {};
  }
  std::string logged;
};

TEST_P(HostileModels, SplitOrConcatOfAScalarLoadsAndItsRunIsAnInvalidModel) {
  for (const std::string& bytes : {split_of_a_scalar(), concat_of_scalars()}) {
    const auto [code, message] = load_and_run(bytes, {});
    EXPECT_EQ(code, kiln::ErrorCode::InvalidModel) << message;
    EXPECT_NE(message.find("node 'hostile'"), std::string::npos) << message;
    EXPECT_NE(message.find("scalar (rank 0)"), std::string::npos) << message;
  }
  // Loading inferred the outputs' shapes and said why it could not.
  EXPECT_NE(logged.find("shape inference failed"), std::string::npos) << logged;
}

TEST_P(HostileModels, MeanVarianceNormalizationOfAScalarIsAnInvalidModel) {
  const auto [code, message] = load_and_run(mvn_of_a_scalar(), {});
  EXPECT_EQ(code, kiln::ErrorCode::InvalidModel) << message;
  EXPECT_NE(message.find("(MeanVarianceNormalization)"), std::string::npos) << message;
  EXPECT_NE(message.find("scalar (rank 0)"), std::string::npos) << message;
}

// The reference kernel refused these and the cpu backend ran them as group 1.
TEST_P(HostileModels, ConvWithGroupZeroOrNegativeIsAnInvalidModel) {
  for (int64_t group : {0, -1}) {
    const auto [code, message] = load_and_run(conv_with_group(group), {1, 2, 4, 4});
    EXPECT_EQ(code, kiln::ErrorCode::InvalidModel) << message;
    EXPECT_NE(message.find("node 'grouped' (Conv): group is " + std::to_string(group) + ", expected a positive number of groups"),
              std::string::npos)
        << message;
  }
  // A group that does not divide the channels is refused the same way.
  const auto [code, message] = load_and_run(conv_with_group(3), {1, 2, 4, 4});
  EXPECT_EQ(code, kiln::ErrorCode::InvalidModel) << message;
  EXPECT_NE(message.find("group 3 does not divide the 2 input channels"), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(Backends, HostileModels, ::testing::Values("cpu", "reference"));

// The C API's load, which crashed too: a status and a message, never a crash.
TEST(HostileModelsCApi, SplitOfAScalarLoadsAndItsRunIsAnInvalidModel) {
  kiln_runtime_options options{};
  options.struct_size = sizeof options;
  options.no_cache = 1;
  options.log_level = KILN_LOG_OFF;
  kiln_runtime* rt = nullptr;
  ASSERT_EQ(kiln_runtime_create(&options, &rt), KILN_OK) << kiln_last_error();
  const std::string bytes = split_of_a_scalar();
  kiln_model* model = nullptr;
  ASSERT_EQ(kiln_model_load_from_memory(rt, bytes.data(), bytes.size(), nullptr, &model), KILN_OK) << kiln_last_error();
  kiln_tensor* x = nullptr;
  ASSERT_EQ(kiln_tensor_create(KILN_FLOAT32, nullptr, 0, &x), KILN_OK) << kiln_last_error();
  const char* names[] = {"x"};
  const kiln_tensor* inputs[] = {x};
  kiln_tensor* outputs[2] = {nullptr, nullptr};
  EXPECT_EQ(kiln_model_run(model, names, inputs, 1, outputs, 2), KILN_ERROR_INVALID_MODEL);
  EXPECT_NE(std::string(kiln_last_error()).find("(Split): input is a scalar"), std::string::npos) << kiln_last_error();
  kiln_tensor_destroy(x);
  kiln_model_destroy(model);
  kiln_runtime_destroy(rt);
}

}  // namespace
