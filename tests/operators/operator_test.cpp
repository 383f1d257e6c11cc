// Operator tests written once and run on every backend that claims the
// operator: each backend's output on random data is held against the
// reference executor (the oracle), and for the cases a backend is meant to
// compile, its stats must show that it did (a lowering that silently falls
// back to the reference kernels would otherwise pass unnoticed).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "operator_case.hpp"

namespace {

using namespace kiln::test::operators;

// ---- Conv ----------------------------------------------------------------------

TEST_P(OperatorTest, Conv2d) {
  Case c({"Conv"});
  c.input("x", {1, 3, 8, 8}).weight("w", {4, 3, 3, 3}).weight("b", {4}).output("y");
  c.node("Conv", {"x", "w", "b"}, {"y"}, {{"pads", {1, 1, 1, 1}}});
  run(c);
}

// Weights and bias as graph inputs (a model exported without its
// parameters, or one that computes them): reordered on every run. Grouped,
// with a Relu fused; and 1-D without a bias.
TEST_P(OperatorTest, ConvWeightsAsGraphInputs) {
  Case c({"Conv"});
  c.input("x", {2, 4, 7, 6}).input("w", {6, 2, 3, 3}).input("b", {6}).input("t", {1, 3, 9}).input("wt", {5, 3, 2});
  c.output("y").output("line");
  c.node("Conv", {"x", "w", "b"}, {"c"}, {{"pads", {1, 1, 1, 1}}, {"group", int64_t(2)}, {"strides", {2, 1}}});
  c.node("Relu", {"c"}, {"y"});
  c.node("Conv", {"t", "wt"}, {"line"}, {{"dilations", {2}}});
  run(c);
}

// ---- ConvTranspose (oneDNN's deconvolution; the portable kernels have none) ------

// ONNX's output_padding and SAME padding become oneDNN's end padding.
Case conv_transpose_case() {
  Case c({"ConvTranspose"});
  c.portable = false;
  return c;
}

// One ConvTranspose with a bias, x -> y.
Case conv_transpose(const Dims& x, const Dims& w, std::vector<Attr> attrs) {
  Case c = conv_transpose_case();
  c.input("x", x).weight("w", w).weight("b", {w[1]}).output("y");
  c.node("ConvTranspose", {"x", "w", "b"}, {"y"}, std::move(attrs));
  return c;
}

TEST_P(OperatorTest, ConvTransposeStridedPaddedWithOutputPadding) {
  run(conv_transpose({2, 4, 5, 6}, {4, 3, 3, 3}, {{"strides", {2, 2}}, {"pads", {1, 0, 1, 2}}, {"output_padding", {1, 1}}}));
}

TEST_P(OperatorTest, ConvTransposeGroupedDilated1dAnd3dWithoutBias) {
  Case c = conv_transpose_case();
  c.input("x", {1, 6, 7})
      .weight("w", {6, 2, 3})
      .input("v", {1, 2, 3, 4, 4})
      .weight("wv", {2, 3, 2, 2, 2})
      .output("y")
      .output("z");
  c.node("ConvTranspose", {"x", "w"}, {"y"}, {{"group", int64_t(3)}, {"dilations", {2}}, {"strides", {3}}, {"pads", {2, 1}}});
  c.node("ConvTranspose", {"v", "wv"}, {"z"}, {{"strides", {2, 2, 2}}});
  run(c);
}

TEST_P(OperatorTest, ConvTransposeOutputShapeAndSamePadding) {
  Case c = conv_transpose_case();
  c.input("x", {1, 3, 4, 5}).weight("w", {3, 5, 3, 3}).weight("b", {5}).output("shaped").output("upper").output("lower");
  c.node("ConvTranspose", {"x", "w", "b"}, {"shaped"}, {{"strides", {2, 2}}, {"output_shape", {8, 10}}});
  c.node("ConvTranspose", {"x", "w", "b"}, {"upper"}, {{"strides", {2, 3}}, {"auto_pad", "SAME_UPPER"}});
  c.node("ConvTranspose", {"x", "w", "b"}, {"lower"}, {{"strides", {2, 3}}, {"auto_pad", "SAME_LOWER"}});
  run(c);
}

// Weights and bias as graph inputs, reordered on every run (a kernel as
// large as its stride too: its by-taps form rearranges constants only).
TEST_P(OperatorTest, ConvTransposeWeightsAsGraphInputs) {
  Case c = conv_transpose_case();
  c.input("x", {2, 4, 5, 6}).input("w", {4, 3, 3, 3}).input("b", {3}).input("w2", {4, 8, 2, 2}).output("y").output("up");
  c.node("ConvTranspose", {"x", "w", "b"}, {"y"}, {{"strides", {2, 2}}, {"pads", {1, 0, 1, 2}}});
  c.node("ConvTranspose", {"x", "w2"}, {"up"}, {{"strides", {2, 2}}});
  run(c);
}

// A U-Net's decoder step: upsample, join the skip connection, then a Relu that fuses.
TEST_P(OperatorTest, ConvTransposeReluThenConcat) {
  Case c = conv_transpose_case();
  c.input("x", {2, 8, 6, 6}).input("skip", {2, 4, 12, 12}).weight("w", {8, 4, 2, 2}).weight("b", {4}).output("y");
  c.node("ConvTranspose", {"x", "w", "b"}, {"up"}, {{"strides", {2, 2}}});
  c.node("Relu", {"up"}, {"r"});
  c.node("Concat", {"r", "skip"}, {"y"}, {{"axis", int64_t(1)}});
  run(c);
}

// A kernel as large as its stride (a 1x1 convolution to every tap, then a
// copy of each tap to its pixel): 16 and 32 channels (whole channel blocks)
// into a convolution, an activation fused and a residual Add after it; 5
// channels of a non-square kernel written as a graph output and read again;
// one axis and three.
TEST_P(OperatorTest, ConvTransposeKernelAsLargeAsItsStride) {
  Case c = conv_transpose_case();
  c.input("x", {2, 8, 5, 6}).input("skip", {2, 32, 10, 12}).input("t", {3, 4, 7}).input("v", {1, 3, 2, 3, 2});
  c.weight("w16", {8, 16, 2, 2}).weight("b16", {16}).weight("w32", {16, 32, 1, 1}).weight("wc", {32, 32, 3, 3});
  c.weight("w5", {8, 5, 2, 3}).weight("b5", {5}).weight("wt", {4, 6, 4}).weight("bt", {6}).weight("wv", {3, 16, 2, 1, 3});
  c.output("y").output("odd").output("scaled").output("line").output("cube");
  c.node("ConvTranspose", {"x", "w16", "b16"}, {"up"}, {{"strides", {2, 2}}});
  c.node("LeakyRelu", {"up"}, {"leaky"}, {{"alpha", 0.25f}});
  c.node("ConvTranspose", {"leaky", "w32"}, {"wide"}, {{"strides", {1, 1}}});
  c.node("Add", {"wide", "skip"}, {"joined"});
  c.node("Conv", {"joined", "wc"}, {"y"}, {{"pads", {1, 1, 1, 1}}});
  c.node("ConvTranspose", {"x", "w5", "b5"}, {"odd"}, {{"strides", {2, 3}}});
  c.node("Mul", {"odd", "odd"}, {"scaled"});
  c.node("ConvTranspose", {"t", "wt", "bt"}, {"line"}, {{"strides", {4}}});
  c.node("ConvTranspose", {"v", "wv"}, {"cube"}, {{"strides", {2, 1, 3}}});
  run(c);
}

// oneDNN's end padding would be negative (output padding beyond the pads):
// the reference kernel runs it.
TEST_P(OperatorTest, ConvTransposeOutputPaddingBeyondThePads) {
  Case c = conv_transpose({1, 2, 3, 3}, {2, 2, 3, 3}, {{"strides", {2, 2}}, {"output_padding", {1, 1}}});
  c.native = false;
  run(c);
}

// ---- InstanceNormalization (a host kernel; none in the portable kernels) --------

TEST_P(OperatorTest, InstanceNormalization) {
  Case c({"InstanceNormalization"});
  c.portable = false;
  // Rows whose length is not a multiple of the vector width, and values far
  // from zero with a small spread (a one-pass variance loses it).
  c.input("x", {2, 3, 5, 7})
      .input("far", {1, 4, 37}, 99.5f, 100.5f)
      .weight("s", {3})
      .weight("b", {3})
      .weight("s4", {4})
      .weight("b4", {4});
  c.output("y").output("z");
  c.atol = 5e-5f;  // x near 100 has a float spacing of 8e-6: the mean alone is that far off; one pass is 100x worse
  c.node("InstanceNormalization", {"x", "s", "b"}, {"y"});
  c.node("InstanceNormalization", {"far", "s4", "b4"}, {"z"}, {{"epsilon", 1e-3f}});
  run(c);
}

// A scale that is an input: the reference kernel runs it.
TEST_P(OperatorTest, InstanceNormalizationScaleThatIsAnInput) {
  Case c({"InstanceNormalization"});
  c.input("x", {1, 2, 9}).input("s", {2}).weight("b", {2}).output("y");
  c.node("InstanceNormalization", {"x", "s", "b"}, {"y"});
  c.native = false;
  run(c);
}

// ---- RNN, GRU, LSTM (a host kernel on oneDNN matmuls; kiln_pk_recurrent) ----

// A recurrent layer of `cell` over x [seq, batch, input] (or [batch, seq,
// input] with layout 1), hidden size h, constant W, R and B.
Case recurrent_case(const std::string& cell, int64_t h, const Dims& x, int64_t directions, int64_t opset = 13) {
  const int64_t gates = cell == "LSTM" ? 4 : cell == "GRU" ? 3 : 1;
  Case c({cell}, opset);
  c.input("x", x, -2, 2).weight("w", {directions, gates * h, x[2]}, 0.6f).weight("r", {directions, gates * h, h}, 0.6f);
  c.weight("b", {directions, 2 * gates * h}, 0.5f);
  return c;
}

TEST_P(OperatorTest, LstmBidirectionalWithStatesAndPeepholes) {
  Case c = recurrent_case("LSTM", 20, {7, 3, 5}, 2);
  c.input("h0", {2, 3, 20}).input("c0", {2, 3, 20}).weight("p", {2, 60}, 0.5f).output("y").output("y_h").output("y_c");
  c.node("LSTM", {"x", "w", "r", "b", "", "h0", "c0", "p"}, {"y", "y_h", "y_c"}, {{"direction", "bidirectional"}});
  run(c);
}

// Layout 1 (batch first), clipped gates, the forget gate coupled to the input gate, no bias; Y_h only.
TEST_P(OperatorTest, LstmBatchMajorClippedWithCoupledForgetGate) {
  Case c = recurrent_case("LSTM", 17, {5, 6, 3}, 1, 14);
  c.output("y_h");
  c.node("LSTM", {"x", "w", "r"}, {"", "y_h"},
         {{"layout", int64_t(1)}, {"clip", 0.7f}, {"input_forget", int64_t(1)}, {"hidden_size", int64_t(17)}});
  run(c);
}

// PyTorch's GRU resets after the product (linear_before_reset = 1); ONNX's default before it.
TEST_P(OperatorTest, GruResetBeforeAndAfterTheProduct) {
  Case c = recurrent_case("GRU", 12, {6, 5, 4}, 1);
  c.input("h0", {1, 5, 12}).output("before").output("after_h").output("reversed");
  c.node("GRU", {"x", "w", "r", "b", "", "h0"}, {"before"});
  c.node("GRU", {"x", "w", "r", "b"}, {"", "after_h"}, {{"linear_before_reset", int64_t(1)}});
  c.node("GRU", {"x", "w", "r", "b"}, {"reversed"}, {{"direction", "reverse"}, {"linear_before_reset", int64_t(1)}});
  run(c);
}

// Every activation ONNX lists, on RNN, with alphas and betas taken in order.
TEST_P(OperatorTest, RnnEveryActivation) {
  const std::vector<std::string> acts = {"Tanh",       "Sigmoid",     "Relu", "Affine",   "LeakyRelu", "ThresholdedRelu",
                                         "ScaledTanh", "HardSigmoid", "Elu",  "Softsign", "Softplus"};
  Case c = recurrent_case("RNN", 18, {4, 2, 3}, 2);
  for (size_t i = 0; i < acts.size(); ++i) {
    const std::string y = "y" + std::to_string(i);
    c.output(y);
    c.node("RNN", {"x", "w", "r", "b"}, {y},
           {{"direction", "bidirectional"},
            {"activations", std::vector<std::string>{acts[i], "Tanh"}},
            {"activation_alpha", std::vector<float>{0.3f}},
            {"activation_beta", std::vector<float>{0.2f}}});
  }
  run(c);
}

// Rows of different lengths: Y is zero past a row's end, Y_h its last state.
// One executable runs full rows first, so that a Y in its arena that is not
// cleared would show the earlier run's values.
TEST_P(OperatorTest, LstmRowsOfDifferentLengths) {
  Case c = recurrent_case("LSTM", 9, {6, 4, 3}, 2);
  c.input_values<int32_t>("lens", {4}, {6, 6, 6, 6}).output("z").output("y_h");
  c.node("LSTM", {"x", "w", "r", "b", "lens"}, {"y", "y_h"}, {{"direction", "bidirectional"}});
  c.node("Neg", {"y"}, {"z"});
  run(c);
  const auto& b = backend(GetParam());
  const kiln::ir::Model model = import(c);
  if (!b.supports(model.graph->nodes[0])) GTEST_SKIP() << GetParam() << " does not claim LSTM";
  Compiled compiled = compile(GetParam(), model, c.inputs);
  compiled.exe->run(c.inputs);
  for (const std::vector<int32_t>& lens : {std::vector<int32_t>{6, 2, 0, 5}, std::vector<int32_t>{3, 3, 3, 3}}) {
    auto inputs = c.inputs;
    inputs["lens"] = Tensor::from_vector<int32_t>({4}, lens);
    const std::vector<Tensor> want = kiln::ref::run_graph(*model.graph, inputs);
    const std::vector<Tensor> got = compiled.exe->run(inputs);
    for (size_t k = 0; k < want.size(); ++k)
      expect_close(got[k], want[k], c.atol, c.rtol, c.steps, "output " + std::to_string(k));
  }
}

TEST_P(OperatorTest, RecurrentSequenceLengthBeyondTheSequenceIsAnInvalidArgument) {
  Case c = recurrent_case("GRU", 4, {3, 2, 2}, 1);
  c.input_values<int32_t>("lens", {2}, {3, 1}).output("y");
  c.node("GRU", {"x", "w", "r", "b", "lens"}, {"y"}, {}, "tagger");
  const auto& b = backend(GetParam());
  const kiln::ir::Model model = import(c);
  if (!b.supports(model.graph->nodes[0])) GTEST_SKIP() << GetParam() << " does not claim GRU";
  Compiled compiled = compile(GetParam(), model, c.inputs);
  for (int32_t bad : {4, -1}) {
    auto inputs = c.inputs;
    inputs["lens"] = Tensor::from_vector<int32_t>({2}, {2, bad});
    try {
      compiled.exe->run(inputs);
      ADD_FAILURE() << "no error for a length of " << bad;
    } catch (const kiln::ir::Error& e) {
      EXPECT_EQ(e.kind(), kiln::ir::ErrorKind::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("tagger"), std::string::npos) << e.what();
    }
  }
}

// Weights that are inputs, not constants: the reference kernel runs the layer.
TEST_P(OperatorTest, RecurrentWeightsThatAreInputs) {
  Case c({"GRU"});
  c.input("x", {4, 2, 3}).input("w", {1, 15, 3}).input("r", {1, 15, 5}).output("y");
  c.node("GRU", {"x", "w", "r"}, {"y"});
  c.native = false;
  run(c);
}

TEST_P(OperatorTest, Conv2dStridedDilatedAsymmetricPads) {
  Case c({"Conv"});
  c.input("x", {1, 3, 11, 10}).weight("w", {5, 3, 3, 2}).weight("b", {5}).output("y");
  c.node("Conv", {"x", "w", "b"}, {"y"},
         {{"strides", {2, 1}}, {"dilations", {2, 2}}, {"pads", {1, 0, 2, 1}}, {"kernel_shape", {3, 2}}});
  run(c);
}

TEST_P(OperatorTest, Conv1d) {
  Case c({"Conv"});
  c.input("x", {2, 4, 20}).weight("w", {6, 4, 5}).weight("b", {6}).output("y");
  c.node("Conv", {"x", "w", "b"}, {"y"}, {{"pads", {2, 1}}, {"strides", {2}}});
  run(c);
}

TEST_P(OperatorTest, Conv3d) {
  Case c({"Conv"});
  c.input("x", {1, 2, 5, 6, 6}).weight("w", {4, 2, 3, 3, 3}).weight("b", {4}).output("y");
  c.node("Conv", {"x", "w", "b"}, {"y"}, {{"pads", {1, 1, 1, 1, 1, 1}}});
  c.portable = false;  // the portable kernels are 1-D and 2-D: a 3-D convolution runs its reference kernel
  run(c);
}

TEST_P(OperatorTest, ConvGrouped) {
  Case c({"Conv"});
  c.input("x", {1, 8, 6, 6}).weight("w", {6, 4, 3, 3}).weight("b", {6}).output("y");
  c.node("Conv", {"x", "w", "b"}, {"y"}, {{"group", 2}});
  run(c);
}

TEST_P(OperatorTest, ConvDepthwise) {
  Case c({"Conv"});
  c.input("x", {1, 8, 7, 7}).weight("w", {8, 1, 3, 3}).weight("b", {8}).output("y");
  c.node("Conv", {"x", "w", "b"}, {"y"}, {{"group", 8}, {"pads", {1, 1, 1, 1}}});
  run(c);
}

// An even kernel with stride 2: the total padding is odd, the extra goes at the end.
TEST_P(OperatorTest, ConvAutoPadSameUpper) {
  Case c({"Conv"});
  c.input("x", {1, 3, 7, 7}).weight("w", {4, 3, 4, 4}).weight("b", {4}).output("y");
  c.node("Conv", {"x", "w", "b"}, {"y"}, {{"auto_pad", "SAME_UPPER"}, {"strides", {2, 2}}});
  run(c);
}

TEST_P(OperatorTest, ConvWithoutBias) {
  Case c({"Conv"});
  c.input("x", {1, 3, 6, 6}).weight("w", {2, 3, 1, 1}).output("y");
  c.node("Conv", {"x", "w"}, {"y"});
  run(c);
}

// Strided 1x1 convolutions (ResNet's projections), which the cpu lowering
// computes on a subsampled copy of the input where each axis's length is a
// multiple of its stride, and directly where it is not.
TEST_P(OperatorTest, ConvPointwiseStrided) {
  for (const Dims& x : {Dims{2, 16, 10, 9}, Dims{2, 16, 9, 7}}) {
    Case c({"Conv"});
    c.input("x", x).weight("w", {24, 16, 1, 1}).weight("b", {24}).output("y");
    c.node("Conv", {"x", "w", "b"}, {"y"}, {{"strides", {2, 3}}});
    run(c);
  }
}

TEST_P(OperatorTest, ConvPointwiseStridedGrouped1dAnd3d) {
  Case one({"Conv"});
  one.input("x", {1, 8, 12}).weight("w", {6, 4, 1}).output("y");
  one.node("Conv", {"x", "w"}, {"y"}, {{"strides", {4}}, {"group", 2}});
  run(one);
  Case three({"Conv"});
  three.input("x", {1, 4, 4, 6, 9}).weight("w", {8, 4, 1, 1, 1}).weight("b", {8}).output("y");
  three.node("Conv", {"x", "w", "b"}, {"y"}, {{"strides", {2, 1, 3}}});
  three.portable = false;  // as Conv3d
  run(three);
}

// A projection shortcut summed into the block's 3x3 convolution, then Relu.
TEST_P(OperatorTest, ConvPointwiseStridedAsAResidual) {
  Case c({"Conv"});
  c.input("x", {2, 8, 8, 8}).weight("wd", {16, 8, 1, 1}).weight("wb", {16, 8, 3, 3}).weight("bb", {16}).output("y");
  c.node("Conv", {"x", "wd"}, {"d"}, {{"strides", {2, 2}}});
  c.node("Conv", {"x", "wb", "bb"}, {"cb"}, {{"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}});
  c.node("Add", {"cb", "d"}, {"s"});
  c.node("Relu", {"s"}, {"y"});
  run(c);
}

// Conv [1,4,6,6] -> [1,8,6,6] followed by what `activation` adds from "c" to "y".
Case conv_then(const std::function<void(Case&)>& activation, float input_scale = 1) {
  Case c({"Conv"});
  c.input("x", {1, 4, 6, 6}, -input_scale, input_scale).weight("w", {8, 4, 3, 3}).weight("b", {8}).output("y");
  c.node("Conv", {"x", "w", "b"}, {"c"}, {{"pads", {1, 1, 1, 1}}});
  activation(c);
  return c;
}

TEST_P(OperatorTest, ConvRelu) {
  run(conv_then([](Case& c) { c.node("Relu", {"c"}, {"y"}); }));
}

TEST_P(OperatorTest, ConvLeakyRelu) {
  run(conv_then([](Case& c) { c.node("LeakyRelu", {"c"}, {"y"}, {{"alpha", 0.2f}}); }));
}

// Inputs up to 4 so that the convolution crosses both bounds.
TEST_P(OperatorTest, ConvClip6) {
  run(conv_then(
      [](Case& c) {
        c.scalar("lo", 0).scalar("hi", 6);
        c.node("Clip", {"c", "lo", "hi"}, {"y"});
      },
      4));
}

TEST_P(OperatorTest, ConvSigmoid) {
  run(conv_then([](Case& c) { c.node("Sigmoid", {"c"}, {"y"}); }));
}

TEST_P(OperatorTest, ConvTanh) {
  run(conv_then([](Case& c) { c.node("Tanh", {"c"}, {"y"}); }));
}

TEST_P(OperatorTest, ConvHardSwish) {
  run(conv_then([](Case& c) { c.node("HardSwish", {"c"}, {"y"}); }, 3));
}

TEST_P(OperatorTest, ConvSiLU) {
  run(conv_then([](Case& c) {
    c.node("Sigmoid", {"c"}, {"s"});
    c.node("Mul", {"c", "s"}, {"y"});
  }));
}

// Large enough that cpu runs the SiLU as a loop in place after the
// convolution, over its output in the convolution's layout: 24 channels, so
// that channel blocks of 16 have padding, which the next convolution reads.
// The SiLU is an output of the model as well; its 7 (9 in blocks) chunks of
// loop split unevenly over two threads.
TEST_P(OperatorTest, ConvSiLUOnALargeActivation) {
  Case c({"Conv"});
  c.input("x", {1, 8, 64, 72}).weight("w", {24, 8, 3, 3}).weight("b", {24}).weight("w2", {16, 24, 1, 1});
  c.output("silu").output("y");
  c.node("Conv", {"x", "w", "b"}, {"c"}, {{"pads", {1, 1, 1, 1}}});
  c.node("Sigmoid", {"c"}, {"s"});
  c.node("Mul", {"c", "s"}, {"silu"});
  c.node("Conv", {"silu", "w2"}, {"y"});
  run(c);
}

// Two post-ops on cpu (oneDNN 2.6 has no HardSigmoid): inputs up to 3 so
// that both bounds are crossed.
TEST_P(OperatorTest, ConvHardSigmoid) {
  run(conv_then([](Case& c) { c.node("HardSigmoid", {"c"}, {"y"}, {{"alpha", 0.3f}, {"beta", 0.4f}}); }, 3));
}

// Hardswish as PyTorch writes it before opset 14, one post-op on cpu; with
// any other alpha it is not Hardswish and must not become one.
TEST_P(OperatorTest, ConvHardSwishAsMulOfHardSigmoid) {
  for (float alpha : {1.0f / 6, 0.2f}) {
    SCOPED_TRACE(alpha);
    run(conv_then(
        [&](Case& c) {
          c.node("HardSigmoid", {"c"}, {"s"}, {{"alpha", alpha}, {"beta", 0.5f}});
          c.node("Mul", {"s", "c"}, {"y"});
        },
        3));
  }
}

void add_gelu(Case& c, const std::string& x, const std::string& y) {
  c.scalar("sqrt2", 1.4142135f).scalar("one", 1).scalar("half", 0.5f);
  c.node("Div", {x, "sqrt2"}, {x + "_d"});
  c.node("Erf", {x + "_d"}, {x + "_e"});
  c.node("Add", {x + "_e", "one"}, {x + "_a"});
  c.node("Mul", {x, x + "_a"}, {x + "_p"});
  c.node("Mul", {x + "_p", "half"}, {y});
}

TEST_P(OperatorTest, ConvGELU) {
  run(conv_then([](Case& c) { add_gelu(c, "c", "y"); }, 2));
}

// A ResNet block's tail: the residual is the block's input.
TEST_P(OperatorTest, ConvAddResidualRelu) {
  Case c({"Conv"});
  c.input("x", {1, 4, 6, 6}).weight("w", {4, 4, 3, 3}).weight("b", {4}).output("y");
  c.node("Conv", {"x", "w", "b"}, {"c"}, {{"pads", {1, 1, 1, 1}}});
  c.node("Add", {"c", "x"}, {"s"});
  c.node("Relu", {"s"}, {"y"});
  run(c);
}

// ResNet's 3x3 convolutions in whole 16-channel blocks, which the cpu backend
// runs on oneDNN's Winograd kernels where the CPU has them (F(2x2, 3x3) at
// batch 1, F(4x4, 3x3) at batch 8), with its own weight transform; the
// second one ends a block: residual sum and Relu as post-ops.
TEST_P(OperatorTest, Conv3x3InChannelBlocksWithResidual) {
  for (int64_t batch : {1, 8}) {
    SCOPED_TRACE(batch);
    Case c({"Conv"});
    c.input("x", {batch, 16, 9, 11})
        .weight("w1", {32, 16, 3, 3})
        .weight("b1", {32})
        .weight("w2", {16, 32, 3, 3})
        .weight("b2", {16});
    c.output("y");
    c.node("Conv", {"x", "w1", "b1"}, {"c1"}, {{"pads", {1, 1, 1, 1}}});
    c.node("Relu", {"c1"}, {"r1"});
    c.node("Conv", {"r1", "w2", "b2"}, {"c2"}, {{"pads", {1, 1, 1, 1}}});
    c.node("Add", {"c2", "x"}, {"s"});
    c.node("Relu", {"s"}, {"y"});
    run(c);
  }
}

// The intermediate stays in the convolutions' blocked layout; only the output is reordered.
TEST_P(OperatorTest, TwoConvsInARow) {
  Case c({"Conv"});
  c.input("x", {1, 3, 8, 8}).weight("w1", {8, 3, 3, 3}).weight("b1", {8}).weight("w2", {5, 8, 3, 3}).weight("b2", {5});
  c.output("y");
  c.node("Conv", {"x", "w1", "b1"}, {"c1"}, {{"pads", {1, 1, 1, 1}}});
  c.node("Relu", {"c1"}, {"r1"});
  c.node("Conv", {"r1", "w2", "b2"}, {"y"}, {{"pads", {1, 1, 1, 1}}});
  run(c);
}

// A blocked value that is also a graph output must reach the caller in plain layout.
TEST_P(OperatorTest, ConvOutputAlsoConsumedByAConv) {
  Case c({"Conv"});
  c.input("x", {1, 3, 8, 8}).weight("w1", {8, 3, 3, 3}).weight("b1", {8}).weight("w2", {4, 8, 1, 1});
  c.output("c1").output("y");
  c.node("Conv", {"x", "w1", "b1"}, {"c1"}, {{"pads", {1, 1, 1, 1}}});
  c.node("Conv", {"c1", "w2"}, {"y"});
  run(c);
}

// Conv, an activation, GlobalAveragePool, Flatten and Gemm over `batch` images.
Case classifier_head(int64_t batch, const char* activation) {
  Case c({"Conv", "GlobalAveragePool", "Gemm"});
  c.input("x", {batch, 3, 8, 8}).weight("w", {16, 3, 3, 3}).weight("b", {16}).weight("fc_w", {10, 16}).weight("fc_b", {10});
  c.output("y");
  c.node("Conv", {"x", "w", "b"}, {"c"}, {{"pads", {1, 1, 1, 1}}});
  c.node(activation, {"c"}, {"a"});
  c.node("GlobalAveragePool", {"a"}, {"g"});
  c.node("Flatten", {"g"}, {"f"}, {{"axis", 1}});
  c.node("Gemm", {"f", "fc_w", "fc_b"}, {"y"}, {{"transB", 1}});
  return c;
}

TEST_P(OperatorTest, ConvClassifierHead) { run(classifier_head(2, "Relu")); }

// A batch of 0 (oneDNN 2.6 divided by zero describing the Gemm: SIGFPE):
// nothing to compute, every output empty, the nodes on reference kernels.
TEST_P(OperatorTest, ConvClassifierHeadOnAnEmptyBatch) {
  Case c = classifier_head(0, "Sigmoid");
  c.native = false;
  run(c);
}

// SqueezeNet's fire module: the expand convolutions read the squeeze's
// blocked output and their blocked outputs are concatenated on channels.
Case fire_module(int64_t e1, int64_t e3) {
  Case c({"Conv", "Concat"});
  c.input("x", {1, 8, 6, 6}).weight("sw", {4, 8, 1, 1}).weight("sb", {4});
  c.weight("e1w", {e1, 4, 1, 1}).weight("e1b", {e1}).weight("e3w", {e3, 4, 3, 3}).weight("e3b", {e3}).output("y");
  c.node("Conv", {"x", "sw", "sb"}, {"s"});
  c.node("Relu", {"s"}, {"sr"});
  c.node("Conv", {"sr", "e1w", "e1b"}, {"e1"});
  c.node("Relu", {"e1"}, {"e1r"});
  c.node("Conv", {"sr", "e3w", "e3b"}, {"e3"}, {{"pads", {1, 1, 1, 1}}});
  c.node("Relu", {"e3"}, {"e3r"});
  c.node("Concat", {"e1r", "e3r"}, {"y"}, {{"axis", 1}});
  return c;
}

TEST_P(OperatorTest, ConvFireModuleConcat) { run(fire_module(16, 16)); }

// Channel counts that are not a multiple of oneDNN's channel blocks.
TEST_P(OperatorTest, ConvFireModuleConcatOddChannels) { run(fire_module(6, 5)); }

// The next module's MaxPool and squeeze read the Concat: the graph passes
// move the MaxPool before it and split the squeeze per part, summed by an
// Add that fuses into the second part's Conv.
Case fire_then_squeeze(int64_t e1, int64_t e3) {
  Case c = fire_module(e1, e3);
  c.weight("s2w", {4, e1 + e3, 1, 1}).weight("s2b", {4});
  auto& graph = c.model.graph();
  graph.mutable_node(graph.node_size() - 1)->set_output(0, "cat");
  c.ops.push_back("MaxPool");
  c.node("MaxPool", {"cat"}, {"p"}, {{"kernel_shape", {2, 2}}, {"strides", {2, 2}}});
  c.node("Conv", {"p", "s2w", "s2b"}, {"s2"});
  c.node("Relu", {"s2"}, {"y"});
  return c;
}

TEST_P(OperatorTest, ConvFireModuleThenSqueeze) { run(fire_then_squeeze(16, 16)); }
TEST_P(OperatorTest, ConvFireModuleThenSqueezeOddChannels) { run(fire_then_squeeze(6, 5)); }

// Arithmetic with a scalar constant after a convolution becomes linear post-ops.
TEST_P(OperatorTest, ConvScalarArithmetic) {
  run(conv_then([](Case& c) { c.scalar("k", 0.5f).node("Sub", {"k", "c"}, {"y"}); }));
  run(conv_then([](Case& c) { c.scalar("k", 4).node("Div", {"c", "k"}, {"y"}); }));
  run(conv_then([](Case& c) { c.scalar("k", 0.25f).node("Add", {"k", "c"}, {"y"}); }));
}

// Several post-ops of one oneDNN algorithm (here eltwise_linear) in one
// chain, each with its own parameters: 0.5 - 2c, then / 4, then + 0.25.
TEST_P(OperatorTest, ConvChainOfScalarArithmetic) {
  run(conv_then([](Case& c) {
    c.scalar("two", 2).scalar("half", 0.5f).scalar("four", 4).scalar("quarter", 0.25f);
    c.node("Mul", {"c", "two"}, {"p1"});
    c.node("Sub", {"half", "p1"}, {"p2"});
    c.node("Div", {"p2", "four"}, {"p3"});
    c.node("Add", {"p3", "quarter"}, {"y"});
  }));
}

// Relu(LeakyRelu(c)) is Relu(c); both are oneDNN eltwise_relu, with alphas 0.2 and 0.
TEST_P(OperatorTest, ConvLeakyReluThenRelu) {
  run(conv_then([](Case& c) {
    c.node("LeakyRelu", {"c"}, {"l"}, {{"alpha", 0.2f}});
    c.node("Relu", {"l"}, {"y"});
  }));
}

TEST_P(OperatorTest, ConvClipMaxOnly) {
  run(conv_then([](Case& c) {
    c.scalar("hi", 0.5f);
    c.node("Clip", {"c", "", "hi"}, {"y"});
  }));
}

// The residual is an earlier convolution's (blocked) output, added second.
TEST_P(OperatorTest, ConvAddResidualOfAnEarlierConv) {
  Case c({"Conv"});
  c.input("x", {1, 4, 6, 6}).weight("w1", {8, 4, 3, 3}).weight("w2", {8, 8, 3, 3}).output("y");
  c.node("Conv", {"x", "w1"}, {"c1"}, {{"pads", {1, 1, 1, 1}}});
  c.node("Relu", {"c1"}, {"r1"});
  c.node("Conv", {"r1", "w2"}, {"c2"}, {{"pads", {1, 1, 1, 1}}});
  c.node("Add", {"r1", "c2"}, {"s"});
  c.node("Relu", {"s"}, {"y"});
  run(c);
}

// A bottleneck with a projection shortcut, whose buffer the sum may take
// over; with `reuse`, the shortcut is read again after the sum.
Case bottleneck(bool reuse) {
  Case c({"Conv"});
  c.input("x", {2, 8, 7, 7}).weight("wa", {8, 8, 1, 1}).weight("wd", {16, 8, 1, 1}).weight("wb", {16, 8, 3, 3});
  c.weight("wc", {4, 16, 1, 1}).output("y");
  c.node("Conv", {"x", "wa"}, {"a"});
  c.node("Relu", {"a"}, {"ra"});
  c.node("Conv", {"x", "wd"}, {"d"});
  c.node("Conv", {"ra", "wb"}, {"cb"}, {{"pads", {1, 1, 1, 1}}});
  c.node("Add", {"cb", "d"}, {"s"});
  c.node("Relu", {"s"}, {"r"});
  c.node("Conv", {"r", "wc"}, {"y"});
  if (reuse) {
    c.output("y2");
    c.node("Mul", {"d", "r"}, {"y2"});
  }
  return c;
}

TEST_P(OperatorTest, BottleneckWithProjectionShortcut) { run(bottleneck(false)); }
TEST_P(OperatorTest, BottleneckWithShortcutReadAfterTheSum) { run(bottleneck(true)); }

// Squeeze-and-excitation: the per-channel scale multiplies the blocked
// convolution output directly (a oneDNN binary with broadcasting). In
// 16-channel blocks, 32 channels make the scale's blocked bytes its plain
// ones; 8 are padded.
TEST_P(OperatorTest, ConvSqueezeExcitationScale) {
  for (int64_t channels : {8, 32}) {
    Case c({"Conv"});
    c.input("x", {2, 16, 6, 6}).weight("w", {channels, 16, 3, 3}).weight("b", {channels}).output("y");
    c.node("Conv", {"x", "w", "b"}, {"c"}, {{"pads", {1, 1, 1, 1}}});
    c.node("GlobalAveragePool", {"c"}, {"g"});
    c.node("Sigmoid", {"g"}, {"s"});
    c.node("Mul", {"s", "c"}, {"y"});
    run(c);
  }
}

// RegNet's: a grouped convolution of 8 channels per group, scaled per
// channel. On AVX-512 oneDNN 2.6 leaves its output in 8-channel blocks, for
// which it has only a reference binary kernel: the scale runs as a loop.
TEST_P(OperatorTest, GroupedConvSqueezeExcitationScale) {
  Case c({"Conv"});
  c.input("x", {2, 48, 14, 14}).weight("w", {48, 8, 3, 3}).weight("b", {48}).output("y");
  c.node("Conv", {"x", "w", "b"}, {"c"}, {{"pads", {1, 1, 1, 1}}, {"group", 6}});
  c.node("GlobalAveragePool", {"c"}, {"g"});
  c.node("Sigmoid", {"g"}, {"s"});
  c.node("Mul", {"c", "s"}, {"y"});
  run(c);
}

// Sub is not commutative: with the blocked operand second it cannot be the
// binary primitive's full-shaped first source.
TEST_P(OperatorTest, ConvOutputSubtractedBothWays) {
  Case c({"Conv", "Sub"});
  c.input("x", {1, 4, 6, 6}).input("z", {1, 8, 1, 1}).weight("w", {8, 4, 3, 3}).output("c").output("y").output("y2");
  c.node("Conv", {"x", "w"}, {"c"}, {{"pads", {1, 1, 1, 1}}});
  c.node("Sub", {"z", "c"}, {"y"});
  c.node("Sub", {"c", "z"}, {"y2"});
  run(c);
}

TEST_P(OperatorTest, ConcatOfAGraphInputAndAConv) {
  Case c({"Conv", "Concat"});
  c.input("x", {1, 4, 6, 6}).weight("w", {8, 4, 3, 3}).output("y");
  c.node("Conv", {"x", "w"}, {"c"}, {{"pads", {1, 1, 1, 1}}});
  c.node("Concat", {"x", "c"}, {"y"}, {{"axis", 1}});
  run(c);
}

// A view (Reshape) of a blocked value must see it in plain layout.
TEST_P(OperatorTest, ConvReshapeSoftmax) {
  Case c({"Conv", "Softmax"});
  c.input("x", {1, 4, 6, 6}).weight("w", {8, 4, 3, 3}).int_constant("shape", {2}, {8, 36}).output("y");
  c.node("Conv", {"x", "w"}, {"c"}, {{"pads", {1, 1, 1, 1}}});
  c.node("Reshape", {"c", "shape"}, {"r"});
  c.node("Softmax", {"r"}, {"y"});
  run(c);
}

// ---- Gemm ----------------------------------------------------------------------

TEST_P(OperatorTest, Gemm) {
  Case c({"Gemm"});
  c.input("a", {4, 6}).weight("b", {6, 5}).output("y");
  c.node("Gemm", {"a", "b"}, {"y"});
  run(c);
}

TEST_P(OperatorTest, GemmTransA) {
  Case c({"Gemm"});
  c.input("a", {6, 4}).weight("b", {6, 5}).weight("c", {5}).output("y");
  c.node("Gemm", {"a", "b", "c"}, {"y"}, {{"transA", 1}});
  run(c);
}

TEST_P(OperatorTest, GemmTransB) {
  Case c({"Gemm"});
  c.input("a", {4, 6}).weight("b", {5, 6}).weight("c", {5}).output("y");
  c.node("Gemm", {"a", "b", "c"}, {"y"}, {{"transB", 1}});
  run(c);
}

TEST_P(OperatorTest, GemmAlphaBetaCVector) {
  Case c({"Gemm"});
  c.input("a", {4, 6}).weight("b", {6, 5}).weight("c", {5}).output("y");
  c.node("Gemm", {"a", "b", "c"}, {"y"}, {{"alpha", 0.5f}, {"beta", 2.0f}});
  run(c);
}

TEST_P(OperatorTest, GemmCScalar) {
  Case c({"Gemm"});
  c.input("a", {4, 6}).weight("b", {5, 6}).scalar("c", 0.75f).output("y");
  c.node("Gemm", {"a", "b", "c"}, {"y"}, {{"transB", 1}, {"beta", 0.5f}});
  run(c);
}

TEST_P(OperatorTest, GemmCFullAsGraphInput) {
  Case c({"Gemm"});
  c.input("a", {4, 6}).weight("b", {6, 5}).input("c", {4, 5}).output("y");
  c.node("Gemm", {"a", "b", "c"}, {"y"}, {{"alpha", 0.7f}});
  run(c);
}

// B and C as graph inputs: B read as it lies (transposed here), C a row,
// a column and a scalar broadcast as the bias.
TEST_P(OperatorTest, GemmWeightsAndBiasAsGraphInputs) {
  Case c({"Gemm"});
  c.input("a", {4, 6}).input("b", {5, 6}).input("row", {1, 5}).input("column", {4, 1}).input("one", {1});
  c.output("y").output("z").output("s");
  c.node("Gemm", {"a", "b", "row"}, {"y"}, {{"transB", 1}});
  c.node("Gemm", {"a", "b", "column"}, {"z"}, {{"transB", 1}});
  c.node("Gemm", {"a", "b", "one"}, {"s"}, {{"transB", 1}});
  run(c);
}

TEST_P(OperatorTest, GemmRelu) {
  Case c({"Gemm"});
  c.input("a", {4, 6}).weight("b", {6, 5}).weight("c", {5}).output("y");
  c.node("Gemm", {"a", "b", "c"}, {"g"});
  c.node("Relu", {"g"}, {"y"});
  run(c);
}

// The Add that follows becomes the matmul's bias, the Sigmoid a post-op.
TEST_P(OperatorTest, GemmAddBiasSigmoid) {
  Case c({"Gemm"});
  c.input("a", {4, 6}).weight("b", {6, 5}).weight("bias", {5}).output("y");
  c.node("Gemm", {"a", "b"}, {"g"});
  c.node("Add", {"bias", "g"}, {"z"});
  c.node("Sigmoid", {"z"}, {"y"});
  run(c);
}

TEST_P(OperatorTest, GemmCRowConstantWithBeta) {
  Case c({"Gemm"});
  c.input("a", {3, 6}).weight("b", {6, 5}).weight("c", {1, 5}).output("y");
  c.node("Gemm", {"a", "b", "c"}, {"y"}, {{"beta", 0.3f}});
  run(c);
}

// ---- MatMul --------------------------------------------------------------------

// A transformer's feed-forward layer: the bias and the GELU fuse into the matmul.
TEST_P(OperatorTest, MatMulBiasGELU) {
  Case c({"MatMul"});
  c.input("a", {2, 3, 8}, -2, 2).weight("w", {8, 5}).weight("bias", {5}).output("y");
  c.node("MatMul", {"a", "w"}, {"m"});
  c.node("Add", {"m", "bias"}, {"z"});
  add_gelu(c, "z", "y");
  run(c);
}

TEST_P(OperatorTest, MatMulBatched) {
  Case c({"MatMul"});
  c.input("a", {2, 4, 3, 6}).input("b", {2, 4, 6, 5}).output("y");
  c.node("MatMul", {"a", "b"}, {"y"});
  run(c);
}

TEST_P(OperatorTest, MatMulBroadcastBatch) {
  Case c({"MatMul"});
  c.input("a", {1, 3, 4}).input("b", {2, 4, 5}).output("y");
  c.node("MatMul", {"a", "b"}, {"y"});
  run(c);
}

// An Add of a constant [n, 1] after a [n, k] x [k, n] product broadcasts
// along rows: it is not a bias of the output columns, though it has n values.
TEST_P(OperatorTest, MatMulAddOfAColumnIsNotABias) {
  Case c({"MatMul"});
  c.input("a", {5, 3}).weight("w", {3, 5}).weight("col", {5, 1}).output("y");
  c.node("MatMul", {"a", "w"}, {"m"});
  c.node("Add", {"m", "col"}, {"y"});
  run(c);
}

TEST_P(OperatorTest, MatMulAddResidual) {
  Case c({"MatMul"});
  c.input("a", {2, 3, 8}).weight("w", {8, 8}).output("y");
  c.node("MatMul", {"a", "w"}, {"m"});
  c.node("Add", {"m", "a"}, {"y"});
  run(c);
}

// Two linear post-ops with their own parameters: 2m, then + 0.25.
TEST_P(OperatorTest, MatMulScaleThenShift) {
  Case c({"MatMul"});
  c.input("a", {4, 8}).weight("w", {8, 5}).scalar("two", 2).scalar("q", 0.25f).output("y");
  c.node("MatMul", {"a", "w"}, {"m"});
  c.node("Mul", {"m", "two"}, {"p"});
  c.node("Add", {"p", "q"}, {"y"});
  run(c);
}

// ---- pooling -------------------------------------------------------------------

TEST_P(OperatorTest, MaxPool3x3Stride2Pads1) {
  Case c({"MaxPool"});
  c.input("x", {1, 3, 9, 9}).output("y");
  c.node("MaxPool", {"x"}, {"y"}, {{"kernel_shape", {3, 3}}, {"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}});
  run(c);
}

TEST_P(OperatorTest, MaxPoolUnreadIndices) {
  Case c({"MaxPool"});
  c.input("x", {1, 3, 8, 8}).output("y");
  c.node("MaxPool", {"x"}, {"y", "indices"}, {{"kernel_shape", {2, 2}}, {"strides", {2, 2}}});
  run(c);
}

// ceil_mode adds a last window that overhangs the end: 5 outputs per axis, not 4.
TEST_P(OperatorTest, MaxPoolCeilMode) {
  Case c({"MaxPool"});
  c.input("x", {1, 3, 8, 8}).output("y");
  c.node("MaxPool", {"x"}, {"y"}, {{"kernel_shape", {3, 3}}, {"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}, {"ceil_mode", 1}});
  run(c);
}

// torchvision's avg_pool2d(padding=1): the Pad becomes the pool's padding.
TEST_P(OperatorTest, PadThenAveragePool) {
  Case c({"AveragePool"});
  c.input("x", {1, 3, 7, 7}).int_constant("pads", {8}, {0, 0, 1, 1, 0, 0, 1, 1}).output("y");
  c.node("Pad", {"x", "pads"}, {"p"});
  c.node("AveragePool", {"p"}, {"y"}, {{"kernel_shape", {3, 3}}});
  run(c);
}

Case average_pool(int count_include_pad) {
  Case c({"AveragePool"});
  c.input("x", {1, 3, 7, 7}).output("y");
  c.node("AveragePool", {"x"}, {"y"},
         {{"kernel_shape", {3, 3}}, {"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}, {"count_include_pad", count_include_pad}});
  return c;
}

TEST_P(OperatorTest, AveragePoolExcludingPads) { run(average_pool(0)); }
TEST_P(OperatorTest, AveragePoolIncludingPads) { run(average_pool(1)); }

TEST_P(OperatorTest, GlobalMaxPool) {
  Case c({"GlobalMaxPool"});
  c.input("x", {2, 5, 4, 6}).output("y");
  c.node("GlobalMaxPool", {"x"}, {"y"});
  run(c);
}

TEST_P(OperatorTest, MaxPoolOfAConv) {
  Case c({"Conv", "MaxPool"});
  c.input("x", {1, 3, 8, 8}).weight("w", {8, 3, 3, 3}).weight("b", {8}).output("y");
  c.node("Conv", {"x", "w", "b"}, {"c"}, {{"pads", {1, 1, 1, 1}}});
  c.node("MaxPool", {"c"}, {"y"}, {{"kernel_shape", {2, 2}}, {"strides", {2, 2}}});
  run(c);
}

TEST_P(OperatorTest, MaxPoolDilatedAsymmetricPads) {
  Case c({"MaxPool"});
  c.input("x", {1, 3, 8, 8}).output("y");
  c.node("MaxPool", {"x"}, {"y"}, {{"kernel_shape", {2, 2}}, {"dilations", {2, 2}}, {"pads", {1, 0, 0, 1}}});
  run(c);
}

// The overhanging last window averages only the elements inside.
TEST_P(OperatorTest, AveragePoolCeilMode) {
  Case c({"AveragePool"});
  c.input("x", {1, 3, 8, 8}).output("y");
  c.node("AveragePool", {"x"}, {"y"}, {{"kernel_shape", {3, 3}}, {"strides", {2, 2}}, {"ceil_mode", 1}});
  run(c);
}

// ---- Softmax, LayerNormalization -----------------------------------------------

TEST_P(OperatorTest, SoftmaxLastAxis) {
  Case c({"Softmax"});
  c.input("x", {3, 4, 7}, -3, 3).output("y");
  c.node("Softmax", {"x"}, {"y"}, {{"axis", -1}});
  run(c);
}

// Before opset 13 the input is coerced to 2-D: [2, 3*5], normalised over all 15.
TEST_P(OperatorTest, SoftmaxOpset11Axis1) {
  Case c({"Softmax"}, 11);
  c.input("x", {2, 3, 5}, -3, 3).output("y");
  c.node("Softmax", {"x"}, {"y"}, {{"axis", 1}});
  run(c);
}

TEST_P(OperatorTest, LogSoftmaxInnerAxis) {
  Case c({"LogSoftmax"});
  c.input("x", {2, 6, 4}, -3, 3).output("y");
  c.node("LogSoftmax", {"x"}, {"y"}, {{"axis", 1}});
  run(c);
}

TEST_P(OperatorTest, LayerNormalization) {
  Case c({"LayerNormalization"}, 17);
  c.input("x", {2, 5, 16}, -2, 3).weight("scale", {16}).weight("bias", {16}).output("y");
  c.node("LayerNormalization", {"x", "scale", "bias"}, {"y"}, {{"axis", -1}});
  run(c);
}

// Optional outputs the exporter named but nothing reads: the backend need not
// produce them, so they keep no node off the compiled path.
TEST_P(OperatorTest, LayerNormalizationUnreadStatistics) {
  Case c({"LayerNormalization"}, 17);
  c.input("x", {2, 5, 16}, -2, 3).weight("scale", {16}).weight("bias", {16}).output("y");
  c.node("LayerNormalization", {"x", "scale", "bias"}, {"y", "mean", "inv_std_dev"}, {{"axis", -1}});
  run(c);
}

// Mean and InvStdDev read, over the last two axes; scale and bias inputs of
// the run, and a scale alone: the portable kernel, on native kernels too.
TEST_P(OperatorTest, LayerNormalizationStatisticsAndScaleOfTheRun) {
  Case c({"LayerNormalization"}, 17);
  c.input("x", {3, 4, 6}, -2, 3).input("scale", {4, 6}).input("bias", {4, 6}).input("s", {6});
  c.node("LayerNormalization", {"x", "scale", "bias"}, {"y", "mean", "inv_std_dev"}, {{"axis", -2}});
  c.node("LayerNormalization", {"x", "s"}, {"y2", "", "inv2"}, {{"axis", 2}, {"epsilon", 0.1f}});
  c.output("y").output("mean").output("inv_std_dev").output("y2").output("inv2");
  run(c);
}

// ---- reductions (oneDNN's reduction; kiln_pk_reduce over one run of axes) --------

// Every reduction over the middle axes of a 4-D tensor, kept and not; the
// last axis, negative; every axis; ReduceSum's axes as a constant input.
TEST_P(OperatorTest, Reductions) {
  Case c({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare",
          "ReduceLogSum"});
  c.input("x", {2, 3, 4, 5}, 0.5f, 1.5f);  // positive: ReduceProd stays in range, ReduceLogSum defined
  int k = 0;
  for (const char* op : {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare"}) {
    const std::string y = "y" + std::to_string(k++);
    c.node(op, {"x"}, {y}, {{"axes", {1, 2}}, {"keepdims", int64_t(k % 2)}});
    c.output(y);
  }
  c.node("ReduceMax", {"x"}, {"last"}, {{"axes", {-1}}});
  c.node("ReduceMean", {"x"}, {"all"}, {{"keepdims", int64_t(0)}});
  c.node("ReduceLogSum", {"x"}, {"log_sum"}, {{"axes", {2}}});
  c.int_constant("axes", {2}, {0, 3});
  c.node("ReduceSum", {"x", "axes"}, {"ends"});
  c.output("last").output("all").output("log_sum").output("ends");
  // ReduceSum over axes 0 and 3 is two runs of axes for kiln_pk_reduce, which
  // has no ReduceLogSum either.
  c.portable = false;
  run(c);
}

// One run of axes, an axis of 1 among them, as the portable kernel takes it.
TEST_P(OperatorTest, ReductionsOverOneRunOfAxes) {
  Case c({"ReduceSum", "ReduceMean"});
  c.input("x", {3, 1, 4, 6});
  c.int_constant("axes", {2}, {1, 2});
  c.node("ReduceSum", {"x", "axes"}, {"sum"});
  c.node("ReduceMean", {"x"}, {"mean"}, {{"axes", {0, 1}}, {"keepdims", int64_t(0)}});
  c.output("sum").output("mean");
  run(c);
}

// ReduceLogSumExp: the portable kernel's; oneDNN has none, so the native
// kernels leave it to the reference (whose outputs are compared here too).
TEST_P(OperatorTest, ReduceLogSumExp) {
  Case c({"ReduceLogSumExp"});
  c.native = false;
  c.input("x", {2, 5, 3}, -20, 20);
  c.node("ReduceLogSumExp", {"x"}, {"y"}, {{"axes", {1}}});
  c.output("y");
  run(c);
}

// ---- If on a shape (known once the shapes are: its branch joins the graph) ---------

// An If on whether the batch is above 1, as exporters write a Python branch
// on a tensor's size: a convolution and a Relu on one side, a Sigmoid of
// the input scaled by a branch initializer on the other, both reading the
// enclosing graph's values, then an Abs. Either way every node compiles.
Case if_on_the_batch(int64_t batch) {
  Case c({"Conv", "Relu", "Sigmoid", "Mul"});
  c.input("x", {batch, 2, 5, 5}).weight("w", {2, 2, 3, 3}).output("y");
  c.node("Shape", {"x"}, {"shape"});
  c.int_constant("zero", {}, {0}).int_constant("one", {}, {1});
  c.node("Gather", {"shape", "zero"}, {"batch"});
  c.node("Greater", {"batch", "one"}, {"many"});
  kiln::test::ModelBuilder then_branch, else_branch;
  then_branch.graph().set_name("then");
  then_branch.output("r", onnx::TensorProto::FLOAT, {batch, 2, 5, 5});
  kiln::test::ModelBuilder::attr_ints(then_branch.node("Conv", {"x", "w"}, {"c"}), "pads", {1, 1, 1, 1});
  then_branch.node("Relu", {"c"}, {"r"});
  else_branch.graph().set_name("else");
  else_branch.output("r", onnx::TensorProto::FLOAT, {batch, 2, 5, 5});
  onnx::TensorProto half;
  half.set_name("half");
  half.set_data_type(onnx::TensorProto::FLOAT);
  half.add_float_data(0.5f);
  else_branch.initializer(half);
  else_branch.node("Sigmoid", {"x"}, {"s"});
  else_branch.node("Mul", {"s", "half"}, {"r"});
  auto& n = c.node("If", {"many"}, {"chosen"});
  kiln::test::ModelBuilder::attr_graph(n, "then_branch", then_branch.graph());
  kiln::test::ModelBuilder::attr_graph(n, "else_branch", else_branch.graph());
  c.node("Abs", {"chosen"}, {"y"});
  c.ops = {"Abs"};  // what the harness asks a backend to claim: the If is the graph passes'
  return c;
}

// The If must be gone after the graph passes: a backend cannot claim an If,
// and the harness asks one that claims every node to compile every node.
void expect_if_inlined(const std::string& config, const Case& c) {
  for (const auto& n : compile(config, import(c), c.inputs).graph->nodes) EXPECT_NE(n.op_type, "If") << n.describe();
}

TEST_P(OperatorTest, IfOnTheBatchTakesItsThenBranchCompiled) {
  const Case c = if_on_the_batch(3);
  expect_if_inlined(GetParam(), c);
  run(c);
}
TEST_P(OperatorTest, IfOnTheBatchTakesItsElseBranchCompiled) {
  const Case c = if_on_the_batch(1);
  expect_if_inlined(GetParam(), c);
  run(c);
}

// ---- comparisons and logic -----------------------------------------------------------

// Every comparison of float32 against a broadcast row, int64 against a
// scalar (a sample rate against a constant), and bool logic of the results.
TEST_P(OperatorTest, ComparisonsAndLogicBroadcast) {
  Case c({"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor"});
  c.input("x", {2, 3, 4}).input("row", {4}).input_values<int64_t>("rate", {2, 1, 1}, {16000, 8000});
  c.int_constant("k", {}, {16000});
  // Equal floats: x against a copy of itself where they are equal by value.
  c.node("Equal", {"x", "x"}, {"same"});
  c.node("Less", {"x", "row"}, {"lt"});
  c.node("LessOrEqual", {"row", "x"}, {"le"});
  c.node("Greater", {"x", "row"}, {"gt"});
  c.node("GreaterOrEqual", {"x", "row"}, {"ge"});
  c.node("Equal", {"rate", "k"}, {"is_16k"});
  c.node("And", {"lt", "same"}, {"both"});
  c.node("Or", {"gt", "is_16k"}, {"either"});
  c.node("Xor", {"le", "ge"}, {"one"});
  for (const char* out : {"lt", "le", "ge", "is_16k", "both", "either", "one"}) c.output(out, onnx::TensorProto::BOOL);
  run(c);
}

// ---- Dropout ---------------------------------------------------------------------

// torchvision's Swin exports training_mode = true with ratio 0: a copy.
TEST_P(OperatorTest, DropoutTrainingWithRatioZeroUnreadMask) {
  Case c({"Dropout"});
  c.input("x", {2, 3, 4}).scalar("ratio", 0).int_constant("training", {}, {1}, onnx::TensorProto::BOOL).output("y");
  c.node("Dropout", {"x", "ratio", "training"}, {"d", "mask"});
  c.node("Relu", {"d"}, {"y"});
  run(c);
}

// In inference the mask is all ones: a constant, so a read mask keeps the
// Dropout on the compiled path too.
TEST_P(OperatorTest, DropoutInferenceReadMask) {
  Case c({"Dropout"}, 13);
  c.input("x", {2, 3, 4}).output("y").output("mask", onnx::TensorProto::BOOL);
  c.node("Dropout", {"x"}, {"d", "mask"});
  c.node("Relu", {"d"}, {"y"});
  run(c);
}

// Before opset 10 the mask has the input's type.
TEST_P(OperatorTest, DropoutMaskOfTheInputTypeBeforeOpset10) {
  Case c({"Dropout"}, 9);
  c.input("x", {3, 5}).output("y").output("mask");
  c.node("Dropout", {"x"}, {"y", "mask"}, {{"ratio", 0.3f}});
  run(c);
}

// ---- BatchNormalization (inference) ----------------------------------------------

// Not after a Conv: the graph passes make it a depthwise 1x1 Conv, with the
// Relu fused.
TEST_P(OperatorTest, BatchNormalizationRelu) {
  Case c({"BatchNormalization"}, 15);
  c.input("x", {2, 5, 6, 7}, -2, 3).weight("scale", {5}).weight("shift", {5}).weight("mean", {5}).output("y");
  c.constant("var", {5}, {0.25f, 1, 2, 0.5f, 4});
  c.node("BatchNormalization", {"x", "scale", "shift", "mean", "var"}, {"n"}, {{"epsilon", 1e-3f}});
  c.node("Relu", {"n"}, {"y"});
  run(c);
}

// A 1-D signal [N, C, L] (BatchNorm1d).
TEST_P(OperatorTest, BatchNormalization1D) {
  Case c({"BatchNormalization"}, 15);
  c.input("x", {3, 4, 9}, -2, 3).weight("scale", {4}).weight("shift", {4}).weight("mean", {4}).output("y");
  c.constant("var", {4}, {0.5f, 1, 2, 3});
  c.node("BatchNormalization", {"x", "scale", "shift", "mean", "var"}, {"y"});
  run(c);
}

// [N, C] (BatchNorm1d after a Linear): no spatial axes, so no Conv; oneDNN's
// own kernel on the cpu backend, the reference kernel with portable kernels.
TEST_P(OperatorTest, BatchNormalizationOfFeatures) {
  Case c({"BatchNormalization"}, 15);
  c.input("x", {6, 20}, -2, 3).weight("scale", {20}).weight("shift", {20}).weight("mean", {20}).output("y");
  std::vector<float> var;
  for (int i = 0; i < 20; ++i) var.push_back(0.25f + float(i) / 4);
  c.constant("var", {20}, var);
  c.node("BatchNormalization", {"x", "scale", "shift", "mean", "var"}, {"y"});
  c.portable = false;
  run(c);
}

// ---- data movement ---------------------------------------------------------------

TEST_P(OperatorTest, Transpose0213) {
  Case c({"Transpose"});
  c.input("x", {2, 3, 4, 5}).output("y");
  c.node("Transpose", {"x"}, {"y"}, {{"perm", {0, 2, 1, 3}}});
  run(c);
}

TEST_P(OperatorTest, TransposeDefaultPermReverses) {
  Case c({"Transpose"});
  c.input("x", {2, 3, 4}).output("y");
  c.node("Transpose", {"x"}, {"y"});
  run(c);
}

TEST_P(OperatorTest, SliceSteps2) {
  Case c({"Slice"});
  c.input("x", {6, 8, 5}).output("y");
  c.int_constant("starts", {2}, {1, 0}).int_constant("ends", {2}, {6, 5});
  c.int_constant("axes", {2}, {0, 2}).int_constant("steps", {2}, {2, 2});
  c.node("Slice", {"x", "starts", "ends", "axes", "steps"}, {"y"});
  run(c);
}

// Axis 1: 7, 5, 3, 1 (the end clamps to before the first); axis 2 (negative
// axis): all five reversed.
TEST_P(OperatorTest, SliceNegativeSteps) {
  Case c({"Slice"});
  c.input("x", {6, 8, 5}).output("y");
  c.int_constant("starts", {2}, {7, -1}).int_constant("ends", {2}, {-10, -6});
  c.int_constant("axes", {2}, {1, -1}).int_constant("steps", {2}, {-2, -1});
  c.node("Slice", {"x", "starts", "ends", "axes", "steps"}, {"y"});
  run(c);
}

TEST_P(OperatorTest, GatherAxis0Int64NegativeIndex) {
  Case c({"Gather"});
  c.input("data", {5, 4}).input_values<int64_t>("idx", {2, 3}, {0, -1, 3, 2, -5, 4}).output("y");
  c.node("Gather", {"data", "idx"}, {"y"}, {{"axis", 0}});
  run(c);
}

TEST_P(OperatorTest, GatherAxis1Int32) {
  Case c({"Gather"});
  c.input("data", {3, 6, 2}).input_values<int32_t>("idx", {4}, {5, 0, -2, 3}).output("y");
  c.node("Gather", {"data", "idx"}, {"y"}, {{"axis", 1}});
  run(c);
}

// Constant indices, on a negative axis.
TEST_P(OperatorTest, GatherConstantInt32IndicesNegativeAxis) {
  Case c({"Gather"});
  c.input("data", {3, 4, 6}).int_constant("idx", {2, 2}, {5, -6, 1, 1}, kInt32).output("y");
  c.node("Gather", {"data", "idx"}, {"y"}, {{"axis", -1}});
  run(c);
}

// Every axis of a 3-D tensor, indices shorter than the data off the axis,
// negative ones, int32 and int64, float and int64 data.
TEST_P(OperatorTest, GatherElements) {
  Case c({"GatherElements"});
  c.input("data", {3, 4, 5});
  c.input_values<int64_t>("idx0", {2, 3, 5}, std::vector<int64_t>{0, 2, -1, 1,  0, -3, 2, 2, 1, 0, 1, 1, 0,  -2, 2,
                                                                  2, 0, 1,  -1, 0, 1,  2, 0, 0, 1, 2, 2, -1, 0,  1});
  c.input_values<int32_t>("idx1", {3, 2, 4},
                          std::vector<int32_t>{0, 3, -1, 2, 1, 1, 0, -4, 3, 2, 1, 0, -2, 0, 3, 3, 2, 1, 1, 0, 0, 0, -1, 2});
  c.input_values<int64_t>("idx2", {3, 4, 2},
                          std::vector<int64_t>{4, 0, -1, 2, 3, 3, 1, 0, 2, -5, 0, 4, 1, 1, 3, 2, 0, 0, 4, 4, 2, 1, -2, 3});
  c.input_values<int64_t>("ints", {2, 3}, {10, -20, 30, 40, 1LL << 40, -60});
  c.input_values<int64_t>("idx_ints", {2, 2}, {2, 0, -1, 1});
  c.node("GatherElements", {"data", "idx0"}, {"y0"}, {{"axis", 0}});
  c.node("GatherElements", {"data", "idx1"}, {"y1"}, {{"axis", 1}});
  c.node("GatherElements", {"data", "idx2"}, {"y2"}, {{"axis", -1}});
  c.node("GatherElements", {"ints", "idx_ints"}, {"yi"}, {{"axis", 1}});
  c.output("y0").output("y1").output("y2").output("yi", kInt64);
  c.atol = c.rtol = 0;
  run(c);
}

// Equal parts on the middle axis, sizes as an attribute (opset 11) and as a
// constant input (opset 13) on the last axis, int64 values on the first.
TEST_P(OperatorTest, Split) {
  Case c({"Split"}, 13);
  c.input("x", {2, 6, 5});
  c.input_values<int64_t>("ints", {4, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 1LL << 40, -11, 12});
  c.int_constant("sizes", {3}, {1, 3, 1});
  c.node("Split", {"x"}, {"a", "b", "c"}, {{"axis", 1}});
  c.node("Split", {"x", "sizes"}, {"d", "e", "f"}, {{"axis", -1}});
  c.node("Split", {"ints"}, {"g", "h"});
  for (const char* o : {"a", "b", "c", "d", "e", "f"}) c.output(o);
  c.output("g", kInt64).output("h", kInt64);
  c.atol = c.rtol = 0;
  run(c);
}

TEST_P(OperatorTest, SplitSizesAttributeOpset11) {
  Case c({"Split"}, 11);
  c.input("x", {3, 7}).output("a").output("b");
  c.node("Split", {"x"}, {"a", "b"}, {{"axis", 1}, {"split", {2, 5}}});
  c.atol = c.rtol = 0;
  run(c);
}

TEST_P(OperatorTest, ConcatInt64) {
  Case c({"Concat"});
  c.input_values<int64_t>("a", {2, 3}, {1, 2, 3, 4, 5, 6});
  c.input_values<int64_t>("b", {2, 2}, {-7, 8, int64_t(1) << 40, -(int64_t(1) << 50)});
  c.input_values<int64_t>("d", {2, 1}, {9, 10});
  c.output("y", kInt64);
  c.node("Concat", {"a", "b", "d"}, {"y"}, {{"axis", 1}});
  run(c);
}

TEST_P(OperatorTest, ConcatFloatAxis0) {
  Case c({"Concat"});
  c.input("a", {2, 3, 4}).input("b", {1, 3, 4}).output("y");
  c.node("Concat", {"a", "b"}, {"y"}, {{"axis", 0}});
  run(c);
}

// ---- elementwise -------------------------------------------------------------------

// One fused loop; the intermediate "m" is needed outside it and must be stored.
TEST_P(OperatorTest, ElementwiseChainWithIntermediateOutput) {
  Case c({"Add", "Mul", "Sigmoid", "Sub"});
  c.input("x", {2, 3, 4, 5}).weight("bias", {3, 1, 1}).scalar("k", 1.7f).output("m").output("y");
  c.node("Add", {"x", "bias"}, {"a"});
  c.node("Mul", {"a", "k"}, {"m"});
  c.node("Sigmoid", {"m"}, {"s"});
  c.node("Sub", {"s", "x"}, {"y"});
  run(c);
}

TEST_P(OperatorTest, PReluPerChannelSlope) {
  Case c({"PRelu"});
  c.input("x", {2, 3, 4, 5}).weight("slope", {3, 1, 1}).output("y");
  c.node("PRelu", {"x", "slope"}, {"y"});
  run(c);
}

// x feeds two members of one loop (loaded once) and broadcasts against w.
TEST_P(OperatorTest, ElementwiseChainSharedInput) {
  Case c({"Add", "Mul", "Sub"});
  c.input("x", {2, 3, 4}).input("w", {4}).output("y");
  c.node("Add", {"x", "w"}, {"a"});
  c.node("Mul", {"x", "x"}, {"sq"});
  c.node("Sub", {"a", "sq"}, {"y"});
  run(c);
}

// Squeeze-and-excitation, then a chain with operands that broadcast along
// other axes, and a Tanh of the convolution: on cpu loops run in the
// convolution's layout, reading the broadcast operands as they are (in
// channel blocks, only the Tanh).
TEST_P(OperatorTest, ElementwiseInTheConvolutionsLayout) {
  Case c({"Conv", "GlobalAveragePool", "Sigmoid", "Mul", "Add", "Sub", "Tanh"});
  c.input("x", {2, 32, 10, 12}).input("row", {10, 1}).weight("w", {32, 1, 3, 3}).weight("w2", {8, 32, 1, 1});
  c.weight("bias", {32, 1, 1}).output("y").output("z").output("t");
  c.node("Conv", {"x", "w"}, {"c"}, {{"pads", {1, 1, 1, 1}}, {"group", 32}});
  c.node("Tanh", {"c"}, {"t"});
  c.node("GlobalAveragePool", {"c"}, {"p"});
  c.node("Sigmoid", {"p"}, {"g"});
  c.node("Mul", {"c", "g"}, {"se"});
  c.node("Add", {"se", "bias"}, {"a"});
  c.node("Sub", {"a", "row"}, {"z"});
  c.node("Conv", {"se", "w2"}, {"y"});
  run(c);
}

// One image's GlobalAveragePool of channels-last values, which cpu sums in a
// pixel split: 40 channels, two blocks of 16 and 8 more.
TEST_P(OperatorTest, GlobalAveragePoolOfOneChannelsLastImage) {
  Case c({"Conv", "GlobalAveragePool", "Mul"});
  c.input("x", {1, 40, 20, 18}).weight("w", {40, 1, 3, 3}).output("p").output("y");
  c.node("Conv", {"x", "w"}, {"c"}, {{"pads", {1, 1, 1, 1}}, {"group", 40}});
  c.node("GlobalAveragePool", {"c"}, {"p"});
  c.node("Mul", {"c", "p"}, {"y"});
  run(c);
}

// Loops alike but for their length share one function on cpu, each step
// passing its own length (the long one in several chunks).
TEST_P(OperatorTest, ElementwiseLoopsAlikeButForTheirLength) {
  Case c({"Sigmoid"});
  c.input("a", {3, 5}).input("b", {40000}).output("ya").output("yb");
  c.node("Sigmoid", {"a"}, {"ya"});
  c.node("Sigmoid", {"b"}, {"yb"});
  run(c);
}

// ---- errors ------------------------------------------------------------------------

// Indices are data: an out-of-range one is the caller's mistake, reported
// with the node's name, and the executable stays usable.
TEST_P(OperatorTest, GatherOutOfRangeIndexIsAnInvalidArgument) {
  Case c({"Gather"});
  c.input("data", {5, 4}).input_values<int64_t>("idx", {3}, {0, 1, 2}).output("y");
  c.node("Gather", {"data", "idx"}, {"y"}, {{"axis", 0}}, "pick_rows");
  const auto& b = backend(GetParam());
  const kiln::ir::Model model = import(c);
  if (!b.supports(model.graph->nodes[0])) GTEST_SKIP() << GetParam() << " does not claim Gather";
  Compiled compiled = compile(GetParam(), model, c.inputs);
  for (int64_t bad : {int64_t(5), int64_t(-6), int64_t(1) << 40}) {
    SCOPED_TRACE("index " + std::to_string(bad));
    auto inputs = c.inputs;
    inputs["idx"] = Tensor::from_vector<int64_t>({3}, {0, bad, 1});
    try {
      compiled.exe->run(inputs);
      ADD_FAILURE() << "no error";
    } catch (const kiln::ir::Error& e) {
      EXPECT_EQ(e.kind(), kiln::ir::ErrorKind::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("pick_rows"), std::string::npos) << e.what();
    }
  }
  const auto want = kiln::ref::run_graph(*model.graph, c.inputs);
  const auto got = compiled.exe->run(c.inputs);
  ASSERT_EQ(got.size(), 1u);
  expect_close(got[0], want[0], 0, 0, 0, "after the errors");
}

TEST_P(OperatorTest, GatherElementsOutOfRangeIndexIsAnInvalidArgument) {
  Case c({"GatherElements"});
  c.input("data", {2, 3}).input_values<int64_t>("idx", {2, 2}, {0, 1, 2, 0}).output("y");
  c.node("GatherElements", {"data", "idx"}, {"y"}, {{"axis", 1}}, "pick");
  const auto& b = backend(GetParam());
  const kiln::ir::Model model = import(c);
  if (!b.supports(model.graph->nodes[0])) GTEST_SKIP() << GetParam() << " does not claim GatherElements";
  Compiled compiled = compile(GetParam(), model, c.inputs);
  auto inputs = c.inputs;
  inputs["idx"] = Tensor::from_vector<int64_t>({2, 2}, {0, 1, -4, 0});
  try {
    compiled.exe->run(inputs);
    ADD_FAILURE() << "no error";
  } catch (const kiln::ir::Error& e) {
    EXPECT_EQ(e.kind(), kiln::ir::ErrorKind::InvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("pick"), std::string::npos) << e.what();
  }
}

// ---- unary elementwise ops, each on its own --------------------------------------------

struct UnaryOp {
  std::string name;  // the test's
  std::string op;
  float lo = -3, hi = 3;  // the input range: inside the op's domain
  std::vector<Attr> attrs = {};
  std::vector<std::optional<float>> extra = {};  // further inputs: scalar constants, or omitted
};

std::vector<UnaryOp> unary_ops() {
  return {
      {"Neg", "Neg"},
      {"Abs", "Abs"},
      {"Relu", "Relu"},
      {"LeakyRelu", "LeakyRelu", -3, 3, {{"alpha", 0.1f}}},
      {"Sigmoid", "Sigmoid", -6, 6},
      {"Tanh", "Tanh"},
      {"Exp", "Exp"},
      {"Log", "Log", 0.05f, 4},
      {"Sqrt", "Sqrt", 0, 4},
      {"Erf", "Erf"},
      {"Reciprocal", "Reciprocal", 0.25f, 2},
      {"Floor", "Floor"},
      {"Ceil", "Ceil"},
      {"Clip", "Clip", -3, 3, {}, {-0.5f, 0.7f}},
      {"ClipMaxOnly", "Clip", -3, 3, {}, {std::nullopt, 0.7f}},
      {"HardSigmoid", "HardSigmoid", -4, 4, {{"alpha", 0.25f}, {"beta", 0.4f}}},
      {"HardSwish", "HardSwish", -4, 4},
      {"Softplus", "Softplus"},
      {"Elu", "Elu", -3, 3, {{"alpha", 0.5f}}},
      {"Selu", "Selu", -3, 3, {{"alpha", 1.5f}, {"gamma", 1.1f}}},
      {"SeluDefaults", "Selu"},
      {"Softsign", "Softsign"},
  };
}

void PrintTo(const UnaryOp& u, std::ostream* os) { *os << u.name; }

class UnaryOpTest : public ::testing::TestWithParam<std::tuple<std::string, UnaryOp>> {};

TEST_P(UnaryOpTest, MatchesTheReference) {
  const auto& [backend_name, u] = GetParam();
  Case c({u.op});
  c.input("x", {2, 3, 4, 5}, u.lo, u.hi).output("y");
  std::vector<std::string> ins{"x"};
  for (size_t i = 0; i < u.extra.size(); ++i) {
    if (!u.extra[i]) {
      ins.push_back("");
      continue;
    }
    ins.push_back("k" + std::to_string(i));
    c.scalar(ins.back(), *u.extra[i]);
  }
  c.node(u.op, ins, {"y"}, u.attrs);
  check(backend_name, c);
}

// FPN's top-down path: a Conv's output resized to the lateral's size and
// added to it. The cpu backend runs a Resize as oneDNN's resampling when its
// taps are oneDNN's, else on the reference kernel: both must be right.
struct ResizeCase {
  std::string name;
  std::vector<Attr> attrs;
  Dims out;                        // [1, 16, H, W]
  std::vector<float> scales = {};  // given instead of sizes
};

std::vector<ResizeCase> resize_cases() {
  const Attr nearest("mode", "nearest"), linear("mode", "linear"), asymmetric("coordinate_transformation_mode", "asymmetric"),
      floor_("nearest_mode", "floor");
  return {
      {"NearestAsymmetricFloorTwice", {nearest, asymmetric, floor_}, {1, 16, 12, 12}},
      {"NearestAsymmetricFloorByScales", {nearest, asymmetric, floor_}, {1, 16, 12, 18}, {1, 1, 2, 3}},
      {"NearestHalfPixelTwice", {nearest}, {1, 16, 12, 12}},
      {"NearestByOneAndAHalf", {nearest, asymmetric, floor_}, {1, 16, 9, 9}},  // oneDNN would round otherwise
      {"LinearHalfPixel", {linear}, {1, 16, 15, 10}},
      {"LinearAlignCorners", {linear, {"coordinate_transformation_mode", "align_corners"}}, {1, 16, 12, 12}},
      {"Cubic", {{"mode", "cubic"}}, {1, 16, 12, 12}},
  };
}

TEST_P(OperatorTest, ResizeAfterAConvAddedToALateral) {
  for (const ResizeCase& r : resize_cases()) {
    SCOPED_TRACE(r.name);
    Case c({"Conv"});
    c.input("x", {1, 16, 6, 6}).weight("w", {16, 16, 3, 3}).weight("w2", {16, 16, 1, 1}).input("lateral", r.out).output("y");
    c.node("Conv", {"x", "w"}, {"c"}, {{"pads", {1, 1, 1, 1}}});
    if (r.scales.empty()) {
      c.int_constant("sizes", {4}, std::vector<int64_t>(r.out.begin(), r.out.end()));
      c.node("Resize", {"c", "", "", "sizes"}, {"up"}, r.attrs);
    } else {
      c.constant("scales", {4}, r.scales);
      c.node("Resize", {"c", "", "scales"}, {"up"}, r.attrs);
    }
    c.node("Conv", {"lateral", "w2"}, {"l"});
    c.node("Add", {"l", "up"}, {"y"});
    run(c);
  }
}

// Generated loops compute exp themselves (to vectorise), so its edges are
// checked here: every binade of the normal range to 1e-6 relative, and the
// values where it underflows, overflows or is not a number.
TEST_P(OperatorTest, ExpSigmoidAndEluAcrossTheFloatRange) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  auto one_input = [](Case& c, const std::vector<float>& values) {
    c.declare_input("x", kFloat, {int64_t(values.size())});
    c.inputs["x"] = Tensor::from_vector<float>({int64_t(values.size())}, values);
  };
  std::vector<float> normal;
  for (float x = -86.6f; x < 88.72f; x += 0.37f) normal.push_back(x);
  normal.push_back(88.72f);
  Case range({"Exp"});
  range.atol = 0;
  range.rtol = 1e-6f;
  one_input(range, normal);
  range.output("e");
  range.node("Exp", {"x"}, {"e"});
  check(GetParam(), range);

  // Results under 2^-125 may be 0 (and Elu near 0 loses digits to e^x - 1).
  Case edges({"Exp", "Sigmoid", "Elu"});
  edges.atol = 1e-6f;
  edges.rtol = 1e-6f;
  one_input(edges, {-inf, -200, -104, -87.5f, -86.7f, -1e-3f, 0, 1e-3f, 88.8f, 200, inf, nan});
  edges.output("e").output("s").output("u");
  edges.node("Exp", {"x"}, {"e"});
  edges.node("Sigmoid", {"x"}, {"s"});
  edges.node("Elu", {"x"}, {"u"}, {{"alpha", 0.5f}});
  check(GetParam(), edges);
}

// Erf and Tanh too: a polynomial near 0 and exp further out, so relative
// accuracy is checked on both sides of the switch, down to tiny values, and
// at the ends (1 in float from about 4 for erf and 9 for tanh) and NaN.
TEST_P(OperatorTest, ErfAndTanhAcrossTheFloatRange) {
  std::vector<float> values{-std::numeric_limits<float>::infinity(),
                            -1e3f,
                            -9.1f,
                            -3.9f,
                            1e-30f,
                            -1e-8f,
                            0,
                            0.399f,
                            0.401f,
                            0.499f,
                            0.501f,
                            4.1f,
                            1e3f,
                            std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  for (float x = -6; x < 6; x += 0.0137f) values.push_back(x);
  Case c({"Erf", "Tanh"});
  c.atol = 0;
  c.rtol = 1e-6f;
  c.declare_input("x", kFloat, {int64_t(values.size())});
  c.inputs["x"] = Tensor::from_vector<float>({int64_t(values.size())}, values);
  c.output("e").output("t");
  c.node("Erf", {"x"}, {"e"});
  c.node("Tanh", {"x"}, {"t"});
  run(c);
}

// ---- binary elementwise ops with two-sided broadcasting ----------------------------------

struct BinaryOp {
  std::string op;
  float a_lo = -1, a_hi = 1, b_lo = -1, b_hi = 1;
};

std::vector<BinaryOp> binary_ops() {
  return {{"Add"}, {"Sub"}, {"Mul"}, {"Div", -1, 1, 0.5f, 2}, {"Pow", 0.1f, 3, -2, 2}, {"Max"}, {"Min"}};
}

void PrintTo(const BinaryOp& b, std::ostream* os) { *os << b.op; }

class BinaryOpTest : public ::testing::TestWithParam<std::tuple<std::string, BinaryOp>> {};

// [3,1,5] with [4,1]: both operands broadcast, to [3,4,5].
TEST_P(BinaryOpTest, BroadcastsBothOperands) {
  const auto& [backend_name, op] = GetParam();
  Case c({op.op});
  c.input("a", {3, 1, 5}, op.a_lo, op.a_hi).input("b", {4, 1}, op.b_lo, op.b_hi).output("y");
  c.node(op.op, {"a", "b"}, {"y"});
  check(backend_name, c);
}

INSTANTIATE_TEST_SUITE_P(Backends, OperatorTest, ::testing::ValuesIn(backends_under_test()),
                         [](const auto& info) { return param_name(info.param); });
INSTANTIATE_TEST_SUITE_P(Backends, UnaryOpTest,
                         ::testing::Combine(::testing::ValuesIn(backends_under_test()), ::testing::ValuesIn(unary_ops())),
                         [](const auto& info) {
                           return param_name(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name;
                         });
INSTANTIATE_TEST_SUITE_P(Backends, BinaryOpTest,
                         ::testing::Combine(::testing::ValuesIn(backends_under_test()), ::testing::ValuesIn(binary_ops())),
                         [](const auto& info) { return param_name(std::get<0>(info.param)) + "_" + std::get<1>(info.param).op; });
// With only the reference backend built in, there is nothing to compare.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(OperatorTest);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(UnaryOpTest);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(BinaryOpTest);

}  // namespace
