// What the cpu backend's lowering decides, read off the program it makes.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <list>

#include <nlohmann/json.hpp>

#include "backends/backend.hpp"
#include "backends/cpu/lowering.hpp"
#include "backends/cpu/onednn_kernel.hpp"
#include "backends/cpu/portable/kernels.h"
#include "backends/cpu/thread_budget.hpp"
#include "backends/program_blocks.hpp"
#include "backends/reference/reference_executor.hpp"
#include "imported_model.hpp"
#include "random_data.hpp"

using kiln::test::ModelBuilder;
using kiln::test::random_values;

namespace {

// What some tests hold the lowering to was chosen by measuring oneDNN 2.6 on
// AVX-512 (16-channel blocks, which implementations exist); elsewhere the
// lowering takes oneDNN's defaults, which the operator tests check.
constexpr const char* kAvx512Only =
    "the layout and implementation choices under test are made on AVX-512 CPUs; this one has none";

// A ResNet bottleneck with a projection: y = convC(relu(convB(relu(convA(x))) + convD(x))).
// With `reuse_shortcut`, the projection d is read again after the sum.
kiln::cpu::Program lower_bottleneck(bool reuse_shortcut) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {1, 8, 8, 8}).output("y", onnx::TensorProto::FLOAT, {1, 4, 8, 8});
  if (reuse_shortcut) b.output("y2", onnx::TensorProto::FLOAT, {1, 16, 8, 8});
  b.initializer(ModelBuilder::float_tensor("wa", {8, 8, 1, 1}, random_values(64, 1)));
  b.initializer(ModelBuilder::float_tensor("wd", {16, 8, 1, 1}, random_values(128, 2)));
  b.initializer(ModelBuilder::float_tensor("wb", {16, 8, 3, 3}, random_values(1152, 3)));
  b.initializer(ModelBuilder::float_tensor("wc", {4, 16, 1, 1}, random_values(64, 4)));
  b.node("Conv", {"x", "wa"}, {"a"}, "convA");
  b.node("Relu", {"a"}, {"ra"});
  b.node("Conv", {"x", "wd"}, {"d"}, "convD");
  auto& conv_b = b.node("Conv", {"ra", "wb"}, {"cb"}, "convB");
  ModelBuilder::attr_ints(conv_b, "pads", {1, 1, 1, 1});
  b.node("Add", {"cb", "d"}, {"s"});
  b.node("Relu", {"s"}, {"r"});
  b.node("Conv", {"r", "wc"}, {"y"}, "convC");
  if (reuse_shortcut) b.node("Mul", {"d", "d"}, {"y2"});
  auto m = kiln::test::import(b);
  auto spec = kiln::ir::specialize(*m.graph, {{"x", {kiln::ir::DType::Float32, {1, 8, 8, 8}}}}, kiln::ref::constant_evaluator());
  return kiln::cpu::lower(*m.graph, spec);
}

const kiln::cpu::Step& step_of(const kiln::cpu::Program& p, const std::string& node) {
  for (const auto& s : p.steps)
    if (s.label.find("'" + node + "'") != std::string::npos) return s;
  throw std::runtime_error("no step for " + node);
}

}  // namespace

// The shortcut's buffer dies at the sum: the destination takes it, so the
// residual is not copied into the destination first.
TEST(CpuLowering, TheSumPostOpWritesIntoTheResidualsBuffer) {
  const auto p = lower_bottleneck(false);
  const auto& sum = step_of(p, "convB");
  ASSERT_GE(sum.args.size(), 3u);  // source, residual, destination (, scratchpad)
  EXPECT_EQ(sum.args[1], sum.args[2]);
  EXPECT_EQ(std::vector<char>(sum.writes.begin(), sum.writes.begin() + 3), (std::vector<char>{0, 0, 1}));
}

TEST(CpuLowering, AResidualReadLaterKeepsItsBuffer) {
  const auto p = lower_bottleneck(true);
  const auto& sum = step_of(p, "convB");
  ASSERT_GE(sum.args.size(), 3u);
  EXPECT_NE(sum.args[1], sum.args[2]);
}

