// Reference kernels on cases the ONNX test data does not cover.
#include <gtest/gtest.h>

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
