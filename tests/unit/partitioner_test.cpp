// The partitioner over the real backends: which nodes go where, what each
// part reads and hands on, and the error when no backend takes a node.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "backends/backend.hpp"
#include "backends/partitioner.hpp"
#include "backends/program_blocks.hpp"
#include "backends/reference/reference_executor.hpp"
#include "imported_model.hpp"
#include "runtime/ir/shape_inference.hpp"
#include "runtime/passes/passes.hpp"

namespace {

using kiln::test::ModelBuilder;

std::vector<std::string> names(const std::vector<kiln::ir::ValueInfo>& values) {
  std::vector<std::string> out;
  for (const auto& v : values) out.push_back(v.name);
  return out;
}
std::vector<std::string> ops(const kiln::ir::Graph& g) {
  std::vector<std::string> out;
  for (const auto& n : g.nodes) out.push_back(n.op_type);
  return out;
}

// x -> Relu -> a -> NonZero -> Cast -> ReduceSum -> s;  y = a * s;  z = x @ w
kiln::ir::Model data_dependent_model() {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {2, 3}).input("w", onnx::TensorProto::FLOAT, {3, 4});
  b.output("y", onnx::TensorProto::FLOAT, {2, 3}).output("z", onnx::TensorProto::FLOAT, {2, 4});
  b.initializer(ModelBuilder::float_tensor("w", {3, 4}, std::vector<float>(12, 1.0f)));
  b.node("Relu", {"x"}, {"a"});
  b.node("NonZero", {"a"}, {"where"});
  ModelBuilder::attr_int(b.node("Cast", {"where"}, {"where_f"}), "to", onnx::TensorProto::FLOAT);
  b.node("ReduceSum", {"where_f"}, {"s"});
  b.node("Mul", {"a", "s"}, {"y"});
  b.node("MatMul", {"x", "w"}, {"z"});
  return kiln::test::import(b);
}

kiln::ir::Specialization specialize(const kiln::ir::Model& m) {
  return kiln::ir::specialize(*m.graph, {{"x", {kiln::ir::DType::Float32, {2, 3}}}}, kiln::ref::constant_evaluator());
}

TEST(Partitioner, DataDependentShapesGoToTheReferenceBackendBetweenTwoCompiledParts) {
  auto cpu = kiln::backends::make_backend("cpu", 1), ref = kiln::backends::make_backend("reference", 1);
  const auto model = data_dependent_model();
  const auto parts = kiln::backends::partition(*model.graph, specialize(model), {cpu.get(), ref.get()});
  ASSERT_EQ(parts.size(), 3u);

  EXPECT_EQ(parts[0].backend, cpu.get());
  EXPECT_EQ(ops(*parts[0].graph), (std::vector<std::string>{"Relu", "MatMul"}));
  EXPECT_EQ(names(parts[0].graph->inputs), (std::vector<std::string>{"x", "w"}));
  EXPECT_EQ(parts[0].graph->initializers.count("w"), 1u) << "w's default goes with the part that reads it";
  EXPECT_EQ(names(parts[0].graph->outputs), (std::vector<std::string>{"a", "z"}));
  // Handed-on values keep their concrete shapes.
  EXPECT_TRUE(parts[0].graph->outputs[0].shape.is_concrete());

  EXPECT_EQ(parts[1].backend, ref.get());
  EXPECT_EQ(ops(*parts[1].graph), (std::vector<std::string>{"NonZero", "Cast", "ReduceSum"}));
  EXPECT_EQ(names(parts[1].graph->inputs), (std::vector<std::string>{"a"}));
  EXPECT_EQ(names(parts[1].graph->outputs), (std::vector<std::string>{"s"}));

  EXPECT_EQ(parts[2].backend, cpu.get());
  EXPECT_EQ(ops(*parts[2].graph), (std::vector<std::string>{"Mul"}));
  EXPECT_EQ(names(parts[2].graph->inputs), (std::vector<std::string>{"a", "s"}));
  EXPECT_EQ(names(parts[2].graph->outputs), (std::vector<std::string>{"y"}));
}