// A primitive's scratchpad is the last buffer of its step, in the arena, and
// planned like any value that lives for that step alone: steps share it.
TEST(CpuLowering, ScratchpadsAreArenaBuffersOfOneStep) {
  const auto p = lower_bottleneck(false);
  int with_scratchpad = 0;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const auto& step = p.steps[s];
    for (size_t a = 0; a < step.args.size(); ++a) {
      const auto& buffer = p.buffers[size_t(step.args[a])];
      if (buffer.name.find("#scratchpad") == std::string::npos) continue;
      ++with_scratchpad;
      EXPECT_EQ(a + 1, step.args.size()) << step.label;
      EXPECT_EQ(buffer.kind, kiln::cpu::Buffer::Kind::Arena);
      EXPECT_EQ(step.writes[a], 1);
      EXPECT_LE(buffer.offset + buffer.bytes, p.arena_bytes);
      for (size_t t = 0; t < p.steps.size(); ++t)
        if (t != s) EXPECT_EQ(std::count(p.steps[t].args.begin(), p.steps[t].args.end(), step.args[a]), 0);
    }
  }
  if (with_scratchpad == 0) GTEST_SKIP() << "oneDNN chose implementations without a scratchpad on this CPU";
}

// Native bundles run no libkiln code: where the JIT's lowering uses a host
// kernel (Slice, Gather, a plain Concat, an output copy), the NativeBundle
// family calls a portable kernel instead; convolutions stay oneDNN primitives,
// described but not made.
TEST(CpuLowering, NativeBundlesHaveNoHostKernelsButOneDnnPrimitives) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {1, 4, 6, 6}).input("idx", onnx::TensorProto::INT64, {3});
  b.output("y", onnx::TensorProto::FLOAT, {1, 4, 4, 6}).output("g", onnx::TensorProto::FLOAT, {1, 3, 6, 6});
  b.output("x_again", onnx::TensorProto::FLOAT, {1, 4, 6, 6});
  b.initializer(ModelBuilder::float_tensor("w", {4, 4, 1, 1}, random_values(16, 1)));
  b.initializer(ModelBuilder::int64_tensor("starts", {1}, {1})).initializer(ModelBuilder::int64_tensor("ends", {1}, {3}));
  b.initializer(ModelBuilder::int64_tensor("axes", {1}, {2}));
  b.node("Conv", {"x", "w"}, {"c"}, "conv");
  b.node("Slice", {"x", "starts", "ends", "axes"}, {"s"}, "slice");
  ModelBuilder::attr_int(b.node("Concat", {"s", "s"}, {"y"}, "concat"), "axis", 2);
  ModelBuilder::attr_int(b.node("Gather", {"c", "idx"}, {"g"}, "gather"), "axis", 1);
  b.node("Identity", {"x"}, {"x_again"});
  auto m = kiln::test::import(b);
  auto spec =
      kiln::ir::specialize(*m.graph, {{"x", {kiln::ir::DType::Float32, {1, 4, 6, 6}}}, {"idx", {kiln::ir::DType::Int64, {3}}}},
                           kiln::ref::constant_evaluator());
  const auto jit = kiln::cpu::lower(*m.graph, spec, kiln::cpu::KernelFamily::Native);
  const auto bundle = kiln::cpu::lower(*m.graph, spec, kiln::cpu::KernelFamily::NativeBundle);
  for (const char* node : {"slice", "concat", "gather"}) {
    EXPECT_TRUE(step_of(jit, node).kernel) << node;
    EXPECT_TRUE(step_of(bundle, node).call) << node;
  }
  EXPECT_TRUE(step_of(bundle, "conv").kernel && kiln::cpu::is_onednn_kernel(*step_of(bundle, "conv").kernel));
  for (const auto& s : bundle.steps)
    EXPECT_TRUE(!s.kernel || kiln::cpu::is_onednn_kernel(*s.kernel)) << s.label << " runs a host kernel";
  EXPECT_EQ(bundle.fallback_nodes, 0);
  // The bundle makes its primitives from their descriptors: none is made here.
  const kiln::cpu::Step& conv = step_of(bundle, "conv");
  std::vector<std::vector<float>> buffers;
  std::vector<void*> args;
  for (int b : conv.args) args.push_back(buffers.emplace_back(size_t(bundle.buffers[size_t(b)].bytes) / 4 + 1).data());
  try {
    conv.kernel->run(args.data());
    FAIL() << "ran";
  } catch (const kiln::ir::Error& e) {
    EXPECT_NE(std::string(e.what()).find("before its primitive was created"), std::string::npos) << e.what();
  }
}

