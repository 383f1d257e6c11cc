// Sequences, optionals and strings on the reference kernels: the cases the
// ONNX test data does not cover, checked by hand, and hostile value files.
#include <onnx/onnx_pb.h>
// After onnx_pb.h, which defines the ONNX_API it uses.
#include <onnx/onnx-data.pb.h>

#include <gtest/gtest.h>

#include <cmath>

#include "backends/reference/reference_executor.hpp"
#include "model_builder.hpp"
#include "runtime/ir/shape_inference.hpp"
#include "runtime/onnx/onnx_importer.hpp"

using kiln::ir::DType;
using kiln::ir::ErrorKind;
using kiln::ir::Tensor;
using kiln::ir::Value;
using kiln::ir::ValueKind;
using kiln::test::ModelBuilder;

namespace {

constexpr int kFloat = onnx::TensorProto::FLOAT, kInt64 = onnx::TensorProto::INT64, kString = onnx::TensorProto::STRING;

std::vector<Value> run(const ModelBuilder& b, const std::map<std::string, Value>& feeds) {
  const std::string bytes = b.bytes();
  auto m = kiln::onnx_import::import_model_bytes(bytes.data(), bytes.size(), "values.onnx");
  return kiln::ref::run_graph_values(*m.graph, feeds);
}

ErrorKind error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kiln::ir::Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "no error";
  return ErrorKind::Internal;
}

std::vector<std::vector<float>> floats_of(const Value& v) {
  EXPECT_EQ(v.kind, ValueKind::Sequence);
  std::vector<std::vector<float>> out;
  for (const auto& t : v.sequence) out.push_back(t.to_float_vector());
  return out;
}

Tensor strings(kiln::ir::Dims dims, std::vector<std::string> values) {
  return Tensor::from_vector<std::string>(std::move(dims), values);
}

std::vector<std::string> strings_of(const Tensor& t) {
  const std::string* p = t.data<std::string>();
  return {p, p + t.numel()};
}

}  // namespace

TEST(SequenceOps, SplitToSequenceByScalarLeavesAShortLastPiece) {
  ModelBuilder b(13);
  b.input("x", kFloat, {5}).input("split", kInt64, {}).typed_output("seq", ModelBuilder::sequence_type(kFloat));
  b.node("SplitToSequence", {"x", "split"}, {"seq"});
  auto out = run(b, {{"x", Tensor::from_vector<float>({5}, {0, 1, 2, 3, 4})}, {"split", Tensor::scalar<int64_t>(2)}});
  EXPECT_EQ(floats_of(out[0]), (std::vector<std::vector<float>>{{0, 1}, {2, 3}, {4}}));
  EXPECT_EQ(out[0].sequence[2].dims(), (kiln::ir::Dims{1}));
}

TEST(SequenceOps, SplitToSequenceWithoutSplitDropsTheAxisUnlessKeepdims) {
  for (int keepdims : {0, 1}) {
    ModelBuilder b(13);
    b.input("x", kFloat, {2, 3}).typed_output("seq", ModelBuilder::sequence_type(kFloat));
    auto& n = b.node("SplitToSequence", {"x"}, {"seq"});
    ModelBuilder::attr_int(n, "axis", 1);
    ModelBuilder::attr_int(n, "keepdims", keepdims);
    auto out = run(b, {{"x", Tensor::from_vector<float>({2, 3}, {0, 1, 2, 3, 4, 5})}});
    EXPECT_EQ(floats_of(out[0]), (std::vector<std::vector<float>>{{0, 3}, {1, 4}, {2, 5}}));
    EXPECT_EQ(out[0].sequence[0].dims(), (keepdims ? kiln::ir::Dims{2, 1} : kiln::ir::Dims{2}));
  }
}

TEST(SequenceOps, SplitSizesThatDoNotAddUpAreErrors) {
  ModelBuilder b(13);
  b.input("x", kFloat, {4}).input("split", kInt64, {2}).typed_output("seq", ModelBuilder::sequence_type(kFloat));
  b.node("SplitToSequence", {"x", "split"}, {"seq"});
  const Tensor x = Tensor::from_vector<float>({4}, {0, 1, 2, 3});
  EXPECT_EQ(error_of([&] { run(b, {{"x", x}, {"split", Tensor::from_vector<int64_t>({2}, {1, 2})}}); }),
            ErrorKind::InvalidArgument);
  EXPECT_EQ(error_of([&] { run(b, {{"x", x}, {"split", Tensor::from_vector<int64_t>({2}, {5, -1})}}); }),
            ErrorKind::InvalidArgument);
}