TEST(Partitioner, AStaticGraphIsOnePartCompiledWhole) {
  auto cpu = kiln::backends::make_backend("cpu", 1), ref = kiln::backends::make_backend("reference", 1);
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {2, 3}).output("y", onnx::TensorProto::FLOAT, {2, 3});
  b.node("Relu", {"x"}, {"r"});
  b.node("Erf", {"r"}, {"y"});  // run by its reference kernel inside the compiled part
  const auto model = kiln::test::import(b);
  const auto spec = specialize(model);
  ASSERT_EQ(kiln::backends::partition(*model.graph, spec, {cpu.get(), ref.get()}).size(), 1u);
  auto compiled = kiln::backends::compile_partitioned(model.graph, spec, {cpu.get(), ref.get()}, {});
  EXPECT_EQ(compiled.backends, "cpu");
  EXPECT_EQ(compiled.parts, 1);
  EXPECT_NO_THROW(compiled.executable->save()) << "a whole-graph executable is the backend's own and can be cached";
}

TEST(Partitioner, ANodeNoBackendTakesIsNamed) {
  auto cpu = kiln::backends::make_backend("cpu", 1);
  const auto model = data_dependent_model();
  try {
    kiln::backends::partition(*model.graph, specialize(model), {cpu.get()});
    FAIL() << "no error";
  } catch (const kiln::ir::Error& e) {
    EXPECT_EQ(e.kind(), kiln::ir::ErrorKind::Unsupported);
    const std::string m = e.what();
    EXPECT_NE(m.find("NonZero"), std::string::npos) << m;
    EXPECT_NE(m.find("tried 'cpu'"), std::string::npos) << m;
  }
}

TEST(Partitioner, SeveralPartsRunInOrderAndAReferencePartCannotBeCached) {
  auto cpu = kiln::backends::make_backend("cpu", 1), ref = kiln::backends::make_backend("reference", 1);
  const auto model = data_dependent_model();
  auto compiled = kiln::backends::compile_partitioned(model.graph, specialize(model), {cpu.get(), ref.get()}, {});
  EXPECT_EQ(compiled.backends, "cpu+reference");
  EXPECT_EQ(compiled.parts, 3);
  const auto x = kiln::ir::Tensor::from_vector<float>({2, 3}, {1, -2, 3, 0, 5, -1});
  const auto got = compiled.executable->run({{"x", x}});
  const auto want = kiln::ref::run_graph(*model.graph, {{"x", x}});
  ASSERT_EQ(got.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    ASSERT_EQ(got[k].dims(), want[k].dims());
    EXPECT_EQ(got[k].to_float_vector(), want[k].to_float_vector()) << "output " << k;
  }
  const auto stats = compiled.executable->stats();
  EXPECT_EQ(stats.nodes, 6);
  EXPECT_EQ(stats.compiled_nodes, 3);
  EXPECT_EQ(stats.fallback_nodes, 3);
  try {
    compiled.executable->save();
    FAIL() << "saved";
  } catch (const kiln::ir::Error& e) {
    EXPECT_EQ(e.kind(), kiln::ir::ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("part 2 of 3 (reference)"), std::string::npos) << e.what();
  }
}

void expect_same_outputs(const kiln::backends::Executable& got, const kiln::ir::Model& model, const kiln::ir::Tensor& x) {
  const auto out = got.run({{"x", x}});
  const auto want = kiln::ref::run_graph(*model.graph, {{"x", x}});
  ASSERT_EQ(out.size(), want.size());
  for (size_t k = 0; k < out.size(); ++k) {
    ASSERT_EQ(out[k].dims(), want[k].dims());
    EXPECT_EQ(out[k].to_float_vector(), want[k].to_float_vector()) << "output " << k;
  }
}