// A strided 1x1 convolution reads a subsampled copy of its input: one
// reorder from a strided view of the input's plain bytes (no full-size copy
// first), then a unit-stride convolution over the copy. An axis whose length
// is not a multiple of its stride keeps the strided convolution.
TEST(CpuLowering, AStridedPointwiseConvolutionRunsOnASubsampledCopy) {
  auto lower = [](int64_t height, int64_t width) {  // the output is 5x3 either way
    ModelBuilder b;
    b.input("x", onnx::TensorProto::FLOAT, {2, 8, height, width}).output("y", onnx::TensorProto::FLOAT, {2, 16, 5, 3});
    b.initializer(ModelBuilder::float_tensor("w", {16, 8, 1, 1}, random_values(128, 1)));
    ModelBuilder::attr_ints(b.node("Conv", {"x", "w"}, {"y"}, "conv"), "strides", {2, 3});
    auto m = kiln::test::import(b);
    auto spec = kiln::ir::specialize(*m.graph, {{"x", {kiln::ir::DType::Float32, {2, 8, height, width}}}},
                                     kiln::ref::constant_evaluator());
    return kiln::cpu::lower(*m.graph, spec);
  };
  const auto odd = lower(9, 7);
  for (const auto& s : odd.steps) EXPECT_EQ(s.label.find("subsample"), std::string::npos) << s.label;

  // Where oneDNN picks a blocked layout for the unit-stride convolution, the lowering cannot view the input so.
  using md = dnnl::memory::desc;
  const auto any = dnnl::memory::format_tag::any;
  const auto f32 = dnnl::memory::data_type::f32;
  const dnnl::convolution_forward::desc unit(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                             md({2, 8, 5, 3}, f32, any), md({16, 8, 1, 1}, f32, any), md({2, 16, 5, 3}, f32, any),
                                             {1, 1}, {0, 0}, {0, 0});
  if (dnnl::convolution_forward::primitive_desc(unit, kiln::cpu::cpu_engine()).src_desc().data.format_desc.blocking.inner_nblks)
    GTEST_SKIP() << "oneDNN chose a blocked layout on this CPU: the convolution reads the input with its stride";

  const auto p = lower(10, 9);
  const auto& conv = step_of(p, "conv");
  const auto& copy = p.buffers[size_t(conv.args[0])];
  EXPECT_NE(copy.name.find("#subsampled"), std::string::npos) << copy.name;
  EXPECT_EQ(copy.bytes, 2 * 8 * 5 * 3 * int64_t(sizeof(float)));
  const auto& subsample = p.steps[0];  // the first step: nothing copied the input before
  EXPECT_NE(subsample.label.find("subsample x"), std::string::npos) << subsample.label;
  EXPECT_EQ(p.buffers[size_t(subsample.args[0])].kind, kiln::cpu::Buffer::Kind::Input);
  EXPECT_EQ(subsample.args[1], conv.args[0]);
}

// A ConvTranspose whose kernel is as large as its stride is a 1x1
// convolution to every tap's channels, then one copy to the pixels; an
// overlapping kernel stays oneDNN's deconvolution.
TEST(CpuLowering, AConvTransposeWhoseKernelIsItsStrideIsAConvolutionAndACopy) {
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << kAvx512Only;
  auto lower = [](int64_t kernel) {
    ModelBuilder b;
    b.input("x", onnx::TensorProto::FLOAT, {2, 8, 5, 6}).output("y", onnx::TensorProto::FLOAT, {2, 4, 10, 12});
    b.initializer(ModelBuilder::float_tensor("w", {8, 4, kernel, kernel}, random_values(size_t(32 * kernel * kernel), 1)));
    auto& n = b.node("ConvTranspose", {"x", "w"}, {"y"}, "up");
    ModelBuilder::attr_ints(n, "strides", {2, 2});
    if (kernel == 4) ModelBuilder::attr_ints(n, "pads", {1, 1, 1, 1});
    auto m = kiln::test::import(b);
    auto spec =
        kiln::ir::specialize(*m.graph, {{"x", {kiln::ir::DType::Float32, {2, 8, 5, 6}}}}, kiln::ref::constant_evaluator());
    return kiln::cpu::lower(*m.graph, spec);
  };
  const auto p = lower(2);
  const auto& conv = step_of(p, "up");
  const auto& taps = p.buffers[size_t(conv.args[1])];  // after the source; a scratchpad may follow
  EXPECT_NE(taps.name.find("#taps"), std::string::npos) << taps.name;
  EXPECT_EQ(taps.bytes, 2 * 16 * 5 * 6 * int64_t(sizeof(float)));  // 4 taps x 4 channels for each input pixel
  const auto copy =
      std::find_if(p.steps.begin(), p.steps.end(), [](const auto& s) { return s.label.rfind("taps to pixels", 0) == 0; });
  ASSERT_NE(copy, p.steps.end());
  EXPECT_EQ(copy->args[0], conv.args[1]);
  EXPECT_EQ(p.buffers[size_t(copy->args[1])].kind, kiln::cpu::Buffer::Kind::Output);  // straight into the caller's buffer

  for (const auto& s : lower(4).steps) EXPECT_EQ(s.label.find("taps"), std::string::npos) << s.label;
}

