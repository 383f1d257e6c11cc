// Reference kernels on cases the ONNX test data does not cover.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "backends/reference/reference_executor.hpp"
#include "model_builder.hpp"
#include "runtime/onnx/onnx_importer.hpp"

using kiln::ir::Tensor;
using kiln::test::ModelBuilder;

namespace {

std::vector<float> einsum(const std::string& equation, const std::vector<Tensor>& inputs) {
  ModelBuilder b(12);
  std::vector<std::string> names;
  for (size_t i = 0; i < inputs.size(); ++i) {
    names.push_back("x" + std::to_string(i));
    b.graph().add_input()->set_name(names.back());
  }
  b.output_untyped("y");
  auto& n = b.node("Einsum", names, {"y"});
  auto* a = n.add_attribute();
  a->set_name("equation");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(equation);
  std::string bytes = b.bytes();
  auto m = kiln::onnx_import::import_model_bytes(bytes.data(), bytes.size(), "einsum.onnx");
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) feeds[names[i]] = inputs[i];
  return kiln::ref::run_graph(*m.graph, feeds)[0].to_float_vector();
}

}  // namespace

TEST(ReferenceEinsum, DiagonalTraceImplicitOutputAndEllipsis) {
  Tensor m = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4});
  EXPECT_EQ(einsum("ii->i", {m}), (std::vector<float>{1, 4}));
  EXPECT_EQ(einsum("ii", {m}), (std::vector<float>{5}));
  EXPECT_EQ(einsum("ij,jk", {m, m}), (std::vector<float>{7, 10, 15, 22}));
  EXPECT_EQ(einsum("ji", {m}), (std::vector<float>{1, 3, 2, 4}));
  Tensor batch = Tensor::from_vector<float>({2, 1, 2}, {1, 2, 3, 4});
  // Batched row vectors times the matrix: [[7,10]], [[15,22]].
  EXPECT_EQ(einsum("...ij,jk->...ik", {batch, m}), (std::vector<float>{7, 10, 15, 22}));
}

TEST(ReferenceEinsum, BadEquationsAreErrors) {
  Tensor m = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_THROW(einsum("ij,jk->ik", {m}), kiln::ir::Error);
  EXPECT_THROW(einsum("ijk->i", {m}), kiln::ir::Error);
  EXPECT_THROW(einsum("ij,ij->i", {m, Tensor::from_vector<float>({3, 2}, {1, 2, 3, 4, 5, 6})}), kiln::ir::Error);
}

TEST(ReferenceTensor, HugeShapesAreErrorsNotOverflows) {
  EXPECT_THROW(Tensor(kiln::ir::DType::Float64, {int64_t(1) << 61}), kiln::ir::Error);
  EXPECT_THROW(Tensor(kiln::ir::DType::Float32, {int64_t(1) << 40, int64_t(1) << 30}), kiln::ir::Error);
  // Large but representable: the allocation fails cleanly.
  EXPECT_THROW(Tensor(kiln::ir::DType::UInt8, {int64_t(1) << 55}), kiln::ir::Error);
}

TEST(ReferenceEinsum, EllipsisOfHighRankAndRepeatedOutputLabels) {
  // Six ellipsis dims next to a real 'z' label: they must not collide.
  Tensor x(kiln::ir::DType::Float32, {1, 1, 1, 1, 1, 2, 3});
  for (int i = 0; i < 6; ++i) x.data<float>()[i] = float(i);
  EXPECT_EQ(einsum("...z->...", {x}), (std::vector<float>{3, 12}));
  Tensor m = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4});
  EXPECT_THROW(einsum("ij->ii", {m}), kiln::ir::Error);
}

