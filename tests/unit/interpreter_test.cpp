// The cpu backend's interpreter (what it runs for shapes that depend on the
// data) against the reference: its oneDNN products in every layout Gemm and
// MatMul allow, and the cases it hands back to the reference kernels.
#include <gtest/gtest.h>

#include <cmath>

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
                 const std::vector<std::pair<std::string, int64_t>>& int_attrs = {}, float alpha = 1, float beta = 1) {
  ModelBuilder b;
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
  const auto model = kiln::test::import(b);
  auto cpu = kiln::backends::make_backend("cpu", 2);
  auto interpreter = cpu->fallback();
  ASSERT_TRUE(interpreter);
  EXPECT_EQ(interpreter->name(), "interpreter");
  const Tensor got = interpreter->compile(model.graph, {}, {})->run(feeds)[0];
  const Tensor want = kiln::ref::run_graph(*model.graph, feeds)[0];
  ASSERT_EQ(got.dims(), want.dims());
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

}  // namespace