// A convolution with a large input or output computes in 16-channel blocks
// (24 output channels padded to 32), a small one in the layout oneDNN picks.
TEST(CpuLowering, LargeConvolutionsComputeInChannelBlocks) {
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << kAvx512Only;
  auto conv_destination = [](int64_t side) {
    ModelBuilder b;
    b.input("x", onnx::TensorProto::FLOAT, {1, 16, side, side}).output("y", onnx::TensorProto::FLOAT, {1, 24, side, side});
    b.initializer(ModelBuilder::float_tensor("w", {24, 16, 1, 1}, random_values(384, 1)));
    b.node("Conv", {"x", "w"}, {"y"}, "conv");
    auto m = kiln::test::import(b);
    auto spec =
        kiln::ir::specialize(*m.graph, {{"x", {kiln::ir::DType::Float32, {1, 16, side, side}}}}, kiln::ref::constant_evaluator());
    const auto p = kiln::cpu::lower(*m.graph, spec);
    for (int a : step_of(p, "conv").args)
      if (p.buffers[size_t(a)].name == "y") return p.buffers[size_t(a)].bytes;
    return int64_t(-1);
  };
  for (int64_t side : {32, 256}) {  // the output: 96 KiB, 6 MiB
    const int64_t pixels = side * side, plain = 24 * pixels * 4;
    const bool blocks = plain >= kiln::cpu::Tuning::of({}).channel_blocks_from;
    EXPECT_EQ(conv_destination(side), blocks ? 32 * pixels * 4 : plain) << side << "x" << side;
  }
}

// The cpu backend's tuning comes from CompileOptions where set (the operator
// suite's configurations use that), else from the environment, and enters
// the backend's identity, so the cache keys.
TEST(CpuLowering, TuningComesFromTheOptionsBeforeTheEnvironment) {
  ::setenv("KILN_CHANNEL_BLOCKS_FROM", "123", 1);
  ::setenv("KILN_WINOGRAD", "2", 1);
  kiln::backends::CompileOptions o;
  EXPECT_THROW(kiln::cpu::Tuning::of(o), kiln::ir::Error);  // KILN_WINOGRAD=2 is neither 0 nor 1
  o.winograd = false;
  EXPECT_EQ(kiln::cpu::Tuning::of(o).channel_blocks_from, 123);
  EXPECT_FALSE(kiln::cpu::Tuning::of(o).winograd);
  o.channel_blocks_from = 0;
  EXPECT_EQ(kiln::cpu::Tuning::of(o).channel_blocks_from, 0);
  const auto cpu = kiln::backends::make_backend("cpu", 1);
  EXPECT_NE(cpu->identity(o).find("channel_blocks_from=0 winograd=0"), std::string::npos) << cpu->identity(o);
  ::unsetenv("KILN_CHANNEL_BLOCKS_FROM");
  ::unsetenv("KILN_WINOGRAD");
  EXPECT_NE(cpu->identity({}).find("channel_blocks_from=6291456 winograd=1"), std::string::npos) << cpu->identity({});
}