// NonMaxSuppression over thousands of boxes, as a detector's exported per-class
// NMS makes it (classes shifted apart, one call), held against the rule
// applied to every pair: a candidate is kept unless a kept box's IoU with it
// exceeds the threshold; boxes of no area never suppress.
TEST(ReferenceNonMaxSuppression, ManyBoxesMatchThePairwiseRule) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> unit(0, 1);
  const int64_t n = 3000;
  std::vector<float> boxes, scores;
  for (int64_t i = 0; i < n; ++i) {
    const float shift = float(i % 30) * 2;  // 30 classes, one square apart
    float y = shift + unit(rng) * 0.8f, x = shift + unit(rng) * 0.8f, h = unit(rng) * 0.3f, w = unit(rng) * 0.3f;
    if (i % 97 == 0) h = 0;  // a line: no area
    if (i % 89 == 0)
      boxes.insert(boxes.end(), {y + h, x + w, y, x});  // corners the other way round
    else
      boxes.insert(boxes.end(), {y, x, y + h, x + w});
    scores.push_back(float(i % 50) / 50);  // ties keep the boxes' order
  }
  ModelBuilder b(11);
  for (const char* name : {"boxes", "scores", "max", "iou", "threshold"}) b.graph().add_input()->set_name(name);
  b.output_untyped("selected");
  b.node("NonMaxSuppression", {"boxes", "scores", "max", "iou", "threshold"}, {"selected"});
  const std::string bytes = b.bytes();
  auto m = kiln::onnx_import::import_model_bytes(bytes.data(), bytes.size(), "nms.onnx");
  const float iou = 0.3f, threshold = 0.1f;
  const auto got = kiln::ref::run_graph(*m.graph, {{"boxes", Tensor::from_vector<float>({1, n, 4}, boxes)},
                                                   {"scores", Tensor::from_vector<float>({1, 1, n}, scores)},
                                                   {"max", Tensor::from_vector<int64_t>({1}, {2000})},
                                                   {"iou", Tensor::from_vector<float>({1}, {iou})},
                                                   {"threshold", Tensor::from_vector<float>({1}, {threshold})}})[0];

  auto corner = [&](int64_t i, int k) { return double(boxes[size_t(i * 4 + k)]); };
  auto iou_of = [&](int64_t a, int64_t c) {
    double ay0 = std::min(corner(a, 0), corner(a, 2)), ay1 = std::max(corner(a, 0), corner(a, 2));
    double ax0 = std::min(corner(a, 1), corner(a, 3)), ax1 = std::max(corner(a, 1), corner(a, 3));
    double cy0 = std::min(corner(c, 0), corner(c, 2)), cy1 = std::max(corner(c, 0), corner(c, 2));
    double cx0 = std::min(corner(c, 1), corner(c, 3)), cx1 = std::max(corner(c, 1), corner(c, 3));
    double ih = std::min(ay1, cy1) - std::max(ay0, cy0), iw = std::min(ax1, cx1) - std::max(ax0, cx0);
    double area_a = (ay1 - ay0) * (ax1 - ax0), area_c = (cy1 - cy0) * (cx1 - cx0);
    if (ih <= 0 || iw <= 0 || area_a <= 0 || area_c <= 0) return 0.0;
    return ih * iw / (area_a + area_c - ih * iw);
  };
  std::vector<int64_t> order;
  for (int64_t i = 0; i < n; ++i)
    if (scores[size_t(i)] > threshold) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](int64_t l, int64_t r) { return scores[size_t(l)] > scores[size_t(r)]; });
  std::vector<int64_t> want;
  for (int64_t i : order) {
    if (int64_t(want.size()) >= 2000) break;
    bool keep = true;
    for (int64_t j : want) keep = keep && !(iou_of(i, j) > iou);
    if (keep) want.push_back(i);
  }
  ASSERT_GT(want.size(), 500u);
  ASSERT_LT(want.size(), order.size()) << "the case must suppress something";
  ASSERT_EQ(got.dims(), (kiln::ir::Dims{int64_t(want.size()), 3}));
  for (size_t k = 0; k < want.size(); ++k) ASSERT_EQ(got.as_int64(int64_t(k * 3 + 2)), want[k]) << "selection " << k;
}

namespace {

// com.microsoft's QLinearAdd on the given operands (all graph inputs).
std::vector<Tensor> qlinear_add(const std::vector<Tensor>& inputs) {
  ModelBuilder b;
  std::vector<std::string> names;
  for (size_t i = 0; i < inputs.size(); ++i) {
    names.push_back("x" + std::to_string(i));
    b.graph().add_input()->set_name(names.back());
  }
  b.output_untyped("y");
  b.node("QLinearAdd", names, {"y"}).set_domain("com.microsoft");
  auto* opset = b.model().add_opset_import();
  opset->set_domain("com.microsoft");
  opset->set_version(1);
  std::string bytes = b.bytes();
  auto m = kiln::onnx_import::import_model_bytes(bytes.data(), bytes.size(), "qlinear_add.onnx");
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) feeds[names[i]] = inputs[i];
  return kiln::ref::run_graph(*m.graph, feeds);
}

}  // namespace

