// The operator suite for quantized models (operator_case.hpp): QDQ as
// quantizers write it, which the graph passes fuse into integer operators,
// and the QOperator form, on every backend that claims the operators.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "operator_case.hpp"

namespace {

using namespace kiln::test::operators;

// ---- quantized (QDQ as quantizers write it, and the QLinear operators) -------------
//
// Quantized outputs may be one step from the reference's: the compiled
// kernels requantize with a float scale, the reference in double, so a value
// on a rounding tie may round the other way.

// `x` quantized to 8 bits and dequantized again, as a quantized model's
// input reaches its first operator; the quantized value is `x`_q.
void quantize_dequantize(Case& c, const std::string& x, const std::string& out, float scale, int64_t zero_point, int elem) {
  c.scalar(x + "_scale", scale).int_constant(x + "_zp", {}, {zero_point}, elem);
  c.node("QuantizeLinear", {x, x + "_scale", x + "_zp"}, {x + "_q"});
  c.node("DequantizeLinear", {x + "_q", x + "_scale", x + "_zp"}, {out});
}

// The graph's output: `y` quantized to uint8, as `y`_q.
void quantize(Case& c, const std::string& y, float scale, int64_t zero_point) {
  c.scalar(y + "_scale", scale).int_constant(y + "_zp", {}, {zero_point}, onnx::TensorProto::UINT8);
  c.node("QuantizeLinear", {y, y + "_scale", y + "_zp"}, {y + "_q"});
  c.output(y + "_q", onnx::TensorProto::UINT8);
}

// Random int8 weights up to +-`limit`.
std::vector<int64_t> int8_values(Case& c, int64_t n, float limit) {
  std::vector<int64_t> q;
  for (float v : c.random(n, -limit, limit)) q.push_back(int64_t(std::lround(v)));
  return q;
}

// Random int8 weights `name`_q with per-channel scales along `axis`,
// dequantized into `name`. Within +-64 (as ONNX Runtime's reduce_range
// quantizes), every CPU's int8 kernels take them (int8_products_exact);
// beyond, those without VNNI compute in float.
void int8_weights(Case& c, const std::string& name, const Dims& dims, int64_t axis, float limit = 64) {
  const std::vector<int64_t> q = int8_values(c, numel(dims), limit);
  c.int_constant(name + "_q", dims, q, onnx::TensorProto::INT8);
  const int64_t channels = dims[size_t(axis)];
  std::vector<float> scales = c.random(channels, 0.002f, 0.01f);
  c.constant(name + "_scale", {channels}, scales);
  c.int_constant(name + "_zp", {channels}, std::vector<int64_t>(size_t(channels), 0), onnx::TensorProto::INT8);
  c.node("DequantizeLinear", {name + "_q", name + "_scale", name + "_zp"}, {name}, {{"axis", axis}});
}

Case quantized_case() {
  Case c({"QuantizeLinear", "DequantizeLinear"});
  c.steps = 1;
  return c;
}

// Conv between a quantized input and int8 weights, its bias float, its
// result (through a Relu where `relu`) quantized: one int8 convolution.
Case qdq_conv(int elem, int64_t x_zero_point, bool relu, int64_t group, const Dims& w, float limit = 64) {
  Case c = quantized_case();
  const Dims x{1, w[1] * group, 9, 9};
  c.input("x", x);
  quantize_dequantize(c, "x", "xd", 1.0f / 127, x_zero_point, elem);
  int8_weights(c, "w", w, 0, limit);
  c.weight("b", {w[0]}, 0.5f);
  c.node("Conv", {"xd", "w", "b"}, {relu ? "c" : "y"}, {{"pads", {1, 1, 1, 1}}, {"group", group}, {"strides", {2, 1}}});
  if (relu) c.node("Relu", {"c"}, {"y"});
  // The range of the result: about 1 either way for these weights.
  quantize(c, "y", relu ? 1.5f / 255 : 3.0f / 255, relu ? 0 : 128);
  return c;
}

TEST_P(OperatorTest, QdqConvReluPerChannelWeights) { run(qdq_conv(onnx::TensorProto::UINT8, 128, true, 1, {8, 3, 3, 3})); }
TEST_P(OperatorTest, QdqConvSignedActivationsWithAZeroPoint) {
  run(qdq_conv(onnx::TensorProto::INT8, -5, false, 1, {6, 4, 3, 3}, 127));
}
TEST_P(OperatorTest, QdqConvFullRangeWeights) { run(qdq_conv(onnx::TensorProto::UINT8, 128, true, 1, {8, 3, 3, 3}, 127)); }
TEST_P(OperatorTest, QdqConvDepthwise) { run(qdq_conv(onnx::TensorProto::UINT8, 120, true, 8, {8, 1, 3, 3})); }
// Two channels per group: without VNNI, oneDNN has only its reference int8
// kernel for these, and the float form computes them.
TEST_P(OperatorTest, QdqConvFewChannelsPerGroup) { run(qdq_conv(onnx::TensorProto::UINT8, 120, true, 4, {8, 2, 3, 3})); }
TEST_P(OperatorTest, QdqConvFewChannelsPerGroupFullRangeWeights) {
  run(qdq_conv(onnx::TensorProto::UINT8, 120, false, 3, {6, 2, 3, 3}, 127));
}

// Two quantized convolutions in a row: the activations stay 8-bit between
// them (the QuantizeLinear -> DequantizeLinear pair between them cancels).
TEST_P(OperatorTest, QdqConvChain) {
  Case c = quantized_case();
  c.input("x", {2, 4, 6, 6});
  quantize_dequantize(c, "x", "xd", 1.0f / 127, 128, onnx::TensorProto::UINT8);
  int8_weights(c, "w1", {16, 4, 1, 1}, 0);
  int8_weights(c, "w2", {8, 16, 3, 3}, 0);
  c.node("Conv", {"xd", "w1"}, {"c1"});
  c.node("Relu", {"c1"}, {"r1"});
  quantize_dequantize(c, "r1", "h", 0.5f / 255, 0, onnx::TensorProto::UINT8);
  c.node("Conv", {"h", "w2"}, {"y"}, {{"pads", {1, 1, 1, 1}}});
  quantize(c, "y", 0.5f / 255, 128);
  run(c);
}

// MatMul over a stack of rows with per-column int8 weights.
TEST_P(OperatorTest, QdqMatMulPerColumnWeights) {
  Case c = quantized_case();
  c.input("x", {2, 5, 16});
  quantize_dequantize(c, "x", "xd", 1.0f / 127, 128, onnx::TensorProto::UINT8);
  int8_weights(c, "w", {16, 24}, 1);
  c.node("MatMul", {"xd", "w"}, {"y"});
  quantize(c, "y", 0.6f / 127, 128);
  run(c);
}

// A classifier as quantizers write it: Gemm of dequantized rows by int8
// weights (transposed, per output column) with a float bias, quantized
// (com.microsoft's QGemm after the graph passes where the int8 kernels are
// exact, a float Gemm between the quantizers elsewhere).
Case qdq_gemm(bool transposed, float limit) {
  Case c = quantized_case();
  c.ops.push_back("Gemm");
  c.input("x", {3, 40});
  quantize_dequantize(c, "x", "xd", 1.0f / 127, 128, onnx::TensorProto::UINT8);
  int8_weights(c, "w", transposed ? Dims{10, 40} : Dims{40, 10}, transposed ? 0 : 1, limit);
  c.weight("b", {10}, 0.5f);
  c.node("Gemm", {"xd", "w", "b"}, {"y"}, {{"transB", int64_t(transposed)}});
  quantize(c, "y", 2.0f / 255, 128);
  return c;
}

TEST_P(OperatorTest, QdqGemm) { run(qdq_gemm(true, 64)); }
TEST_P(OperatorTest, QdqGemmUntransposed) { run(qdq_gemm(false, 64)); }
TEST_P(OperatorTest, QdqGemmFullRangeWeights) { run(qdq_gemm(true, 127)); }

// ONNX Runtime's QGemm as its quantizer writes a Gemm in the QOperator
// form, with an int32 bias (C). `limit`: the weights' largest magnitude;
// beyond 64, CPUs without VNNI compute in float (over K beyond 512: in
// chunks). Without a y_scale (`float_output`) the scaled sums are the
// output; `per_tensor`: one scale for all of B; `bias`: C's shape.
struct QGemmShape {
  float limit = 64;
  int64_t k = 100;
  bool trans_a = false, trans_b = true, float_output = false, per_tensor = false;
  Dims bias{10};
};

Case qgemm(const QGemmShape& s) {
  Case c = quantized_case();
  c.ops = {"QGemm"};
  const int64_t k = s.k;
  c.input("x", s.trans_a ? Dims{k, 3} : Dims{3, k});
  c.scalar("xs", 1.0f / 127).int_constant("xz", {}, {128}, onnx::TensorProto::UINT8);
  c.node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
  const Dims w = s.trans_b ? Dims{10, k} : Dims{k, 10};
  c.int_constant("w", w, int8_values(c, numel(w), s.limit), onnx::TensorProto::INT8);
  const int64_t scales = s.per_tensor ? 1 : 10;
  c.constant("ws", {scales}, c.random(scales, 0.5f / s.limit, 1.0f / s.limit));
  c.int_constant("wz", {scales}, std::vector<int64_t>(size_t(scales), 0), onnx::TensorProto::INT8);
  c.int_constant("b", s.bias, int8_values(c, numel(s.bias), 2000), kInt32);
  std::vector<std::string> inputs{"xq", "xs", "xz", "w", "ws", "wz", "b"};
  if (!s.float_output) {
    c.scalar("ys", 2 * std::sqrt(float(k)) / 255).int_constant("yz", {}, {128}, onnx::TensorProto::UINT8);
    inputs.insert(inputs.end(), {"ys", "yz"});
  }
  c.node("QGemm", inputs, {"y"}, {{"transA", int64_t(s.trans_a)}, {"transB", int64_t(s.trans_b)}}).set_domain("com.microsoft");
  auto* opset = c.model.model().add_opset_import();
  opset->set_domain("com.microsoft");
  opset->set_version(1);
  if (s.float_output)
    c.output("y");
  else
    c.output("y", onnx::TensorProto::UINT8);
  return c;
}

TEST_P(OperatorTest, QGemm) { run(qgemm({})); }
TEST_P(OperatorTest, QGemmFullRangeWeights) { run(qgemm({.limit = 127})); }
TEST_P(OperatorTest, QGemmFullRangeWeightsOverChunks) { run(qgemm({.limit = 127, .k = 700, .trans_b = false})); }
TEST_P(OperatorTest, QGemmFloatOutput) { run(qgemm({.trans_b = false, .float_output = true})); }
TEST_P(OperatorTest, QGemmFloatOutputFullRangeWeights) {
  run(qgemm({.limit = 127, .k = 700, .float_output = true, .per_tensor = true}));
}
TEST_P(OperatorTest, QGemmTransposedA) { run(qgemm({.trans_a = true, .per_tensor = true, .bias = {1, 10}})); }
TEST_P(OperatorTest, QGemmTransposedAFloatOutputFullRangeWeights) {
  run(qgemm({.limit = 127, .trans_a = true, .trans_b = false, .float_output = true}));
}
// C of the product's whole shape: the portable kernels take it; the native
// lowering takes a bias per column only (as quantizers write it) and leaves
// this to the reference kernel.
TEST_P(OperatorTest, QGemmBiasPerElement) {
  Case c = qgemm({.bias = {3, 10}});
  c.native = GetParam() == "cpu_portable";
  run(c);
}
TEST_P(OperatorTest, QGemmBiasScalar) { run(qgemm({.trans_b = false, .float_output = true, .bias = {1}})); }

// ConvInteger's int32 sums are exact wherever it compiles.
// `limit`: the weights' largest magnitude; beyond 64, CPUs without VNNI
// compute in float (exact while a sum has at most 512 products).
// `group` > 1: grouped, two input channels per group.
Case conv_integer(float limit, int64_t group = 1) {
  Case c = quantized_case();
  c.ops = {"ConvInteger"};
  c.steps = 0;
  c.input("x", {1, 4, 6, 6});
  c.scalar("xs", 1.0f / 127).int_constant("xz", {}, {100}, onnx::TensorProto::UINT8);
  c.node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
  const Dims w{6, 4 / group, 3, 3};
  c.int_constant("w", w, int8_values(c, numel(w), limit), onnx::TensorProto::INT8);
  c.node("ConvInteger", {"xq", "w", "xz"}, {"y"}, {{"pads", {1, 0, 1, 0}}, {"group", group}});
  c.output("y", kInt32);
  return c;
}

TEST_P(OperatorTest, ConvInteger) { run(conv_integer(64)); }
TEST_P(OperatorTest, ConvIntegerFullRangeWeights) { run(conv_integer(127)); }
TEST_P(OperatorTest, ConvIntegerFewChannelsPerGroup) { run(conv_integer(64, 2)); }

// A MaxPool between a quantizer's pair and a quantizer of the same
// parameters pools the uint8 values (resnet's stem).
TEST_P(OperatorTest, QdqMaxPool) {
  Case c = quantized_case();
  c.ops.push_back("MaxPool");
  c.steps = 0;  // a maximum is exact
  c.input("x", {1, 16, 9, 9});
  quantize_dequantize(c, "x", "xd", 1.0f / 127, 128, onnx::TensorProto::UINT8);
  c.node("MaxPool", {"xd"}, {"y"}, {{"kernel_shape", {3, 3}}, {"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}});
  c.scalar("y_scale", 1.0f / 127).int_constant("y_zp", {}, {128}, onnx::TensorProto::UINT8);
  c.node("QuantizeLinear", {"y", "y_scale", "y_zp"}, {"y_q"});
  c.output("y_q", onnx::TensorProto::UINT8);
  run(c);
}

// MatMulInteger's int32 sums, exact, A's zero point one of the run (from
// DynamicQuantizeLinear). `limit`: the weights' largest magnitude (see
// int8_weights); beyond 64, CPUs without VNNI take float products over
// chunks of 512 rows of B, added up in int32.
Case matmul_integer(float limit, int64_t k) {
  Case c({"DynamicQuantizeLinear", "MatMulInteger"});
  c.input("x", {2, 3, k}, -2, 3);
  c.node("DynamicQuantizeLinear", {"x"}, {"xq", "xs", "xz"});
  c.int_constant("w", {k, 8}, int8_values(c, k * 8, limit), onnx::TensorProto::INT8);
  c.node("MatMulInteger", {"xq", "w", "xz"}, {"acc"});
  c.output("acc", kInt32);
  return c;
}

TEST_P(OperatorTest, MatMulInteger) { run(matmul_integer(64, 300)); }
TEST_P(OperatorTest, MatMulIntegerFullRangeWeights) { run(matmul_integer(127, 300)); }
TEST_P(OperatorTest, MatMulIntegerFullRangeWeightsOverChunks) { run(matmul_integer(127, 1100)); }

// A MatMul quantized dynamically, as ONNX Runtime's quantize_dynamic
// writes it: the above, then Cast -> Mul by the two scales (the cpu
// backend does not claim that Cast, so the harness compares the outputs
// without asking every node to compile).
Case dynamic_matmul(float limit, int64_t k) {
  Case c = matmul_integer(limit, k);
  c.node("Cast", {"acc"}, {"accf"}, {{"to", int64_t(kFloat)}});
  c.scalar("ws", 0.01f);
  c.node("Mul", {"xs", "ws"}, {"scale"});
  c.node("Mul", {"accf", "scale"}, {"y"});
  c.output("y").output("xq", onnx::TensorProto::UINT8);
  return c;
}

TEST_P(OperatorTest, DynamicQuantizedMatMul) { run(dynamic_matmul(64, 32)); }
TEST_P(OperatorTest, DynamicQuantizedMatMulFullRangeWeights) { run(dynamic_matmul(127, 1100)); }

// The QOperator form: QLinearConv and QLinearMatMul as the model has them.
// `conv_limit`: the convolution weights' largest magnitude (the matmul's
// stay within 64); beyond 64, CPUs without VNNI convolve in float.
Case qlinear_conv_and_matmul(float conv_limit) {
  Case c = quantized_case();
  c.ops = {"QLinearConv", "QLinearMatMul"};
  c.input("x", {1, 3, 5, 5});
  c.scalar("xs", 1.0f / 127).int_constant("xz", {}, {128}, onnx::TensorProto::UINT8);
  c.node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
  c.int_constant("w", {4, 3, 2, 2}, int8_values(c, 4 * 3 * 2 * 2, conv_limit), onnx::TensorProto::INT8);
  c.constant("ws", {4}, {0.01f, 0.02f, 0.005f, 0.008f});
  c.int_constant("wz", {4}, {0, 0, 0, 0}, onnx::TensorProto::INT8);
  c.int_constant("b", {4}, {100, -2000, 0, 512}, kInt32);
  c.scalar("ys", 2.0f / 255).int_constant("yz", {}, {128}, onnx::TensorProto::UINT8);
  c.node("QLinearConv", {"xq", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"}, {"yq"}, {{"pads", {0, 0, 1, 1}}});
  c.int_constant("flat", {2}, {1, 4 * 5 * 5});
  c.node("Reshape", {"yq", "flat"}, {"rows"});
  c.int_constant("m", {100, 3}, int8_values(c, 100 * 3, 64), onnx::TensorProto::INT8);
  c.scalar("ms", 0.01f).int_constant("mz", {}, {0}, onnx::TensorProto::INT8);
  c.scalar("zs", 4.0f / 255).int_constant("zz", {}, {100}, onnx::TensorProto::UINT8);
  c.node("QLinearMatMul", {"rows", "ys", "yz", "m", "ms", "mz", "zs", "zz"}, {"zq"});
  c.output("zq", onnx::TensorProto::UINT8);
  return c;
}

TEST_P(OperatorTest, QLinearConvAndQLinearMatMul) { run(qlinear_conv_and_matmul(64)); }
TEST_P(OperatorTest, QLinearConvFullRangeWeights) { run(qlinear_conv_and_matmul(127)); }

// QLinearMatMul of a stack of rows of `elem` (with a zero point) by int8
// weights up to +-`limit` with per-column scales. Beyond 64 (or for int8
// rows), CPUs without VNNI compute in float: products over chunks of 512
// rows of B, exact, added up in int32 and requantized.
Case qlinear_matmul(int elem, int64_t zero_point, float limit, int64_t k) {
  Case c = quantized_case();
  c.ops = {"QLinearMatMul"};
  c.input("x", {2, 3, k});
  c.scalar("xs", 1.0f / 127).int_constant("xz", {}, {zero_point}, elem);
  c.node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
  c.int_constant("w", {k, 8}, int8_values(c, k * 8, limit), onnx::TensorProto::INT8);
  c.constant("ws", {8}, c.random(8, 0.5f / limit, 1.0f / limit));
  c.int_constant("wz", {8}, std::vector<int64_t>(8, 0), onnx::TensorProto::INT8);
  // The sums spread as sqrt(k) times |x| and |w| (about 1/2 each here).
  c.scalar("ys", 2 * std::sqrt(float(k)) / 255).int_constant("yz", {}, {128}, onnx::TensorProto::UINT8);
  c.node("QLinearMatMul", {"xq", "xs", "xz", "w", "ws", "wz", "ys", "yz"}, {"yq"});
  c.output("yq", onnx::TensorProto::UINT8);
  return c;
}

TEST_P(OperatorTest, QLinearMatMul) { run(qlinear_matmul(onnx::TensorProto::UINT8, 128, 64, 100)); }
TEST_P(OperatorTest, QLinearMatMulFullRangeWeights) { run(qlinear_matmul(onnx::TensorProto::UINT8, 128, 127, 100)); }
TEST_P(OperatorTest, QLinearMatMulFullRangeWeightsOverChunks) { run(qlinear_matmul(onnx::TensorProto::UINT8, 120, 127, 1100)); }
TEST_P(OperatorTest, QLinearMatMulSignedRows) { run(qlinear_matmul(onnx::TensorProto::INT8, -3, 64, 600)); }

// A residual connection: two dequantized tensors added, through a Relu,
// quantized again (com.microsoft's QLinearAdd after the graph passes), and
// without the Relu into int8 with a zero point. `b` broadcasts against `a`
// where their shapes differ (a bias per channel, a row).
Case residual_add(bool relu, int out_type, int64_t out_zero_point, const Dims& a = {2, 16, 5, 5}, const Dims& b = {2, 16, 5, 5}) {
  Case c = quantized_case();
  c.ops.push_back("Add");
  c.input("a", a).input("b", b, -2, 2);
  quantize_dequantize(c, "a", "ad", 1.0f / 127, 128, onnx::TensorProto::UINT8);
  quantize_dequantize(c, "b", "bd", 2.0f / 127, 120, onnx::TensorProto::UINT8);
  c.node("Add", {"ad", "bd"}, {relu ? "s" : "y"});
  if (relu) c.node("Relu", {"s"}, {"y"});
  c.scalar("y_scale", 3.0f / 255).int_constant("y_zp", {}, {out_zero_point}, out_type);
  c.node("QuantizeLinear", {"y", "y_scale", "y_zp"}, {"y_q"});
  c.output("y_q", out_type);
  return c;
}

TEST_P(OperatorTest, QdqResidualAddRelu) { run(residual_add(true, onnx::TensorProto::UINT8, 0)); }
TEST_P(OperatorTest, QdqResidualAddIntoInt8) { run(residual_add(false, onnx::TensorProto::INT8, -3)); }
TEST_P(OperatorTest, QdqAddBroadcastPerChannel) {
  run(residual_add(true, onnx::TensorProto::UINT8, 0, {2, 16, 5, 5}, {1, 16, 1, 1}));
}
// The broadcast operand first: the sum is taken the other way round.
TEST_P(OperatorTest, QdqAddBroadcastFirst) { run(residual_add(false, onnx::TensorProto::INT8, -3, {16, 1, 1}, {2, 16, 5, 5})); }
TEST_P(OperatorTest, QdqAddBroadcastScalar) { run(residual_add(true, onnx::TensorProto::UINT8, 0, {2, 16, 5, 5}, {1})); }
TEST_P(OperatorTest, QdqAddBroadcastRow) { run(residual_add(false, onnx::TensorProto::UINT8, 128, {2, 3, 5, 7}, {7})); }
// A result larger than both operands stays a float Add between the quantizers.
TEST_P(OperatorTest, QdqAddBroadcastBothWays) {
  run(residual_add(true, onnx::TensorProto::UINT8, 0, {2, 1, 5, 5}, {1, 16, 1, 1}));
}

// Activations quantized and dequantized per channel (a 1-D scale along
// `axis`), with one zero point for all channels, or (`zero_points`) one per
// channel.
Case per_channel_quantizers(const Dims& dims, int64_t axis, std::vector<int64_t> zero_points) {
  Case c = quantized_case();
  c.input("x", dims, -2, 2);
  const int64_t channels = dims[size_t(axis < 0 ? axis + int64_t(dims.size()) : axis)];
  c.constant("s", {channels}, c.random(channels, 1.0f / 127, 3.0f / 127));
  zero_points.resize(size_t(channels), zero_points.back());
  c.int_constant("z", {channels}, zero_points, onnx::TensorProto::UINT8);
  c.node("QuantizeLinear", {"x", "s", "z"}, {"xq"}, {{"axis", axis}});
  c.node("DequantizeLinear", {"xq", "s", "z"}, {"y"}, {{"axis", axis}});
  c.output("xq", onnx::TensorProto::UINT8).output("y");
  // A value one step away dequantizes one scale (3/127 at most) away.
  c.atol = 0.012f;
  return c;
}

TEST_P(OperatorTest, QuantizersPerChannel) { run(per_channel_quantizers({2, 6, 4, 5}, 1, {128})); }
TEST_P(OperatorTest, QuantizersPerChannelLastAxis) { run(per_channel_quantizers({3, 4, 10}, -1, {100})); }
// Zero points that differ between channels: oneDNN binaries rather than
// reorders (which take one zero point).
TEST_P(OperatorTest, QuantizersPerChannelZeroPoints) { run(per_channel_quantizers({2, 6, 4, 5}, 1, {128, 120, 100, 3})); }

// A small network in the layout bench/quantize_zoo.py and ONNX Runtime's
// quantizer write for a ResNet: a stem convolution, a max pool, a residual
// block, global pooling and a classifier, every activation passing through a
// QuantizeLinear -> DequantizeLinear pair. The whole network must compile:
// what the quantized zoo asks of the cpu backend, in a model CI can build.
TEST_P(OperatorTest, QdqResidualNetwork) {
  Case c = quantized_case();
  c.ops = {"QuantizeLinear", "DequantizeLinear", "Conv", "MaxPool", "Add", "GlobalAveragePool", "Gemm"};
  c.input("x", {2, 3, 16, 16});
  quantize_dequantize(c, "x", "xd", 1.0f / 127, 128, onnx::TensorProto::UINT8);
  int8_weights(c, "stem_w", {8, 3, 3, 3}, 0);
  c.weight("stem_b", {8}, 0.5f);
  c.node("Conv", {"xd", "stem_w", "stem_b"}, {"stem"}, {{"pads", {1, 1, 1, 1}}, {"strides", {2, 2}}});
  c.node("Relu", {"stem"}, {"stem_relu"});
  quantize_dequantize(c, "stem_relu", "stem_d", 1.5f / 255, 0, onnx::TensorProto::UINT8);
  c.node("MaxPool", {"stem_d"}, {"pool"}, {{"kernel_shape", {2, 2}}, {"strides", {2, 2}}});
  quantize_dequantize(c, "pool", "pool_d", 1.5f / 255, 0, onnx::TensorProto::UINT8);
  int8_weights(c, "w1", {8, 8, 3, 3}, 0);
  int8_weights(c, "w2", {8, 8, 3, 3}, 0);
  c.node("Conv", {"pool_d", "w1"}, {"c1"}, {{"pads", {1, 1, 1, 1}}});
  c.node("Relu", {"c1"}, {"r1"});
  quantize_dequantize(c, "r1", "r1_d", 0.5f / 255, 0, onnx::TensorProto::UINT8);
  c.node("Conv", {"r1_d", "w2"}, {"c2"}, {{"pads", {1, 1, 1, 1}}});
  quantize_dequantize(c, "c2", "c2_d", 0.5f / 127, 128, onnx::TensorProto::UINT8);
  c.node("Add", {"c2_d", "pool_d"}, {"sum"});
  c.node("Relu", {"sum"}, {"block"});
  quantize_dequantize(c, "block", "block_d", 2.0f / 255, 0, onnx::TensorProto::UINT8);
  c.node("GlobalAveragePool", {"block_d"}, {"gap"});
  quantize_dequantize(c, "gap", "gap_d", 1.0f / 255, 0, onnx::TensorProto::UINT8);
  c.int_constant("flat", {2}, {2, 8});
  c.node("Reshape", {"gap_d", "flat"}, {"features"});
  int8_weights(c, "fc_w", {10, 8}, 0);
  c.weight("fc_b", {10}, 0.1f);
  c.node("Gemm", {"features", "fc_w", "fc_b"}, {"logits"}, {{"transB", int64_t(1)}});
  quantize(c, "logits", 0.2f / 127, 128);
  run(c);
}

}  // namespace