// oneDNN 2.6 has only its reference kernel for a per-channel binary op on
// some blockings (8-channel blocks on AVX-512, which it picks for RegNet's
// grouped convolutions; a plain operand of a 16-channel blocked tensor):
// 100x slower than its own jit kernels. The lowering takes another way
// whatever layouts this CPU gets.
TEST(CpuLowering, PerChannelScalesNeverRunOneDnnsReferenceBinaryKernel) {
  for (const int64_t group : {1, 6}) {
    ModelBuilder b;
    b.input("x", onnx::TensorProto::FLOAT, {2, 48, 56, 56}).output("y", onnx::TensorProto::FLOAT, {2, 48, 56, 56});
    b.initializer(ModelBuilder::float_tensor("w", {48, 48 / group, 3, 3}, random_values(size_t(48 * 48 / group * 9), 2)));
    auto& conv = b.node("Conv", {"x", "w"}, {"c"}, "conv");
    ModelBuilder::attr_ints(conv, "pads", {1, 1, 1, 1});
    ModelBuilder::attr_int(conv, "group", group);
    b.node("GlobalAveragePool", {"c"}, {"g"});
    b.node("Sigmoid", {"g"}, {"s"});
    b.node("Mul", {"c", "s"}, {"y"}, "scale");
    auto m = kiln::test::import(b);
    auto spec =
        kiln::ir::specialize(*m.graph, {{"x", {kiln::ir::DType::Float32, {2, 48, 56, 56}}}}, kiln::ref::constant_evaluator());
    const auto p = kiln::cpu::lower(*m.graph, spec);
    for (const auto& step : p.steps)
      if (step.kernel && kiln::cpu::is_onednn_kernel(*step.kernel))
        EXPECT_NE(static_cast<const kiln::cpu::OneDnnKernel&>(*step.kernel).implementation().substr(0, 3), "ref")
            << "group " << group << ": " << step.label;
  }
}

TEST(CpuLowering, ResizesWithOneDnnsTapsBecomeItsResampling) {
  struct Resize {
    std::string mode, coordinates, nearest;
    int64_t out;
    bool onednn;
  };
  for (const Resize& r : std::vector<Resize>{{"nearest", "asymmetric", "floor", 12, true},
                                             {"nearest", "half_pixel", "round_prefer_floor", 18, true},
                                             {"linear", "half_pixel", "", 15, true},
                                             {"linear", "pytorch_half_pixel", "", 4, true},
                                             {"nearest", "asymmetric", "floor", 9, false},  // oneDNN would round
                                             {"nearest", "half_pixel", "floor", 12, false},
                                             {"linear", "align_corners", "", 12, false},
                                             {"cubic", "half_pixel", "", 12, false}}) {
    SCOPED_TRACE(r.mode + " " + r.coordinates + " " + r.nearest + " to " + std::to_string(r.out));
    ModelBuilder b;
    b.input("x", onnx::TensorProto::FLOAT, {2, 16, 6, 6}).output("y", onnx::TensorProto::FLOAT, {2, 16, r.out, r.out});
    b.initializer(ModelBuilder::int64_tensor("sizes", {4}, {2, 16, r.out, r.out}));
    auto& resize = b.node("Resize", {"x", "", "", "sizes"}, {"y"});
    ModelBuilder::attr_string(resize, "mode", r.mode);
    ModelBuilder::attr_string(resize, "coordinate_transformation_mode", r.coordinates);
    if (!r.nearest.empty()) ModelBuilder::attr_string(resize, "nearest_mode", r.nearest);
    auto m = kiln::test::import(b);
    auto spec =
        kiln::ir::specialize(*m.graph, {{"x", {kiln::ir::DType::Float32, {2, 16, 6, 6}}}}, kiln::ref::constant_evaluator());
    const auto p = kiln::cpu::lower(*m.graph, spec);
    EXPECT_EQ(p.fallback_nodes, r.onednn ? 0 : 1);
    const bool resampling = std::any_of(p.steps.begin(), p.steps.end(), [](const kiln::cpu::Step& s) {
      return s.kernel && kiln::cpu::is_onednn_kernel(*s.kernel) &&
             static_cast<const kiln::cpu::OneDnnKernel&>(*s.kernel).primitive_kind() == dnnl::primitive::kind::resampling;
    });
    EXPECT_EQ(resampling, r.onednn);
  }
}

