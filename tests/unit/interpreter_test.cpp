// The cpu backend's interpreter (what it runs for shapes that depend on the
// data) against the reference: its oneDNN products in every layout Gemm and
// MatMul allow, and the cases it hands back to the reference kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "backends/backend.hpp"
#include "backends/reference/reference_executor.hpp"
#include "imported_model.hpp"
#include "random_data.hpp"

namespace {

using kiln::ir::Dims;
using kiln::ir::Tensor;
using kiln::test::ModelBuilder;

Tensor random(const Dims& dims, unsigned seed) {
  return Tensor::from_vector<float>(dims, kiln::test::random_values(size_t(kiln::ir::checked_numel(dims)), seed));
}

// One node over named inputs, run by the interpreter and by the reference.
void expect_same(const std::string& op, const std::vector<std::pair<std::string, Tensor>>& inputs,
                 const std::vector<std::pair<std::string, int64_t>>& int_attrs = {}, float alpha = 1, float beta = 1,
                 const std::function<void(onnx::NodeProto&)>& more_attrs = {}, int64_t opset = 13) {
  ModelBuilder b(opset);
  std::vector<std::string> names;
  std::map<std::string, Tensor> feeds;
  for (const auto& [name, t] : inputs) {
    b.graph().add_input()->set_name(name);
    names.push_back(name);
    feeds[name] = t;
  }
  b.output_untyped("y");
  auto& node = b.node(op, names, {"y"});
  for (const auto& [k, v] : int_attrs) ModelBuilder::attr_int(node, k, v);
  for (const auto& [k, v] : {std::pair<const char*, float>{"alpha", alpha}, {"beta", beta}}) {
    if (op != "Gemm") break;
    auto* a = node.add_attribute();
    a->set_name(k);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  if (more_attrs) more_attrs(node);
  const auto model = kiln::test::import(b);
  auto cpu = kiln::backends::make_backend("cpu", 2);
  auto interpreter = cpu->fallback();
  ASSERT_TRUE(interpreter);
  EXPECT_EQ(interpreter->name(), "interpreter");
  const Tensor got = interpreter->compile(model.graph, {}, {})->run(feeds)[0];
  const Tensor want = kiln::ref::run_graph(*model.graph, feeds)[0];
  ASSERT_EQ(got.dims(), want.dims());
  ASSERT_EQ(got.dtype(), want.dtype());
  const auto g = got.to_float_vector(), w = want.to_float_vector();
  for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(g[i], w[i], 1e-4f * (1 + std::fabs(w[i]))) << op << " element " << i;
}

TEST(Interpreter, GemmInEveryLayoutWithEveryBiasShape) {
  const int64_t m = 37, k = 70, n = 29;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      SCOPED_TRACE("transA " + std::to_string(ta) + " transB " + std::to_string(tb));
      const Tensor a = random(ta ? Dims{k, m} : Dims{m, k}, 1), b = random(tb ? Dims{n, k} : Dims{k, n}, 2);
      const std::vector<std::pair<std::string, int64_t>> attrs{{"transA", ta}, {"transB", tb}};
      expect_same("Gemm", {{"a", a}, {"b", b}}, attrs, 0.5f);
      for (const Dims& c : {Dims{n}, Dims{1, n}, Dims{m, 1}, Dims{m, n}, Dims{}})
        expect_same("Gemm", {{"a", a}, {"b", b}, {"c", random(c, 3)}}, attrs, 1.5f);
      expect_same("Gemm", {{"a", a}, {"b", b}, {"c", random({m, n}, 3)}}, attrs, 1, 2);  // beta: the reference's
    }
}

TEST(Interpreter, MatMulStacksBatchesAndWhatItLeavesToTheReference) {
  expect_same("MatMul", {{"a", random({2, 3, 5, 4}, 1)}, {"b", random({4, 6}, 2)}});
  expect_same("MatMul", {{"a", random({3, 5, 4}, 1)}, {"b", random({3, 4, 6}, 2)}});
  expect_same("MatMul", {{"a", random({5, 4}, 1)}, {"b", random({2, 4, 6}, 2)}});  // broadcast A
  expect_same("MatMul", {{"a", random({4}, 1)}, {"b", random({4, 6}, 2)}});        // a vector
  expect_same("MatMul", {{"a", random({0, 4}, 1)}, {"b", random({4, 6}, 2)}});     // no rows
}

// Boxes inside, across and outside the map (and degenerate ones), over
// two images, in both modes and both coordinate rules, with a fixed and an
// adaptive number of samples per cell.
TEST(Interpreter, RoiAlignMatchesTheReferenceInEveryMode) {
  const Tensor x = random({2, 5, 13, 17}, 4);
  const Tensor rois = Tensor::from_vector<float>(
      {6, 4}, {0, 0, 16, 12, 3.5f, 2.25f, 9, 7, -4, -3, 6, 5, 10, 8, 30, 25, 5, 5, 5, 5, 15, 11, 2, 1});
  const Tensor batch = Tensor::from_vector<int64_t>({6}, {0, 1, 1, 0, 1, 0});
  for (const char* mode : {"avg", "max"})
    for (const char* coord : {"half_pixel", "output_half_pixel"})
      for (int64_t sampling : {0, 2})
        for (float scale : {1.0f, 0.5f}) {
          SCOPED_TRACE(std::string(mode) + " " + coord + " sampling " + std::to_string(sampling) + " scale " +
                       std::to_string(scale));
          expect_same(
              "RoiAlign", {{"x", x}, {"rois", rois}, {"batch", batch}},
              {{"output_height", 3}, {"output_width", 4}, {"sampling_ratio", sampling}}, 1, 1,
              [&](onnx::NodeProto& n) {
                auto* s = n.add_attribute();
                s->set_name("spatial_scale");
                s->set_type(onnx::AttributeProto::FLOAT);
                s->set_f(scale);
                for (const auto& [k, v] :
                     {std::pair<const char*, const char*>{"mode", mode}, {"coordinate_transformation_mode", coord}}) {
                  auto* a = n.add_attribute();
                  a->set_name(k);
                  a->set_type(onnx::AttributeProto::STRING);
                  a->set_s(v);
                }
              },
              16);
        }
}

Tensor ints(const Dims& dims, int64_t lo, int64_t hi, unsigned seed) {
  std::vector<int64_t> v(size_t(kiln::ir::checked_numel(dims)));
  uint64_t state = seed * 2654435761u + 1;
  for (auto& x : v) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    x = lo + int64_t((state >> 33) % uint64_t(hi - lo));
  }
  return Tensor::from_vector<int64_t>(dims, v);
}
Tensor shape(const Dims& dims) { return Tensor::from_vector<int64_t>({int64_t(dims.size())}, dims); }