// The cpu backend's parts and its interpreter's are stored as one artifact
// and loaded again, each by its own backend, with nothing compiled.
TEST(Partitioner, PartsOfSeveralBackendsAreSavedAndLoadedAsOne) {
  auto cpu = kiln::backends::make_backend("cpu", 2);
  auto interpreter = cpu->fallback();
  const auto model = data_dependent_model();
  auto compiled = kiln::backends::compile_partitioned(model.graph, specialize(model), {cpu.get(), interpreter.get()}, {2});
  EXPECT_EQ(compiled.backends, "cpu+interpreter");
  const kiln::backends::Artifact stored = compiled.executable->save();
  const auto summary = nlohmann::json::parse(stored.summary);
  ASSERT_EQ(summary["parts"].size(), 3u);
  EXPECT_EQ(summary["parts"][1]["backend"], "interpreter");

  // Other backend objects, as in another process.
  auto cpu2 = kiln::backends::make_backend("cpu", 2);
  auto interpreter2 = cpu2->fallback();
  const int64_t codegen = cpu2->codegen_runs();
  auto loaded = kiln::backends::load_partitioned(copy_to_memory(stored), model.graph, {cpu2.get(), interpreter2.get()}, {2});
  EXPECT_EQ(cpu2->codegen_runs(), codegen);
  EXPECT_EQ(loaded.backends, "cpu+interpreter");
  EXPECT_EQ(loaded.parts, 3);
  EXPECT_EQ(loaded.executable->stats().compiled_nodes, 3);
  expect_same_outputs(*loaded.executable, model, kiln::ir::Tensor::from_vector<float>({2, 3}, {1, -2, 3, 0, 5, -1}));
  expect_same_outputs(*loaded.executable, model, kiln::ir::Tensor::from_vector<float>({2, 3}, {0, 0, 0, 0, 0, 7}));

  // A runtime without the interpreter cannot load it, and says which part needs what.
  try {
    kiln::backends::load_partitioned(copy_to_memory(stored), model.graph, {cpu2.get()}, {2});
    FAIL() << "loaded";
  } catch (const kiln::ir::Error& e) {
    EXPECT_EQ(e.kind(), kiln::ir::ErrorKind::InvalidModel);
    EXPECT_NE(std::string(e.what()).find("part 2 (interpreter)"), std::string::npos) << e.what();
  }
  // A value handed on with another shape than the next part was compiled
  // for (which only a shape inference mistake could cause) stops the run.
  kiln::backends::Artifact wrong_shape = stored;
  const std::string magic = "KILN-PARTS\n";
  ASSERT_EQ(stored.program.substr(0, magic.size()), magic);
  const kiln::backends::BlockReader read(std::string_view(stored.program).substr(magic.size()), "the parts");
  nlohmann::json list = read.document();
  kiln::backends::BlockWriter blocks;
  for (auto& part : list["parts"]) part["program"] = blocks.add(read.block(part["program"], "a part").data(), part["program"][1]);
  auto& mul_input = list["parts"][2]["inputs"][0];
  ASSERT_EQ(mul_input[0], "a");
  mul_input[2] = std::vector<int64_t>{3, 2};
  wrong_shape.program = magic + blocks.finish(list);
  auto wrong = kiln::backends::load_partitioned(copy_to_memory(wrong_shape), model.graph, {cpu2.get(), interpreter2.get()}, {2});
  try {
    wrong.executable->run({{"x", kiln::ir::Tensor::from_vector<float>({2, 3}, {1, -2, 3, 0, 5, -1})}});
    FAIL() << "ran";
  } catch (const kiln::ir::Error& e) {
    EXPECT_EQ(e.kind(), kiln::ir::ErrorKind::Internal);
    EXPECT_NE(std::string(e.what()).find("value 'a' is float32 2x3, the next part was compiled for float32 3x2"),
              std::string::npos)
        << e.what();
  }

  // Cut short anywhere, the list of parts is an error, never a crash.
  for (size_t cut = 0; cut < stored.program.size(); cut += 7) {
    kiln::backends::Artifact cut_short = stored;
    cut_short.program.resize(cut);
    EXPECT_THROW(kiln::backends::load_partitioned(copy_to_memory(cut_short), model.graph, {cpu2.get(), interpreter2.get()}, {2}),
                 kiln::ir::Error)
        << "cut at " << cut;
  }
}