// The split hint of portable convolutions: a convolution read only by
// depthwise convolutions (an inverted residual block's expansion) splits by
// channel, as they do; the others (the projection, read by the model's
// output; the depthwise one, read by a 1x1 product) leave it to the kernel.
TEST(CpuLowering, ExpansionsReadByDepthwiseConvolutionsSplitByChannel) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {1, 4, 8, 8}).output("y", onnx::TensorProto::FLOAT, {1, 4, 8, 8});
  b.initializer(ModelBuilder::float_tensor("we", {24, 4, 1, 1}, random_values(96, 1)));
  b.initializer(ModelBuilder::float_tensor("wd", {24, 1, 3, 3}, random_values(216, 2)));
  b.initializer(ModelBuilder::float_tensor("wp", {4, 24, 1, 1}, random_values(96, 3)));
  b.node("Conv", {"x", "we"}, {"e"}, "expand");
  b.node("Relu", {"e"}, {"re"});
  auto& dw = b.node("Conv", {"re", "wd"}, {"d"}, "depthwise");
  ModelBuilder::attr_int(dw, "group", 24);
  ModelBuilder::attr_ints(dw, "pads", {1, 1, 1, 1});
  b.node("Conv", {"d", "wp"}, {"y"}, "project");
  auto m = kiln::test::import(b);
  auto spec = kiln::ir::specialize(*m.graph, {{"x", {kiln::ir::DType::Float32, {1, 4, 8, 8}}}}, kiln::ref::constant_evaluator());
  const auto p = kiln::cpu::lower(*m.graph, spec, kiln::cpu::KernelFamily::Portable);
  auto split = [&](const char* node) {
    const kiln::cpu::Step& s = step_of(p, node);
    if (!s.call || s.call->function != "kiln_pk_conv2d")
      throw std::runtime_error(std::string(node) + " is no kiln_pk_conv2d call");
    const auto& arg = s.call->args[s.call->args.size() - 2];  // before the scratch
    EXPECT_EQ(arg.kind, kiln::cpu::Call::Arg::Kind::Int32) << node;
    return arg.value;
  };
  EXPECT_EQ(split("expand"), KILN_PK_SPLIT_CHANNELS);
  EXPECT_EQ(split("depthwise"), KILN_PK_SPLIT_ANY);
  EXPECT_EQ(split("project"), KILN_PK_SPLIT_ANY);
}

// A 3x3 unit-stride convolution over whole 16-channel blocks runs oneDNN's
// Winograd kernel where this CPU has one; other convolutions keep the direct
// ones.
TEST(CpuLowering, ThreeByThreeConvolutionsInChannelBlocksUseWinograd) {
  struct Conv {
    const char* name;
    int64_t in_channels, stride;
    bool winograd;
  };
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {1, 16, 12, 12}).input("z", onnx::TensorProto::FLOAT, {1, 3, 12, 12});
  std::vector<Conv> convs = {{"unit", 16, 1, true}, {"strided", 16, 2, false}, {"image", 3, 1, false}};
  for (const Conv& c : convs) {
    b.output(std::string("y_") + c.name, onnx::TensorProto::FLOAT, {1, 32, 12 / c.stride, 12 / c.stride});
    b.initializer(ModelBuilder::float_tensor(std::string("w_") + c.name, {32, c.in_channels, 3, 3},
                                             random_values(size_t(32 * c.in_channels * 9), 1)));
    auto& n = b.node("Conv", {c.in_channels == 16 ? "x" : "z", std::string("w_") + c.name}, {std::string("y_") + c.name}, c.name);
    ModelBuilder::attr_ints(n, "pads", {1, 1, 1, 1});
    ModelBuilder::attr_ints(n, "strides", {c.stride, c.stride});
  }
  auto m = kiln::test::import(b);
  auto spec = kiln::ir::specialize(
      *m.graph, {{"x", {kiln::ir::DType::Float32, {1, 16, 12, 12}}}, {"z", {kiln::ir::DType::Float32, {1, 3, 12, 12}}}},
      kiln::ref::constant_evaluator());
  const auto p = kiln::cpu::lower(*m.graph, spec);
  if (!kiln::cpu::Tuning::of({}).winograd) GTEST_SKIP() << "KILN_WINOGRAD=0";
  for (const Conv& c : convs) {
    const auto& kernel = static_cast<const kiln::cpu::OneDnnKernel&>(*step_of(p, c.name).kernel);
    const bool winograd = kernel.implementation().find("wino") != std::string::npos;
    if (c.winograd && !winograd && kernel.implementation().find("avx512") == std::string::npos)
      GTEST_SKIP() << "oneDNN has Winograd kernels on AVX-512 only; here: " << kernel.implementation();
    EXPECT_EQ(winograd, c.winograd) << c.name << ": " << kernel.implementation();
  }
}

