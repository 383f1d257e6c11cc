// Writes the seeds of the partitioned_artifact fuzz target: real cache
// entries, compiled and saved as the runtime does, in the fuzzer's input
// format (partitioned_artifact_fuzzer.cpp). Run again when the formats change:
//   make_partitioned_artifact_seeds PLUGIN_DIR tests/fuzz/corpus/partitioned_artifact
// PLUGIN_DIR holds toy.so and kiln-reference.so (build/tests/plugins).
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "backends/pipeline.hpp"
#include "plugins/plugin_backend.hpp"

namespace {

using namespace kiln;

ir::Node node(const std::string& op, std::vector<std::string> inputs, const std::string& output) {
  ir::Node n;
  n.name = output;
  n.op_type = op;
  n.opset = 17;
  n.inputs = std::move(inputs);
  n.outputs = {output};
  return n;
}

ir::ValueInfo value(const std::string& name, ir::Dims dims) { return {name, ir::DType::Float32, ir::Shape::from_dims(dims)}; }

std::vector<float> ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (float(i) - float(n) / 2);
  return v;
}

// y = (Relu(x) + c) * x: every node the toy plugin's.
ir::Graph elementwise() {
  ir::Graph g;
  g.name = "elementwise";
  g.inputs = {value("x", {2, 3})};
  g.initializers["c"] = ir::Tensor::from_vector<float>({2, 3}, ramp(6, 0.5f));
  g.nodes = {node("Relu", {"x"}, "r"), node("Add", {"r", "c"}, "s"), node("Mul", {"s", "x"}, "y")};
  g.outputs = {value("y", {2, 3})};
  return g;
}

// The same, also giving back its input and a constant: outputs no part
// makes, so a part of the toy's alone in the partitioned format.
ir::Graph with_passthrough() {
  ir::Graph g = elementwise();
  g.name = "with passthrough";
  g.initializers["k"] = ir::Tensor::from_vector<float>({4}, ramp(4, 1));
  g.outputs.push_back(value("x", {2, 3}));
  g.outputs.push_back(value("k", {4}));
  return g;
}

// A MatMul that the toy does not take between its nodes: three parts.
ir::Graph split() {
  ir::Graph g;
  g.name = "split";
  g.inputs = {value("x", {2, 3})};
  g.initializers["c"] = ir::Tensor::from_vector<float>({2, 3}, ramp(6, 0.5f));
  g.initializers["w"] = ir::Tensor::from_vector<float>({3, 4}, ramp(12, 0.25f));
  g.nodes = {node("Relu", {"x"}, "r"), node("Mul", {"r", "c"}, "m"), node("MatMul", {"m", "w"}, "mm"),
             node("Add", {"mm", "mm"}, "y")};
  g.outputs = {value("y", {2, 4})};
  return g;
}

void put_u32(std::string& out, uint64_t v) {
  if (v > UINT32_MAX) throw std::runtime_error("too big for the seed format");
  for (int i = 0; i < 4; ++i) out += char((v >> (8 * i)) & 0xff);
}

void write_seed(const std::string& path, const ir::Graph& graph, const std::vector<const backends::Backend*>& order) {
  backends::InputShapes shapes{{"x", {ir::DType::Float32, {2, 3}}}};
  const backends::PartitionedCompile compiled = backends::compile_for_shapes(graph, shapes, order, {});
  const backends::Artifact a = compiled.executable->save();
  std::string weights(size_t(a.weights_bytes), '\0');
  for (size_t i = 0; i < a.weights.size(); ++i)
    weights.replace(size_t(a.weight_offsets[i]), a.weights[i].second, static_cast<const char*>(a.weights[i].first),
                    a.weights[i].second);
  std::string out;
  put_u32(out, a.program.size());
  put_u32(out, a.object.size());
  put_u32(out, graph.outputs.size());
  out += a.program + a.object + weights;
  std::ofstream(path, std::ios::binary) << out;
  std::cout << path << ": " << compiled.backends << ", " << compiled.parts << " part(s), " << out.size() << " bytes\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: " << argv[0] << " PLUGIN_DIR OUT_DIR\n";
    return 2;
  }
  const std::string plugins = argv[1], dir = argv[2];
  try {
    const plugins::LogSink quiet = [](int, const std::string&) {};
    auto toy = plugins::make_plugin_backend(plugins::load_plugin(plugins + "/toy.so"), nullptr, quiet);
    auto reference_plugin = plugins::make_plugin_backend(plugins::load_plugin(plugins + "/kiln-reference.so"), nullptr, quiet);
    write_seed(dir + "/plugin_entry.bin", elementwise(), {toy.get()});
    write_seed(dir + "/one_part_and_constants.bin", with_passthrough(), {toy.get(), reference_plugin.get()});
    // The fuzzer has no kiln-reference backend: loading stops at the second
    // part, as a runtime without that plugin's would.
    write_seed(dir + "/three_parts_two_plugins.bin", split(), {toy.get(), reference_plugin.get()});
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