// A graph the first backend takes none of is one part of another backend:
// it goes through the parts' format too, so that the cache never hands it
// to the first backend's loader.
TEST(Partitioner, AGraphWhollyOnTheFallbackIsStoredAsOnePart) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {2, 3}).output("y", onnx::TensorProto::FLOAT, {2, "k"});
  b.initializer(ModelBuilder::float_tensor("half", {1}, {0.5f}));
  b.node("NonZero", {"x"}, {"where"});
  ModelBuilder::attr_int(b.node("Cast", {"where"}, {"where_f"}), "to", onnx::TensorProto::FLOAT);
  b.node("Mul", {"where_f", "half"}, {"y"});
  const auto model = kiln::test::import(b);
  auto cpu = kiln::backends::make_backend("cpu", 1);
  auto interpreter = cpu->fallback();
  auto compiled = kiln::backends::compile_partitioned(model.graph, specialize(model), {cpu.get(), interpreter.get()}, {});
  EXPECT_EQ(compiled.backends, "interpreter");
  EXPECT_EQ(compiled.parts, 1);
  // Compiled whole by the cpu backend, which interprets what it cannot
  // lower, the same graph is not the cpu backend's to store.
  try {
    cpu->compile(model.graph, specialize(model), {})->save();
    FAIL() << "saved";
  } catch (const kiln::ir::Error& e) {
    EXPECT_EQ(e.kind(), kiln::ir::ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("interprets it"), std::string::npos) << e.what();
  }
  const kiln::backends::Artifact stored = compiled.executable->save();
  auto loaded = kiln::backends::load_partitioned(copy_to_memory(stored), model.graph, {cpu.get(), interpreter.get()}, {});
  EXPECT_EQ(loaded.backends, "interpreter");
  expect_same_outputs(*loaded.executable, model, kiln::ir::Tensor::from_vector<float>({2, 3}, {1, 0, 3, 0, 5, 0}));
  // The initializer is in the weights file, which must hold it.
  kiln::backends::Artifact no_weights = stored;
  no_weights.weights.clear();
  no_weights.weight_offsets.clear();
  no_weights.weights_bytes = 0;
  try {
    kiln::backends::load_partitioned(copy_to_memory(no_weights), model.graph, {cpu.get(), interpreter.get()}, {});
    FAIL() << "loaded";
  } catch (const kiln::ir::Error& e) {
    EXPECT_EQ(e.kind(), kiln::ir::ErrorKind::InvalidModel);
    EXPECT_NE(std::string(e.what()).find("outside"), std::string::npos) << e.what();
  }
}

// An output that the passes fold into a constant is made by no part: the
// artifact keeps its bytes in the weights file beside the parts' own.
TEST(Partitioner, AFoldedOutputIsSavedWithTheParts) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {2, 3});
  b.output("y", onnx::TensorProto::FLOAT, {2, 3}).output("n", onnx::TensorProto::INT64, {2});
  b.node("Relu", {"x"}, {"a"});
  b.node("NonZero", {"a"}, {"where"});
  ModelBuilder::attr_int(b.node("Cast", {"where"}, {"where_f"}), "to", onnx::TensorProto::FLOAT);
  b.node("ReduceSum", {"where_f"}, {"s"});
  b.node("Mul", {"a", "s"}, {"y"});
  b.node("Shape", {"x"}, {"n"});
  const auto model = kiln::test::import(b);
  auto spec = specialize(model);
  auto graph = std::make_shared<kiln::ir::Graph>(*model.graph);
  kiln::passes::optimize_specialization(*graph, spec, kiln::ref::constant_evaluator());
  ASSERT_TRUE(graph->initializers.count("n")) << "the passes no longer fold Shape: this test needs another constant output";
  auto cpu = kiln::backends::make_backend("cpu", 2);
  auto interpreter = cpu->fallback();
  auto compiled = kiln::backends::compile_partitioned(graph, spec, {cpu.get(), interpreter.get()}, {2});
  ASSERT_EQ(compiled.backends, "cpu+interpreter");
  const kiln::backends::Artifact stored = compiled.executable->save();
  auto loaded = kiln::backends::load_partitioned(copy_to_memory(stored), model.graph, {cpu.get(), interpreter.get()}, {2});
  expect_same_outputs(*loaded.executable, model, kiln::ir::Tensor::from_vector<float>({2, 3}, {1, -2, 3, 0, 5, -1}));

  // Weights cut short before the constant: an error naming the output.
  kiln::backends::Artifact cut = stored;
  cut.weights.pop_back();
  cut.weight_offsets.pop_back();
  cut.weights_bytes = cut.weight_offsets.empty() ? 0 : cut.weight_offsets.back() + int64_t(cut.weights.back().second);
  try {
    kiln::backends::load_partitioned(copy_to_memory(cut), model.graph, {cpu.get(), interpreter.get()}, {2});
    FAIL() << "loaded";
  } catch (const kiln::ir::Error& e) {
    EXPECT_EQ(e.kind(), kiln::ir::ErrorKind::InvalidModel);
    EXPECT_NE(std::string(e.what()).find("output 'n'"), std::string::npos) << e.what();
  }
}

}  // namespace