namespace {

// The saved kernel made again from its bytes, as a warm start does; `edit`
// changes what was saved first.
std::unique_ptr<kiln::cpu::Kernel> save_and_load(const kiln::cpu::OneDnnKernel& kernel,
                                                 const std::function<void(nlohmann::json&)>& edit = {}) {
  kiln::backends::WeightsWriter weights;
  kiln::backends::BlockWriter blocks;
  nlohmann::json saved;
  kernel.save(saved, weights, blocks);
  if (edit) edit(saved);
  static std::list<std::string> kept;  // the loaded kernels' weights point into these
  std::string& bytes = kept.emplace_back(size_t(weights.size()), '\0');
  for (const auto& [offset, chunk] : weights.chunks()) std::memcpy(bytes.data() + offset, chunk.first, chunk.second);
  const std::string& program = kept.emplace_back(blocks.finish({{"kernel", saved}}));
  const kiln::backends::BlockReader read(program, "the test's program");
  return kiln::cpu::OneDnnKernel::load(read.document()["kernel"], kiln::cpu::WeightsReader(bytes.data(), bytes.size()), read,
                                       "the test's kernel");
}

}  // namespace

// A convolution can take the next of oneDNN's jit implementations (here by
// policy; by timing, only when making the preferred one took long): it reads
// and writes the same layouts, its weights are reordered for it, and a saved
// program makes that implementation again, not the preferred one.
TEST(CpuLowering, AConvolutionCanTakeAnotherImplementationAndKeepsItThroughTheCache) {
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << kAvx512Only;
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {1, 4, 1000}).output("y", onnx::TensorProto::FLOAT, {1, 32, 1000});
  b.initializer(ModelBuilder::float_tensor("w", {32, 4, 3}, random_values(384, 1)));
  b.initializer(ModelBuilder::float_tensor("bias", {32}, random_values(32, 2)));
  auto& conv = b.node("Conv", {"x", "w", "bias"}, {"c"}, "conv");
  ModelBuilder::attr_ints(conv, "pads", {1, 1});
  b.node("Relu", {"c"}, {"y"});
  auto m = kiln::test::import(b);
  auto spec = kiln::ir::specialize(*m.graph, {{"x", {kiln::ir::DType::Float32, {1, 4, 1000}}}}, kiln::ref::constant_evaluator());
  std::vector<kiln::cpu::ImplementationTrial> trials;
  auto p = kiln::cpu::lower(*m.graph, spec, kiln::cpu::KernelFamily::Native, nullptr, &trials);
  ASSERT_EQ(trials.size(), 1u);
  const std::string preferred = static_cast<const kiln::cpu::OneDnnKernel&>(*step_of(p, "conv").kernel).implementation();

  kiln::cpu::ThreadBudget budget(2);
  EXPECT_EQ(kiln::cpu::choose_implementations(p, trials, budget, kiln::cpu::TrialPolicy::Off), 0);
  ASSERT_EQ(kiln::cpu::choose_implementations(p, trials, budget, kiln::cpu::TrialPolicy::Other), 1) << "preferred: " << preferred;
  const auto& other = static_cast<const kiln::cpu::OneDnnKernel&>(*step_of(p, "conv").kernel);
  EXPECT_NE(other.implementation(), preferred);
  EXPECT_EQ(other.implementation().substr(0, 3), "jit");
  EXPECT_GT(other.implementation_index(), 0);

  const auto loaded = save_and_load(other);
  const auto& again = static_cast<const kiln::cpu::OneDnnKernel&>(*loaded);
  EXPECT_EQ(again.implementation(), other.implementation());
  EXPECT_EQ(again.implementation_index(), other.implementation_index());

  // An entry naming an implementation oneDNN does not offer there is refused
  // (the cache then compiles again), never made with another one.
  const std::vector<std::function<void(nlohmann::json&)>> edits = {
      [](nlohmann::json& i) { i[1] = "jit:elsewhere"; },
      [](nlohmann::json& i) { i[0] = 99; },
      [](nlohmann::json& i) { i = "jit"; },
  };
  for (const auto& edit : edits) {
    try {
      save_and_load(other, [&](nlohmann::json& saved) { edit(saved["primitive"]["implementation"]); });
      ADD_FAILURE() << "loaded";
    } catch (const kiln::ir::Error& e) {
      EXPECT_EQ(e.kind(), kiln::ir::ErrorKind::InvalidModel);
      EXPECT_NE(std::string(e.what()).find("implementation"), std::string::npos) << e.what();
    }
  }
}