TEST(Interpreter, ExpandBroadcastsEveryWayTheReferenceDoes) {
  expect_same("Expand", {{"x", random({3, 1, 1, 1}, 1)}, {"s", shape({3, 4, 5, 6})}});  // a detector's level indices
  expect_same("Expand", {{"x", random({1, 5}, 1)}, {"s", shape({2, 3, 5})}});
  expect_same("Expand", {{"x", random({4, 1, 6}, 1)}, {"s", shape({4, 3, 6})}});
  expect_same("Expand", {{"x", random({2, 3, 4}, 1)}, {"s", shape({3, 1})}});  // a shorter shape keeps x's
  expect_same("Expand", {{"x", random({}, 1)}, {"s", shape({2, 3})}});
  expect_same("Expand", {{"x", random({0, 1}, 1)}, {"s", shape({0, 4})}});
  expect_same("Expand", {{"x", ints({2, 1}, -9, 9, 2)}, {"s", shape({2, 2, 3})}});
  EXPECT_THROW(expect_same("Expand", {{"x", random({2, 3}, 1)}, {"s", shape({4, 3})}}), kiln::ir::Error);
}

TEST(Interpreter, ComparisonsMatchTheReference) {
  // More than one chunk of 64 Ki elements, with ties and NaNs.
  Tensor a = random({3, 70001}, 11), b = random({3, 70001}, 12);
  float* pa = a.data<float>();
  const float* pb = b.data<float>();
  for (int64_t i = 0; i < a.numel(); i += 7) pa[i] = pb[i];
  pa[5] = std::nanf("");
  const Tensor threshold = Tensor::from_vector<float>({}, {0.05f});
  const Tensor one = Tensor::from_vector<float>({1, 1}, {pa[3]});
  const Tensor ints = Tensor::from_vector<int64_t>({2, 3}, {1, 5, -3, 7, 7, 0});
  const Tensor int_threshold = Tensor::from_vector<int64_t>({1}, {5});
  for (const std::string op : {"Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Equal"}) {
    SCOPED_TRACE(op);
    expect_same(op, {{"a", a}, {"b", b}});
    expect_same(op, {{"a", a}, {"b", threshold}});
    expect_same(op, {{"a", threshold}, {"b", a}});
    expect_same(op, {{"a", a}, {"b", one}});
    expect_same(op, {{"a", ints}, {"b", int_threshold}});
    expect_same(op, {{"a", int_threshold}, {"b", ints}});
    // Left to the reference: a broadcast of both sides, a single value of
    // higher rank than the other side, and a dtype with no loop here.
    expect_same(op, {{"a", random({3, 1}, 1)}, {"b", random({1, 4}, 2)}});
    expect_same(op, {{"a", Tensor::from_vector<float>({1, 1, 1}, {0.5f})}, {"b", random({4}, 3)}});
    expect_same(op, {{"a", Tensor::from_vector<int32_t>({3}, {1, 2, 3})}, {"b", Tensor::from_vector<int32_t>({3}, {3, 2, 1})}});
  }
}