TEST(SequenceOps, ConcatFromSequenceStacksOnANewLastAxis) {
  ModelBuilder b(13);
  b.typed_input("seq", ModelBuilder::sequence_type(kFloat)).output_untyped("y");
  auto& n = b.node("ConcatFromSequence", {"seq"}, {"y"});
  ModelBuilder::attr_int(n, "axis", -1);
  ModelBuilder::attr_int(n, "new_axis", 1);
  auto out =
      run(b, {{"seq", Value::of_sequence({Tensor::from_vector<float>({2}, {1, 2}), Tensor::from_vector<float>({2}, {3, 4})})}});
  EXPECT_EQ(out[0].tensor.dims(), (kiln::ir::Dims{2, 2}));
  EXPECT_EQ(out[0].tensor.to_float_vector(), (std::vector<float>{1, 3, 2, 4}));
}

TEST(SequenceOps, ConcatFromSequenceRefusesMismatchedAndEmptySequences) {
  ModelBuilder b(13);
  b.typed_input("seq", ModelBuilder::sequence_type(kFloat)).output_untyped("y");
  ModelBuilder::attr_int(b.node("ConcatFromSequence", {"seq"}, {"y"}), "axis", 0);
  EXPECT_EQ(error_of([&] { run(b, {{"seq", Value::of_sequence({})}}); }), ErrorKind::InvalidArgument);
  const Value mismatched =
      Value::of_sequence({Tensor::from_vector<float>({1, 2}, {1, 2}), Tensor::from_vector<float>({1, 3}, {3, 4, 5})});
  EXPECT_EQ(error_of([&] { run(b, {{"seq", mismatched}}); }), ErrorKind::InvalidArgument);
}

TEST(SequenceOps, InsertEraseAndAtCountNegativePositionsFromTheBack) {
  ModelBuilder b(13);
  b.input("a", kFloat, {1}).input("b", kFloat, {1}).input("c", kFloat, {1}).input("zero", kInt64, {});
  b.input("minus_one", kInt64, {}).input("minus_two", kInt64, {});
  b.typed_output("erased", ModelBuilder::sequence_type(kFloat)).output_untyped("at").output_untyped("length");
  b.node("SequenceConstruct", {"a", "b"}, {"ab"});
  b.node("SequenceInsert", {"ab", "c", "zero"}, {"cab"});
  b.node("SequenceErase", {"cab", "minus_one"}, {"erased"});
  b.node("SequenceAt", {"erased", "minus_two"}, {"at"});
  b.node("SequenceLength", {"erased"}, {"length"});
  auto out = run(b, {{"a", Tensor::from_vector<float>({1}, {1})},
                     {"b", Tensor::from_vector<float>({1}, {2})},
                     {"c", Tensor::from_vector<float>({1}, {3})},
                     {"zero", Tensor::scalar<int64_t>(0)},
                     {"minus_one", Tensor::scalar<int64_t>(-1)},
                     {"minus_two", Tensor::scalar<int64_t>(-2)}});
  EXPECT_EQ(floats_of(out[0]), (std::vector<std::vector<float>>{{3}, {1}}));
  EXPECT_EQ(out[1].tensor.to_float_vector(), (std::vector<float>{3}));
  EXPECT_EQ(out[2].tensor.as_int64(0), 2);
}

TEST(SequenceOps, PositionsOutsideTheSequenceAndOtherDtypesAreErrors) {
  ModelBuilder b(13);
  b.typed_input("seq", ModelBuilder::sequence_type(kFloat)).input("pos", kInt64, {}).output_untyped("y");
  b.node("SequenceAt", {"seq", "pos"}, {"y"});
  const Value two = Value::of_sequence({Tensor::from_vector<float>({1}, {1}), Tensor::from_vector<float>({1}, {2})});
  for (int64_t pos : {2, -3})
    EXPECT_EQ(error_of([&] { run(b, {{"seq", two}, {"pos", Tensor::scalar<int64_t>(pos)}}); }), ErrorKind::InvalidArgument);
  // A tensor where a sequence belongs.
  EXPECT_EQ(error_of([&] { run(b, {{"seq", Tensor::from_vector<float>({1}, {1})}, {"pos", Tensor::scalar<int64_t>(0)}}); }),
            ErrorKind::InvalidArgument);

  ModelBuilder insert(13);
  insert.typed_input("seq", ModelBuilder::sequence_type(kFloat)).input("t", kInt64, {1}).output_untyped("y");
  insert.node("SequenceInsert", {"seq", "t"}, {"y"});
  EXPECT_EQ(error_of([&] { run(insert, {{"seq", two}, {"t", Tensor::from_vector<int64_t>({1}, {7})}}); }),
            ErrorKind::InvalidArgument);
}

