// Loops that an attribute or a roi drove with no bound, and sizes that
// wrapped (issue 37), where the sweep's small shapes (hostile_shapes_test.cpp)
// cannot reach: each is now refused before any work, or takes the time its
// data needs, on the reference and cpu backends.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "hostile_runner.hpp"
#include "model_builder.hpp"

namespace {

using kiln::ir::Dims;
using kiln::ir::Tensor;
using kiln::test::config_name;
using kiln::test::Guards;
using kiln::test::ModelBuilder;
using kiln::test::Runner;
constexpr int kOnnxFloat = onnx::TensorProto::FLOAT;
constexpr int kOnnxInt64 = onnx::TensorProto::INT64;

class HostileWork : public ::testing::TestWithParam<std::string> {
 protected:
  std::optional<std::vector<Tensor>> run(const std::string& name, const ModelBuilder& b, std::map<std::string, Tensor> inputs) {
    return runner_.attempt({name, b.bytes(), std::move(inputs)}, &error_);
  }
  // The error of a case expected to be refused.
  std::string refusal(const std::string& name, const ModelBuilder& b, std::map<std::string, Tensor> inputs) {
    error_.clear();
    EXPECT_FALSE(run(name, b, std::move(inputs))) << name << " ran";
    return error_;
  }

  const Guards guards_;
  Runner runner_{GetParam()};
  std::string error_;
};

// A sampling_ratio of 2^31 asked for 2^62 samples per cell and spun for ever;
// so did a roi of 1e30 pixels with the adaptive grid, and a NaN roi read
// outside the map.
TEST_P(HostileWork, RoiAlignSamplesWithinALimit) {
  auto model = [](int64_t sampling_ratio) {
    ModelBuilder b(16);
    b.input("x", kOnnxFloat, {1, 1, 4, 4}).input("rois", kOnnxFloat, {1, 4}).input("batch", kOnnxInt64, {1}).output_untyped("y");
    auto& n = b.node("RoiAlign", {"x", "rois", "batch"}, {"y"}, "align");
    ModelBuilder::attr_int(n, "sampling_ratio", sampling_ratio);
    ModelBuilder::attr_int(n, "output_height", 2);
    ModelBuilder::attr_int(n, "output_width", 2);
    return b;
  };
  auto inputs = [](std::vector<float> roi) {
    std::vector<float> x(16);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(i);
    return std::map<std::string, Tensor>{{"x", Tensor::from_vector<float>({1, 1, 4, 4}, x)},
                                         {"rois", Tensor::from_vector<float>({1, 4}, roi)},
                                         {"batch", Tensor::from_vector<int64_t>({1}, {0})}};
  };
  const auto ran = run("ordinary", model(2), inputs({0, 0, 3, 3}));
  ASSERT_TRUE(ran) << error_;
  EXPECT_EQ((*ran)[0].dims(), (Dims{1, 1, 2, 2}));
  const std::string too_many = "asks for more than 2^36 samples, Kiln's limit";
  EXPECT_NE(refusal("sampling_ratio 2^31", model(int64_t(1) << 31), inputs({0, 0, 3, 3})).find(too_many), std::string::npos)
      << error_;
  EXPECT_NE(refusal("a roi of 1e30 pixels", model(0), inputs({0, 0, 1e30f, 1e30f})).find(too_many), std::string::npos) << error_;
  const std::string not_finite = "node 'align' (RoiAlign): a roi (times spatial_scale) is not finite";
  EXPECT_NE(refusal("a NaN roi", model(2), inputs({0, std::nanf(""), 3, 3})).find(not_finite), std::string::npos) << error_;
}

// max_gram_length and max_skip_count of 2^62 looped 2^62 times; n-grams
// longer than the pool's or a row, and skips wider than a row, match nothing.
TEST_P(HostileWork, TfIdfVectorizerLoopsOnlyOverWhatCanMatch) {
  auto model = [](int64_t max_gram, int64_t max_skip) {
    ModelBuilder b(9);
    b.input("x", kOnnxInt64, {6}).output_untyped("y");
    auto& n = b.node("TfIdfVectorizer", {"x"}, {"y"}, "tfidf");
    ModelBuilder::attr_string(n, "mode", "TF");
    ModelBuilder::attr_int(n, "min_gram_length", 1);
    ModelBuilder::attr_int(n, "max_gram_length", max_gram);
    ModelBuilder::attr_int(n, "max_skip_count", max_skip);
    ModelBuilder::attr_ints(n, "ngram_counts", {0, 1});  // the unigram 1, then the bigram (1, 2)
    ModelBuilder::attr_ints(n, "ngram_indexes", {0, 1});
    ModelBuilder::attr_ints(n, "pool_int64s", {1, 1, 2});
    return b;
  };
  const std::map<std::string, Tensor> x = {{"x", Tensor::from_vector<int64_t>({6}, {1, 2, 1, 2, 1, 2})}};
  // 1 three times; (1, 2) three times adjacent, twice two apart, once four apart.
  for (const int64_t huge : {int64_t(1) << 62, std::numeric_limits<int64_t>::max()}) {
    const auto y = run("max_gram_length and max_skip_count " + std::to_string(huge), model(huge, huge), x);
    ASSERT_TRUE(y) << error_;
    EXPECT_EQ((*y)[0].to_float_vector(), (std::vector<float>{3, 6}));
  }
}

// A dft_length far beyond the signal pads it with zeros: the DFT took
// dft_length^2 steps (2^40 here) instead of output x signal, and one of 2^62
// was a vector too large to make instead of a kiln error.
TEST_P(HostileWork, DftOfALongLengthTakesTimeForTheSignalOnly) {
  auto model = [](int64_t length) {
    ModelBuilder b(17);
    b.input("x", kOnnxFloat, {1, 4, 1}).output_untyped("y");
    b.initializer(ModelBuilder::int64_tensor("length", {}, {length}));
    ModelBuilder::attr_int(b.node("DFT", {"x", "length"}, {"y"}, "dft"), "onesided", 1);
    return b;
  };
  const std::map<std::string, Tensor> x = {{"x", Tensor::from_vector<float>({1, 4, 1}, {1, 2, 3, 4})}};
  const auto y = run("dft_length 2^20", model(int64_t(1) << 20), x);
  ASSERT_TRUE(y) << error_;
  ASSERT_EQ((*y)[0].dims(), (Dims{1, (int64_t(1) << 19) + 1, 2}));
  EXPECT_EQ((*y)[0].as_double(0), 10);  // bin 0: the sum
  EXPECT_NE(refusal("dft_length 2^62", model(int64_t(1) << 62), x).find("too many elements"), std::string::npos) << error_;
}

// Scales of 1e30 or infinity made the resized size an undefined conversion
// to int64 (in practice INT64_MIN, then an error about a negative dimension).
TEST_P(HostileWork, ResizeScalesBeyondAnySizeAreRefused) {
  for (const float scale : {1e30f, HUGE_VALF}) {
    ModelBuilder b(13);
    b.input("x", kOnnxFloat, {1, 1, 2, 2}).output_untyped("y");
    b.initializer(ModelBuilder::float_tensor("scales", {4}, {1, 1, scale, 1}));
    b.node("Resize", {"x", "", "scales"}, {"y"}, "resize");
    const std::string error = refusal("scales 1e30", b, {{"x", Tensor::from_vector<float>({1, 1, 2, 2}, {1, 2, 3, 4})}});
    EXPECT_NE(error.find("node 'resize' (Resize): scales holds"), std::string::npos) << error;
    EXPECT_NE(error.find("larger than 2^62"), std::string::npos) << error;
  }
}

// Edge padding of 2^40 on each side: the interpreter's kernel grew a table
// of 2^41 source coordinates before it made the output that cannot exist.
TEST_P(HostileWork, EdgePaddingIsRefusedBeforeItsTablesGrow) {
  ModelBuilder b(13);
  b.input("x", kOnnxFloat, {1, 4}).input("pads", kOnnxInt64, {4}).output_untyped("y");
  ModelBuilder::attr_string(b.node("Pad", {"x", "pads"}, {"y"}, "pad"), "mode", "edge");
  const int64_t far = int64_t(1) << 40;
  const std::string error = refusal(
      "pads 2^40", b,
      {{"x", Tensor::from_vector<float>({1, 4}, {1, 2, 3, 4})}, {"pads", Tensor::from_vector<int64_t>({4}, {0, far, 0, far})}});
  // The output's own allocation (a byte count), not a table's.
  EXPECT_NE(error.find("node 'pad' (Pad): out of memory allocating 8796093022224 bytes"), std::string::npos) << error;
}

// Resize to 2^31 x 2^31 floats (2^64 bytes) between two nodes: its plan of
// taps (made while compiling, on the cpu backend) grew until it could not.
TEST_P(HostileWork, AResizeToMoreThan2Pow62BytesIsRefusedBeforeItsPlan) {
  ModelBuilder b(13);
  b.input("x", kOnnxFloat, {1, 1, 2, 2}).output_untyped("y");
  b.initializer(ModelBuilder::int64_tensor("sizes", {4}, {1, 1, int64_t(1) << 31, int64_t(1) << 31}));
  b.node("Resize", {"x", "", "", "sizes"}, {"big"}, "resize");
  b.node("ReduceMax", {"big"}, {"y"}, "max");
  const std::string error = refusal("2^64 bytes", b, {{"x", Tensor::from_vector<float>({1, 1, 2, 2}, {1, 2, 3, 4})}});
  EXPECT_NE(
      error.find("node 'resize' (Resize): the resized output of shape 1x1x2147483648x2147483648 would take more than 2^62 bytes"),
      std::string::npos)
      << error;
}

// Pads of 2^30 around a 2x2 image: a convolution output of 2^62 floats
// (2^64 bytes) between two nodes. The cpu backend planned it in a buffer
// whose size had wrapped, and its convolution wrote past it.
TEST_P(HostileWork, AnIntermediateOfMoreThan2Pow62BytesIsRefused) {
  ModelBuilder b(13);
  b.input("x", kOnnxFloat, {1, 1, 2, 2}).output_untyped("y");
  b.initializer(ModelBuilder::float_tensor("w", {1, 1, 1, 1}, {2}));
  const int64_t pad = (int64_t(1) << 30) - 1;
  ModelBuilder::attr_ints(b.node("Conv", {"x", "w"}, {"big"}, "conv"), "pads", {pad, pad, pad, pad});
  b.node("ReduceMax", {"big"}, {"y"}, "max");
  const std::string error = refusal("2^64 bytes", b, {{"x", Tensor::from_vector<float>({1, 1, 2, 2}, {1, 2, 3, 4})}});
  EXPECT_NE(error.find("node 'conv' (Conv): "), std::string::npos) << error;
  EXPECT_NE(error.find("out of memory allocating"), std::string::npos) << error;
}

// Steps of INT64_MAX and INT64_MIN take one element; their counts overflowed
// (to -1: a negative dimension, or to nonsense).
TEST_P(HostileWork, SliceStepsAtTheInt64ExtremesTakeOneElement) {
  for (const int64_t step : {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}) {
    ModelBuilder b(13);
    b.input("x", kOnnxFloat, {3}).output_untyped("y");
    const bool forward = step > 0;
    b.initializer(ModelBuilder::int64_tensor("starts", {1}, {forward ? 0 : -1}));
    const int64_t beyond = forward ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
    b.initializer(ModelBuilder::int64_tensor("ends", {1}, {beyond}));
    b.initializer(ModelBuilder::int64_tensor("axes", {1}, {0}));
    b.initializer(ModelBuilder::int64_tensor("steps", {1}, {step}));
    b.node("Slice", {"x", "starts", "ends", "axes", "steps"}, {"y"}, "slice");
    const auto y = run("step " + std::to_string(step), b, {{"x", Tensor::from_vector<float>({3}, {1, 2, 3})}});
    ASSERT_TRUE(y) << error_;
    EXPECT_EQ((*y)[0].to_float_vector(), (std::vector<float>{forward ? 1.0f : 3.0f})) << std::to_string(step);
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, HostileWork, ::testing::Values("reference", "cpu"), config_name);

}  // namespace