TEST(Interpreter, NonZeroListsWhatTheReferenceLists) {
  // More than one chunk of 64 Ki elements, the hits spread over them.
  std::vector<bool> flags(3 * 70001);
  for (size_t i = 0; i < flags.size(); ++i) flags[i] = (i * 7919) % 13 < 5;
  std::vector<uint8_t> bytes(flags.begin(), flags.end());
  Tensor many(kiln::ir::DType::Bool, {3, 70001});
  std::copy(bytes.begin(), bytes.end(), many.data<bool>());
  expect_same("NonZero", {{"x", many}});
  expect_same("NonZero", {{"x", Tensor::from_vector<float>({2, 2, 3}, {0, -0.0f, 1, std::nanf(""), 0, 0, 2, 0, 0, 0, 0, -3})}});
  expect_same("NonZero", {{"x", ints({5, 4}, -2, 3, 9)}});
  expect_same("NonZero", {{"x", Tensor::from_vector<int32_t>({4}, {0, 5, 0, 7})}});
  expect_same("NonZero", {{"x", Tensor::from_vector<float>({2, 3}, std::vector<float>(6, 0))}});  // none: 2x0
  expect_same("NonZero", {{"x", Tensor::from_vector<float>({0, 3}, {})}});
  // Left to the reference: a scalar, a dtype with no loop here.
  expect_same("NonZero", {{"x", Tensor::from_vector<float>({}, {2})}});
  expect_same("NonZero", {{"x", Tensor::from_vector<uint8_t>({3}, {1, 0, 1})}});
}

// TopK has two outputs: both must match.
void expect_same_topk(const Tensor& x, int64_t k, int64_t axis, int64_t largest, int64_t sorted = 1) {
  SCOPED_TRACE("k " + std::to_string(k) + " axis " + std::to_string(axis) + " largest " + std::to_string(largest));
  ModelBuilder b(13);
  b.graph().add_input()->set_name("x");
  b.graph().add_input()->set_name("k");
  b.output_untyped("values");
  b.output_untyped("indices");
  auto& node = b.node("TopK", {"x", "k"}, {"values", "indices"});
  ModelBuilder::attr_int(node, "axis", axis);
  ModelBuilder::attr_int(node, "largest", largest);
  ModelBuilder::attr_int(node, "sorted", sorted);
  const auto model = kiln::test::import(b);
  const std::map<std::string, Tensor> feeds = {{"x", x}, {"k", Tensor::from_vector<int64_t>({1}, {k})}};
  auto cpu = kiln::backends::make_backend("cpu", 2);
  const auto got = cpu->fallback()->compile(model.graph, {}, {})->run(feeds);
  const auto want = kiln::ref::run_graph(*model.graph, feeds);
  for (size_t o = 0; o < 2; ++o) {
    ASSERT_EQ(got[o].dims(), want[o].dims());
    ASSERT_EQ(got[o].dtype(), want[o].dtype());
    const auto g = got[o].to_float_vector(), w = want[o].to_float_vector();
    for (size_t i = 0; i < w.size(); ++i)
      ASSERT_TRUE(g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i])))
          << "output " << o << " element " << i << ": " << g[i] << " vs " << w[i];
  }
}