TEST(SequenceOps, SequenceMapTakesElementsOfSequencesAndWholeTensors) {
  ModelBuilder body_builder(17);
  body_builder.input("e", kFloat, {"n"}).input("t", kFloat, {1}).output("s", kFloat, {"n"});
  body_builder.node("Add", {"e", "t"}, {"s"});
  ModelBuilder b(17);
  b.typed_input("seq", ModelBuilder::sequence_type(kFloat)).input("t", kFloat, {1});
  b.typed_output("out", ModelBuilder::sequence_type(kFloat));
  ModelBuilder::attr_graph(b.node("SequenceMap", {"seq", "t"}, {"out"}), "body", body_builder.graph());
  auto out = run(b, {{"seq", Value::of_sequence({Tensor::from_vector<float>({2}, {1, 2}), Tensor::from_vector<float>({1}, {5})})},
                     {"t", Tensor::from_vector<float>({1}, {10})}});
  EXPECT_EQ(floats_of(out[0]), (std::vector<std::vector<float>>{{11, 12}, {15}}));
}

TEST(OptionalOps, EmptyOptionalFromTheTypeAttribute) {
  ModelBuilder b(16);
  b.output_untyped("has").typed_output("opt", ModelBuilder::optional_type(kFloat, true));
  auto& n = b.node("Optional", {}, {"opt"});
  auto* a = n.add_attribute();
  a->set_name("type");
  a->set_type(onnx::AttributeProto::TYPE_PROTO);
  *a->mutable_tp() = ModelBuilder::sequence_type(kFloat);
  b.node("OptionalHasElement", {"opt"}, {"has"});
  auto out = run(b, {});
  EXPECT_FALSE(out[0].tensor.as_int64(0));
  EXPECT_EQ(out[1].kind, ValueKind::Optional);
  EXPECT_EQ(out[1].element_kind, ValueKind::Sequence);
  EXPECT_EQ(out[1].element, nullptr);
}

TEST(OptionalOps, GetElementOfAnEmptyOptionalIsAnError) {
  ModelBuilder b(16);
  b.typed_input("opt", ModelBuilder::optional_type(kFloat)).output_untyped("y");
  b.node("OptionalGetElement", {"opt"}, {"y"});
  EXPECT_EQ(error_of([&] { run(b, {{"opt", Value::empty_optional(ValueKind::Tensor)}}); }), ErrorKind::InvalidArgument);
  auto out = run(b, {{"opt", Value::optional(Tensor::from_vector<float>({1}, {4}))}});
  EXPECT_EQ(out[0].tensor.to_float_vector(), (std::vector<float>{4}));
}

TEST(StringOps, StringNormalizerMatchesStopwordsIgnoringCaseAndLeavesOneEmptyString) {
  ModelBuilder b(13);
  b.input("x", kString, {1, 3}).output("y", kString, {1, "n"});
  auto& n = b.node("StringNormalizer", {"x"}, {"y"});
  ModelBuilder::attr_string(n, "case_change_action", "UPPER");
  ModelBuilder::attr_strings(n, "stopwords", {"monday"});
  auto out = run(b, {{"x", strings({1, 3}, {"Monday", "tuesday", "MONDAY"})}});
  EXPECT_EQ(out[0].tensor.dims(), (kiln::ir::Dims{1, 1}));
  EXPECT_EQ(strings_of(out[0].tensor), (std::vector<std::string>{"TUESDAY"}));
  out = run(b, {{"x", strings({1, 3}, {"Monday", "monday", "MONDAY"})}});
  EXPECT_EQ(out[0].tensor.dims(), (kiln::ir::Dims{1, 1}));
  EXPECT_EQ(strings_of(out[0].tensor), (std::vector<std::string>{""}));
}

TEST(StringOps, CastReadsAndWritesNumbersAsNumPyDoes) {
  const Tensor text = strings({5}, {"nan", "-INF", "1e3", "+2.5", "-0.125"});
  const Tensor numbers = text.cast(DType::Float32);
  EXPECT_TRUE(std::isnan(numbers.as_double(0)));
  EXPECT_EQ(numbers.as_double(1), -INFINITY);
  EXPECT_EQ(numbers.to_float_vector()[2], 1000.0f);
  EXPECT_EQ(numbers.to_float_vector()[3], 2.5f);
  EXPECT_EQ(numbers.to_float_vector()[4], -0.125f);
  EXPECT_EQ(error_of([] { strings({1}, {"12abc"}).cast(DType::Float32); }), ErrorKind::InvalidArgument);
  EXPECT_EQ(error_of([] { strings({1}, {""}).cast(DType::Int64); }), ErrorKind::InvalidArgument);
  const Tensor back = Tensor::from_vector<float>({5}, {0.1f, 1e-5f, 3.0f, -INFINITY, 0.039187793f}).cast(DType::String);
  EXPECT_EQ(strings_of(back), (std::vector<std::string>{"0.1", "1e-05", "3", "-inf", "0.039187793"}));
  EXPECT_EQ(strings_of(Tensor::from_vector<int64_t>({2}, {-7, 42}).cast(DType::String)), (std::vector<std::string>{"-7", "42"}));
}