// ONNX Runtime's contrib QLinearAdd, which the graph passes make from a
// dequantized Add: not in ONNX's schemas, so the hostile-shapes sweep
// cannot reach it; its refusals are checked here.
TEST(ReferenceQLinearAdd, AddsDequantizedValuesAndRefusesBadOperands) {
  const Tensor a = Tensor::from_vector<uint8_t>({4}, {10, 20, 30, 255});
  const Tensor b = Tensor::from_vector<uint8_t>({4}, {4, 8, 12, 0});
  const Tensor sa = Tensor::scalar<float>(0.5f), sb = Tensor::scalar<float>(0.25f), sc = Tensor::scalar<float>(2.0f);
  const Tensor za = Tensor::scalar<uint8_t>(6), zb = Tensor::scalar<uint8_t>(0), zc = Tensor::scalar<uint8_t>(10);
  // (0.5 (a - 6) + 0.25 b) / 2 + 10, rounded half to even and saturated.
  const auto y = qlinear_add({a, sa, za, b, sb, zb, sc, zc});
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0].dtype(), kiln::ir::DType::UInt8);
  std::vector<int> got;
  for (int64_t i = 0; i < 4; ++i) got.push_back(int(y[0].as_int64(i)));
  EXPECT_EQ(got, (std::vector<int>{12, 14, 18, 72}));
  const Tensor shorter = Tensor::from_vector<uint8_t>({3}, {1, 2, 3});
  EXPECT_THROW(qlinear_add({a, sa, za, shorter, sb, zb, sc, zc}), kiln::ir::Error);
  EXPECT_THROW(qlinear_add({a, Tensor::from_vector<float>({2}, {1, 2}), za, b, sb, zb, sc, zc}), kiln::ir::Error);
  EXPECT_THROW(qlinear_add({Tensor::from_vector<float>({4}, {1, 2, 3, 4}), sa, za, b, sb, zb, sc, zc}), kiln::ir::Error);
  EXPECT_THROW(qlinear_add({a, sa, za, b}), kiln::ir::Error);
  const Tensor column = Tensor::from_vector<uint8_t>({2, 1}, {10, 20});
  EXPECT_THROW(qlinear_add({Tensor::from_vector<uint8_t>({3, 4}, std::vector<uint8_t>(12, 1)), sa, za, column, sb, zb, sc, zc}),
               kiln::ir::Error);
}

namespace {

// com.microsoft's QGemm on the given operands (all graph inputs; an empty
// tensor is an omitted one), with `attrs` (transA, transB).
std::vector<Tensor> qgemm(const std::vector<Tensor>& inputs, const std::vector<std::pair<std::string, int64_t>>& attrs = {}) {
  ModelBuilder b;
  std::vector<std::string> names;
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    names.push_back(inputs[i].dtype() == kiln::ir::DType::Undefined ? "" : "x" + std::to_string(i));
    if (names.back().empty()) continue;
    b.graph().add_input()->set_name(names.back());
    feeds[names.back()] = inputs[i];
  }
  b.output_untyped("y");
  auto& node = b.node("QGemm", names, {"y"});
  node.set_domain("com.microsoft");
  for (const auto& [name, value] : attrs) ModelBuilder::attr_int(node, name, value);
  auto* opset = b.model().add_opset_import();
  opset->set_domain("com.microsoft");
  opset->set_version(1);
  std::string bytes = b.bytes();
  auto m = kiln::onnx_import::import_model_bytes(bytes.data(), bytes.size(), "qgemm.onnx");
  return kiln::ref::run_graph(*m.graph, feeds);
}

}  // namespace