TEST(Interpreter, TopKKeepsTheReferenceOrder) {
  // Ties (every value appears about five times) and NaNs, which rank above
  // every number.
  std::vector<float> v(4 * 300);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float((i * 37) % 61) - 30;
  v[10] = v[700] = v[701] = std::nanf("");
  const Tensor x = Tensor::from_vector<float>({4, 300}, v);
  for (int64_t largest : {1, 0})
    for (int64_t k : {0, 1, 17, 299, 300}) expect_same_topk(x, k, -1, largest);
  // Along a leading axis: rows are strided.
  const Tensor y = Tensor::from_vector<float>({300, 4}, v);
  expect_same_topk(y, 25, 0, 1);
  expect_same_topk(y, 25, -2, 0);
  // Left to the reference: integers, unsorted (which it sorts anyway), k out of range.
  expect_same_topk(ints({3, 50}, -5, 5, 3), 10, 1, 1);
  expect_same_topk(x, 5, 1, 1, 0);
  EXPECT_THROW(expect_same_topk(x, 301, 1, 1), kiln::ir::Error);
}

TEST(Interpreter, ConstantOfShapeFillsWithItsValue) {
  expect_same("ConstantOfShape", {{"s", shape({3, 4})}});
  expect_same("ConstantOfShape", {{"s", shape({0, 5})}});
  for (const auto& value : {ModelBuilder::float_tensor("value", {1}, {2.5f}), ModelBuilder::float_tensor("value", {1}, {0.0f})})
    expect_same("ConstantOfShape", {{"s", shape({5, 7})}}, {}, 1, 1,
                [&](onnx::NodeProto& n) { ModelBuilder::attr_tensor(n, "value", value); });
  onnx::TensorProto seven;
  seven.set_data_type(onnx::TensorProto::INT64);
  seven.add_dims(1);
  seven.add_int64_data(7);
  expect_same("ConstantOfShape", {{"s", shape({2, 3, 4})}}, {}, 1, 1,
              [&](onnx::NodeProto& n) { ModelBuilder::attr_tensor(n, "value", seven); });
}