// A quantizing reorder's scale and zero point are saved with it and made
// again; a saved program whose quantization attributes were tampered with
// (an argument they cannot apply to, no values, the wrong type, values
// oneDNN refuses) is an InvalidModel error, never a primitive that computes
// something else.
TEST(CpuLowering, SavedQuantizationAttributesAreCheckedWhenLoaded) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  const dnnl::memory::desc from({1, 4}, dt::f32, tag::ab), to({1, 4}, dt::u8, tag::ab);
  dnnl::primitive_attr attr = kiln::cpu::user_scratchpad();
  attr.set_output_scales(0, {0.5f});
  attr.set_zero_points(DNNL_ARG_DST, 0, {3});
  kiln::cpu::OneDnnKernel kernel(dnnl::reorder::primitive_desc(kiln::cpu::cpu_engine(), from, kiln::cpu::cpu_engine(), to, attr),
                                 {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}, {}, -1);
  kernel.create_primitive();
  float x[4] = {1, 2, 10, 600};
  auto run = [&](const kiln::cpu::Kernel& k) {
    uint8_t y[4] = {0};
    void* args[2] = {x, y};
    k.run(args);
    return std::vector<int>(y, y + 4);
  };
  const std::vector<int> want{4, 4, 8, 255};  // round-half-even(x / 2) + 3, saturated
  EXPECT_EQ(run(kernel), want);
  EXPECT_EQ(run(*save_and_load(kernel)), want);

  const std::vector<std::pair<const char*, std::function<void(nlohmann::json&)>>> tampered = {
      {"zero points of an argument they cannot apply to", [](nlohmann::json& q) { q["zero_points"][0]["arg"] = 999; }},
      {"zero points without values", [](nlohmann::json& q) { q["zero_points"][0]["values"] = nlohmann::json::array(); }},
      {"output scales of the wrong type", [](nlohmann::json& q) { q["output_scales"]["values"] = "half"; }},
      {"a mask the values do not fill", [](nlohmann::json& q) { q["output_scales"]["mask"] = 3; }},
      {"scales of an argument a reorder lacks",
       [](nlohmann::json& q) { q["scales"] = {{{"arg", 999}, {"mask", 0}, {"values", {1}}}}; }},
  };
  for (const auto& [what, edit] : tampered) {
    SCOPED_TRACE(what);
    try {
      save_and_load(kernel, [&](nlohmann::json& saved) { edit(saved["primitive"]["quantization"]); });
      ADD_FAILURE() << "loaded";
    } catch (const kiln::ir::Error& e) {
      EXPECT_EQ(e.kind(), kiln::ir::ErrorKind::InvalidModel) << e.what();
    }
  }
}

// A product too small to share between threads (1x128 by 128x128) is made
// for one thread and runs on one; a large one runs on the run's team. The
// count survives the cache.
TEST(CpuLowering, SmallProductsRunOnOneThread) {
  kiln::cpu::OmpThreads two(2);
  for (const int64_t rows : {int64_t(1), int64_t(64)}) {
    ModelBuilder b;
    b.input("x", onnx::TensorProto::FLOAT, {rows, 128}).output("y", onnx::TensorProto::FLOAT, {rows, 128});
    b.initializer(ModelBuilder::float_tensor("w", {128, 128}, random_values(128 * 128, 5)));
    b.node("MatMul", {"x", "w"}, {"y"}, "product");
    auto m = kiln::test::import(b);
    auto spec = kiln::ir::specialize(*m.graph, {{"x", {kiln::ir::DType::Float32, {rows, 128}}}}, kiln::ref::constant_evaluator());
    const auto p = kiln::cpu::lower(*m.graph, spec);
    const auto& kernel = static_cast<const kiln::cpu::OneDnnKernel&>(*step_of(p, "product").kernel);
    EXPECT_EQ(kernel.threads(), rows == 1 ? 1 : 0) << rows << " rows";
    nlohmann::json saved;
    kiln::backends::WeightsWriter weights;
    kiln::backends::BlockWriter blocks;
    kernel.save(saved, weights, blocks);
    EXPECT_EQ(saved.value("threads", 0), rows == 1 ? 1 : 0) << rows << " rows";
  }
}