TEST(SequenceShapes, InferenceSaysWhatKindEachValueIs) {
  ModelBuilder b(16);
  b.input("x", kFloat, {2, 3}).output_untyped("len").output_untyped("opt").output_untyped("back");
  b.node("SplitToSequence", {"x"}, {"seq"});
  b.node("SequenceLength", {"seq"}, {"len"});
  b.node("Optional", {"seq"}, {"opt"});
  ModelBuilder::attr_int(b.node("ConcatFromSequence", {"seq"}, {"back"}), "axis", 0);
  const std::string bytes = b.bytes();
  auto m = kiln::onnx_import::import_model_bytes(bytes.data(), bytes.size(), "kinds.onnx");
  auto spec = kiln::ir::specialize(*m.graph, {{"x", {DType::Float32, {2, 3}}}});
  EXPECT_EQ(spec.result.values["seq"].kind, ValueKind::Sequence);
  EXPECT_EQ(spec.result.values["seq"].dtype, DType::Float32);
  EXPECT_EQ(spec.result.values["len"].kind, ValueKind::Tensor);
  EXPECT_EQ(spec.result.values["len"].shape.to_string(), "[]");
  EXPECT_EQ(spec.result.values["opt"].kind, ValueKind::Optional);
  EXPECT_EQ(spec.result.values["opt"].element_kind, ValueKind::Sequence);
  EXPECT_EQ(spec.result.values["back"].kind, ValueKind::Tensor);
}

// Value files (the test data's SequenceProto and OptionalProto) are untrusted.
TEST(HostileValues, MalformedSequenceAndOptionalFilesAreClearErrors) {
  kiln::ir::ValueInfo sequence, optional;
  sequence.kind = ValueKind::Sequence;
  optional.kind = ValueKind::Optional;
  auto import = [](const std::string& bytes, const kiln::ir::ValueInfo& as) {
    return kiln::onnx_import::import_value_bytes(bytes.data(), bytes.size(), as, "value.pb");
  };
  EXPECT_EQ(error_of([&] { import("\xff\xff\xff", sequence); }), ErrorKind::InvalidModel);

  onnx::SequenceProto maps;
  maps.set_elem_type(4);  // MAP
  EXPECT_EQ(error_of([&] { import(maps.SerializeAsString(), sequence); }), ErrorKind::Unsupported);

  // A string tensor claiming 10^12 elements and holding none: refused before anything is allocated.
  onnx::SequenceProto huge;
  huge.set_elem_type(1);
  auto* t = huge.add_tensor_values();
  t->set_data_type(onnx::TensorProto::STRING);
  t->add_dims(1000000);
  t->add_dims(1000000);
  EXPECT_EQ(error_of([&] { import(huge.SerializeAsString(), sequence); }), ErrorKind::InvalidModel);

  // Raw bytes where strings belong.
  onnx::SequenceProto raw;
  raw.set_elem_type(1);
  auto* r = raw.add_tensor_values();
  r->set_data_type(onnx::TensorProto::STRING);
  r->add_dims(1);
  r->set_raw_data("abcd");
  EXPECT_EQ(error_of([&] { import(raw.SerializeAsString(), sequence); }), ErrorKind::InvalidModel);

  // An optional of a sequence where the input takes an optional of a tensor.
  onnx::OptionalProto wrong;
  wrong.set_elem_type(3);
  wrong.mutable_sequence_value()->set_elem_type(1);
  EXPECT_EQ(error_of([&] { import(wrong.SerializeAsString(), optional); }), ErrorKind::InvalidModel);

  onnx::OptionalProto empty;
  empty.set_elem_type(1);
  const Value none = import(empty.SerializeAsString(), optional);
  EXPECT_EQ(none.kind, ValueKind::Optional);
  EXPECT_EQ(none.element, nullptr);
}

TEST(HostileValues, ModelsWithMapsOrNestedSequencesAreUnsupported) {
  ModelBuilder b(13);
  onnx::TypeProto nested;
  *nested.mutable_sequence_type()->mutable_elem_type() = ModelBuilder::sequence_type(kFloat);
  b.typed_input("x", nested).output_untyped("y");
  b.node("Identity", {"x"}, {"y"});
  const std::string bytes = b.bytes();
  EXPECT_EQ(error_of([&] { kiln::onnx_import::import_model_bytes(bytes.data(), bytes.size(), "nested.onnx"); }),
            ErrorKind::Unsupported);
}