// Indices of every sign, on every axis, with index shapes smaller than the
// data's (and larger along the axis), in both index types and for data of
// another element size.
TEST(Interpreter, ScatterElementsPutsEachUpdateWhereTheReferenceDoes) {
  const Tensor data = random({5, 4, 3, 3}, 1);
  expect_same("ScatterElements", {{"x", data}, {"i", ints({2, 4, 3, 3}, -5, 5, 2)}, {"u", random({2, 4, 3, 3}, 3)}});
  expect_same("ScatterElements", {{"x", data}, {"i", ints({5, 2, 3, 2}, -4, 4, 2)}, {"u", random({5, 2, 3, 2}, 3)}},
              {{"axis", 1}});
  expect_same("ScatterElements", {{"x", data}, {"i", ints({3, 4, 2, 2}, -3, 3, 2)}, {"u", random({3, 4, 2, 2}, 3)}},
              {{"axis", -1}});
  expect_same("ScatterElements",
              {{"x", data}, {"i", ints({5, 4, 3, 3}, 0, 3, 2).cast(kiln::ir::DType::Int32)}, {"u", random({5, 4, 3, 3}, 3)}},
              {{"axis", 2}});
  expect_same("ScatterElements",
              {{"x", ints({6, 3}, -100, 100, 4)}, {"i", ints({2, 3}, 0, 6, 5)}, {"u", ints({2, 3}, -100, 100, 6)}});
  expect_same("ScatterElements", {{"x", random({4}, 1)}, {"i", ints({0}, 0, 4, 2)}, {"u", random({0}, 3)}});
  // Many updates of each element, spread over the budget's threads: the last
  // one in order must win, on every axis.
  const Tensor big = random({16, 24, 40}, 7);
  expect_same("ScatterElements", {{"x", big}, {"i", ints({200, 24, 40}, 0, 16, 8)}, {"u", random({200, 24, 40}, 9)}});
  expect_same("ScatterElements", {{"x", big}, {"i", ints({16, 300, 40}, -24, 24, 8)}, {"u", random({16, 300, 40}, 9)}},
              {{"axis", 1}});
  expect_same("ScatterElements", {{"x", big}, {"i", ints({16, 24, 500}, 0, 40, 8)}, {"u", random({16, 24, 500}, 9)}},
              {{"axis", 2}});
  // Out of range: the reference's error, and nothing else.
  EXPECT_THROW(expect_same("ScatterElements", {{"x", data}, {"i", ints({1, 1, 1, 1}, 5, 6, 2)}, {"u", random({1, 1, 1, 1}, 3)}}),
               kiln::ir::Error);
}

std::function<void(onnx::NodeProto&)> string_attrs(std::vector<std::pair<std::string, std::string>> attrs) {
  return [attrs](onnx::NodeProto& n) {
    for (const auto& [k, v] : attrs) {
      auto* a = n.add_attribute();
      a->set_name(k);
      a->set_type(onnx::AttributeProto::STRING);
      a->set_s(v);
    }
  };
}