// ONNX Runtime's contrib QGemm, which the graph passes make from a
// dequantized Gemm: (A - za)(B - zb) + C at scale a_scale b_scale[column],
// requantized, or float without y_scale.
TEST(ReferenceQGemm, MultipliesQuantizedMatricesAndRefusesBadOperands) {
  const Tensor a = Tensor::from_vector<uint8_t>({2, 2}, {10, 20, 30, 40});
  const Tensor bt = Tensor::from_vector<int8_t>({3, 2}, {1, -1, 2, 0, -3, 4});  // B transposed: 3 columns
  const Tensor sa = Tensor::scalar<float>(0.5f), za = Tensor::scalar<uint8_t>(10);
  const Tensor sb = Tensor::from_vector<float>({3}, {1, 0.5f, 0.25f}), zb = Tensor::from_vector<int8_t>({3}, {0, 0, 0});
  const Tensor c = Tensor::from_vector<int32_t>({3}, {4, -6, 8});
  const Tensor sy = Tensor::scalar<float>(2.0f), zy = Tensor::scalar<uint8_t>(100), none;
  // A - 10 = [[0, 10], [20, 30]]; times B: [[-10, 0, 40], [-10, 40, 60]]; plus C: [[-6, -6, 48], [-6, 34, 68]];
  // times 0.5 b_scale: [[-3, -1.5, 6], [-3, 8.5, 8.5]]; over 2, rounded half to even, plus 100.
  const auto y = qgemm({a, sa, za, bt, sb, zb, c, sy, zy}, {{"transB", 1}});
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0].dtype(), kiln::ir::DType::UInt8);
  std::vector<int> got;
  for (int64_t i = 0; i < y[0].numel(); ++i) got.push_back(int(y[0].as_int64(i)));
  EXPECT_EQ(got, (std::vector<int>{98, 99, 103, 98, 104, 104}));
  const auto f = qgemm({a, sa, za, bt, sb, zb, c, none, none}, {{"transB", 1}});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].dtype(), kiln::ir::DType::Float32);
  EXPECT_EQ(f[0].to_float_vector(), (std::vector<float>{-3, -1.5f, 6, -3, 8.5f, 8.5f}));
  EXPECT_THROW(qgemm({a, sa, za, bt, sb, zb, c, sy, zy}), kiln::ir::Error);  // B untransposed has 3 rows, A 2 columns
  EXPECT_THROW(qgemm({a, sa, za, bt, sb, zb, Tensor::from_vector<int32_t>({2}, {1, 2}), sy, zy}, {{"transB", 1}}),
               kiln::ir::Error);
  EXPECT_THROW(qgemm({a, sa, za, bt, sb, zb, Tensor::from_vector<float>({3}, {1, 2, 3}), sy, zy}, {{"transB", 1}}),
               kiln::ir::Error);
  EXPECT_THROW(qgemm({a, Tensor::from_vector<float>({2}, {1, 2}), za, bt, sb, zb, c, sy, zy}, {{"transB", 1}}), kiln::ir::Error);
  EXPECT_THROW(qgemm({Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4}), sa, za, bt, sb, zb, c, sy, zy}, {{"transB", 1}}),
               kiln::ir::Error);
}

// Broadcast as Add's operands are, either one or both.
TEST(ReferenceQLinearAdd, BroadcastsItsOperands) {
  const Tensor sa = Tensor::scalar<float>(0.5f), sb = Tensor::scalar<float>(0.25f), sc = Tensor::scalar<float>(2.0f);
  const Tensor za = Tensor::scalar<uint8_t>(6), zb = Tensor::scalar<uint8_t>(0), zc = Tensor::scalar<uint8_t>(10);
  const Tensor row = Tensor::from_vector<uint8_t>({3}, {10, 20, 30});
  const Tensor column = Tensor::from_vector<uint8_t>({2, 1}, {40, 80});
  // (0.5 (row - 6) + 0.25 column) / 2 + 10, rounded half to even.
  const std::vector<int> want{16, 18, 21, 21, 24, 26};
  for (bool swapped : {false, true}) {
    const auto y =
        swapped ? qlinear_add({column, sb, zb, row, sa, za, sc, zc}) : qlinear_add({row, sa, za, column, sb, zb, sc, zc});
    ASSERT_EQ(y.size(), 1u);
    EXPECT_EQ(y[0].dims(), (kiln::ir::Dims{2, 3}));
    std::vector<int> got;
    for (int64_t i = 0; i < y[0].numel(); ++i) got.push_back(int(y[0].as_int64(i)));
    EXPECT_EQ(got, want) << swapped;
  }
}
