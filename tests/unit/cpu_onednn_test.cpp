// oneDNN convolutions with fused post-ops against the reference backend.
#include <gtest/gtest.h>

#include "backends/cpu/onednn_convolution.hpp"
#include "backends/reference/reference_executor.hpp"
#include "imported_model.hpp"
#include "random_data.hpp"

using kiln::cpu::ConvolutionShape;
using kiln::cpu::PostOp;
using kiln::ir::Tensor;
using kiln::test::ModelBuilder;
using kiln::test::random_values;

namespace {

size_t count(const std::vector<int64_t>& dims) {
  size_t n = 1;
  for (int64_t d : dims) n *= size_t(d);
  return n;
}

// The same computation as ONNX nodes: Conv, then Add(residual) and/or an activation.
std::vector<float> reference(const ConvolutionShape& s, const std::vector<float>& x, const std::vector<float>& w,
                             const std::vector<float>* bias, const std::vector<float>* residual, const std::string& act) {
  ModelBuilder b(13);
  b.graph().add_input()->set_name("x");
  b.output_untyped("y");
  b.initializer(ModelBuilder::float_tensor("w", s.weights, w));
  std::vector<std::string> conv_in{"x", "w"};
  if (bias) {
    b.initializer(ModelBuilder::float_tensor("b", {s.weights[0]}, *bias));
    conv_in.push_back("b");
  }
  std::string cur = act.empty() && !residual ? "y" : "conv";
  auto& conv = b.node("Conv", conv_in, {cur});
  ModelBuilder::attr_ints(conv, "strides", s.strides);
  ModelBuilder::attr_ints(conv, "dilations", s.dilations);
  std::vector<int64_t> pads = s.pads_begin;
  pads.insert(pads.end(), s.pads_end.begin(), s.pads_end.end());
  ModelBuilder::attr_ints(conv, "pads", pads);
  ModelBuilder::attr_int(conv, "group", s.group);
  if (residual) {
    b.graph().add_input()->set_name("r");
    std::string next = act.empty() ? "y" : "sum";
    b.node("Add", {cur, "r"}, {next});
    cur = next;
  }
  if (!act.empty()) b.node(act, {cur}, {"y"});
  auto m = kiln::test::import(b);
  std::map<std::string, Tensor> feeds{{"x", Tensor::from_vector<float>(s.input, x)}};
  if (residual) feeds["r"] = Tensor::from_vector<float>(s.output(), *residual);
  return kiln::ref::run_graph(*m.graph, feeds)[0].to_float_vector();
}

void check(const ConvolutionShape& s, bool with_bias, bool with_residual, const std::string& act, PostOp::Kind kind) {
  auto x = random_values(count(s.input), 1), w = random_values(count(s.weights), 2);
  auto bias = random_values(size_t(s.weights[0]), 3), residual = random_values(count(s.output()), 4);
  std::vector<PostOp> ops;
  if (with_residual) ops.push_back({PostOp::Kind::Sum});
  if (!act.empty()) ops.push_back({kind});
  kiln::cpu::OneDnnConvolution conv(s, w.data(), with_bias ? bias.data() : nullptr, ops);
  std::vector<float> got(count(s.output()));
  conv.run(x.data(), got.data(), with_residual ? residual.data() : nullptr);
  auto want = reference(s, x, w, with_bias ? &bias : nullptr, with_residual ? &residual : nullptr, act);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-4f * (1 + std::fabs(want[i]))) << "element " << i << " via " << conv.implementation();
}

}  // namespace

TEST(OneDnnConvolution, PlainAndStridedAndDilated) {
  check({{1, 3, 9, 9}, {8, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1}, true, false, "", PostOp::Kind::Relu);
  check({{2, 4, 11, 7}, {6, 4, 3, 2}, {2, 1}, {1, 2}, {1, 0}, {0, 1}, 1}, false, false, "", PostOp::Kind::Relu);
  check({{1, 2, 10}, {3, 2, 3}, {2}, {2}, {1}, {1}, 1}, true, false, "", PostOp::Kind::Relu);               // 1-D
  check({{1, 2, 4, 5, 6}, {3, 2, 2, 2, 2}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, 1}, true, false, "", PostOp::Kind::Relu);  // 3-D
}

TEST(OneDnnConvolution, GroupedAndDepthwise) {
  check({{1, 8, 7, 7}, {8, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 4}, true, false, "", PostOp::Kind::Relu);
  check({{1, 16, 12, 12}, {16, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 16}, true, false, "Relu", PostOp::Kind::Relu);
}

TEST(OneDnnConvolution, FusedActivationsAndResidual) {
  const ConvolutionShape s{{1, 4, 8, 8}, {4, 4, 3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1};
  check(s, true, false, "Relu", PostOp::Kind::Relu);
  check(s, true, false, "Sigmoid", PostOp::Kind::Sigmoid);
  check(s, true, false, "Tanh", PostOp::Kind::Tanh);
  check(s, true, false, "HardSwish", PostOp::Kind::HardSwish);
  check(s, true, true, "", PostOp::Kind::Relu);      // Conv + Add
  check(s, true, true, "Relu", PostOp::Kind::Relu);  // the ResNet block tail: Conv + Add + Relu
}

TEST(OneDnnConvolution, InconsistentShapesAreErrors) {
  std::vector<float> w(27);
  EXPECT_THROW(kiln::cpu::OneDnnConvolution({{1, 3, 5, 5}, {1, 3, 3, 3}, {1}, {1, 1}, {0, 0}, {0, 0}, 1}, w.data(), nullptr, {}),
               kiln::ir::Error);
}