// The image and feature-map cases in every mode the fast path takes, by
// scales and by sizes; the cases it leaves to the reference (cubic, a crop
// with extrapolation, a resized channel axis) give the same results too.
TEST(Interpreter, ResizeMatchesTheReference) {
  const Tensor x = random({2, 3, 7, 9}, 1), none = Tensor::from_vector<float>({0}, {});
  const Tensor up = Tensor::from_vector<float>({4}, {1, 1, 2, 2}), mixed = Tensor::from_vector<float>({4}, {1, 1, 1.5f, 0.5f});
  for (const char* coord : {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"})
    for (const char* mode : {"nearest", "linear", "cubic"}) {
      SCOPED_TRACE(std::string(coord) + " " + mode);
      for (const Tensor& scales : {up, mixed})
        expect_same("Resize", {{"x", x}, {"roi", none}, {"scales", scales}}, {}, 1, 1,
                    string_attrs({{"mode", mode}, {"coordinate_transformation_mode", coord}}));
      expect_same("Resize", {{"x", x}, {"roi", none}, {"scales", none}, {"sizes", shape({2, 3, 4, 20})}}, {}, 1, 1,
                  string_attrs({{"mode", mode}, {"coordinate_transformation_mode", coord}}));
    }
  for (const char* nearest : {"round_prefer_ceil", "floor", "ceil"})
    expect_same("Resize", {{"x", x}, {"roi", none}, {"scales", mixed}}, {}, 1, 1, string_attrs({{"nearest_mode", nearest}}));
  expect_same("Resize", {{"x", x}, {"roi", none}, {"scales", Tensor::from_vector<float>({4}, {1, 2, 2, 1})}});  // channels too
  expect_same("Resize",
              {{"x", x}, {"roi", Tensor::from_vector<float>({8}, {0, 0, 0.2f, 0.1f, 1, 1, 0.9f, 1.2f})}, {"scales", up}}, {}, 1,
              1, string_attrs({{"mode", "linear"}, {"coordinate_transformation_mode", "tf_crop_and_resize"}}));
  expect_same("Upsample", {{"x", x}, {"scales", up}}, {}, 1, 1, string_attrs({{"mode", "linear"}}), 9);
}

// A crop whose leading axis keeps each coordinate but not the axis's length
// (the input's coordinates 0..2 and one outside it; or only 0..2 of 5) is
// the reference's to do, with its extrapolation value.
TEST(Interpreter, ResizeCropOfALeadingAxisMatchesTheReference) {
  const Tensor none = Tensor::from_vector<float>({0}, {});
  auto attrs = [](onnx::NodeProto& n) {
    string_attrs({{"mode", "nearest"}, {"coordinate_transformation_mode", "tf_crop_and_resize"}})(n);
    auto* a = n.add_attribute();
    a->set_name("extrapolation_value");
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(7.5f);
  };
  expect_same("Resize",
              {{"x", random({3, 2, 5, 6}, 2)},
               {"roi", Tensor::from_vector<float>({8}, {0, 0, 0, 0, 1.5f, 1, 1, 1})},
               {"scales", none},
               {"sizes", shape({4, 2, 5, 6})}},
              {}, 1, 1, attrs);
  expect_same("Resize",
              {{"x", random({5, 2, 5, 6}, 3)},
               {"roi", Tensor::from_vector<float>({8}, {0, 0, 0, 0, 0.5f, 1, 1, 1})},
               {"scales", none},
               {"sizes", shape({3, 2, 5, 6})}},
              {}, 1, 1, attrs);
}

// Growing and cropping pads on every axis, with and without a value, and
// other element sizes; the modes it leaves to the reference agree too.
TEST(Interpreter, PadMatchesTheReference) {
  const Tensor x = random({2, 3, 5, 4}, 1);
  const Tensor pads = Tensor::from_vector<int64_t>({8}, {0, 1, 2, 0, 1, 0, 3, 2}),
               crop = Tensor::from_vector<int64_t>({8}, {0, -1, 2, -1, 0, 0, -3, 1});
  for (const Tensor& p : {pads, crop}) {
    expect_same("Pad", {{"x", x}, {"pads", p}});
    expect_same("Pad", {{"x", x}, {"pads", p}, {"value", Tensor::from_vector<float>({}, {1.5f})}});
    expect_same("Pad", {{"x", ints({2, 3, 5, 4}, -9, 9, 3)}, {"pads", p}, {"value", Tensor::from_vector<int64_t>({}, {7})}});
    for (const char* mode : {"edge", "wrap", "reflect"}) {
      SCOPED_TRACE(mode);
      expect_same("Pad", {{"x", x}, {"pads", p}}, {}, 1, 1, string_attrs({{"mode", mode}}));
      expect_same("Pad", {{"x", ints({2, 3, 5, 4}, -9, 9, 3)}, {"pads", p}}, {}, 1, 1, string_attrs({{"mode", mode}}));
    }
  }
  // Pads longer than the axis (wrap and reflect go round more than once), an
  // axis of one, a 1-D tensor, a crop of the last axis past its start.
  for (const char* mode : {"edge", "wrap", "reflect"}) {
    SCOPED_TRACE(mode);
    expect_same("Pad", {{"x", random({3, 1, 4}, 2)}, {"pads", Tensor::from_vector<int64_t>({6}, {2, 3, 9, 4, 2, 7})}}, {}, 1, 1,
                string_attrs({{"mode", mode}}));
    expect_same("Pad", {{"x", random({6}, 3)}, {"pads", Tensor::from_vector<int64_t>({2}, {5, 0})}}, {}, 1, 1,
                string_attrs({{"mode", mode}}));
    expect_same("Pad", {{"x", random({2, 6}, 4)}, {"pads", Tensor::from_vector<int64_t>({4}, {1, -2, 0, 3})}}, {}, 1, 1,
                string_attrs({{"mode", mode}}));
    // Left to the reference, which says why: padding an empty axis.
    EXPECT_THROW(expect_same("Pad", {{"x", random({0, 3}, 5)}, {"pads", Tensor::from_vector<int64_t>({4}, {1, 0, 0, 0})}}, {}, 1,
                             1, string_attrs({{"mode", mode}})),
                 kiln::ir::Error);
  }
  expect_same("Pad", {{"x", x}, {"pads", Tensor::from_vector<int64_t>({8}, {0, 0, -5, 0, 0, 0, 0, 0})}});  // nothing left of x
}

}  // namespace
