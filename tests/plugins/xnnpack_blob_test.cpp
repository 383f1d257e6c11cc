// plugins/xnnpack's compiled partitions as bytes, through the ABI and the
// host's own graph view: what deserialize makes runs as compile's did, and
// bytes it did not write (cut short, a byte changed, noise, the blob of
// another partition) are refused with a message, never a crash.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/reference/reference_executor.hpp"
#include "imported_model.hpp"
#include "plugins/graph_view.hpp"
#include "plugins/plugin_library.hpp"
#include "random_data.hpp"
#include "runtime/ir/shape_inference.hpp"

namespace {

using kiln::test::ModelBuilder;
constexpr int kFloat = onnx::TensorProto::FLOAT;

// Conv 3x3 (with bias) -> Relu -> MaxPool 2x2 on [1,3,size,size]: one partition, all of it.
kiln::ir::Model model(int64_t size) {
  ModelBuilder b;
  const int64_t half = size / 2;
  b.input("x", kFloat, {1, 3, size, size}).output("y", kFloat, {1, 4, half, half});
  b.initializer(ModelBuilder::float_tensor("w", {4, 3, 3, 3}, kiln::test::random_values(4 * 3 * 3 * 3, 1)));
  b.initializer(ModelBuilder::float_tensor("b", {4}, kiln::test::random_values(4, 2)));
  ModelBuilder::attr_ints(b.node("Conv", {"x", "w", "b"}, {"c"}, "conv"), "pads", {1, 1, 1, 1});
  b.node("Relu", {"c"}, {"r"}, "relu");
  auto& pool = b.node("MaxPool", {"r"}, {"y"}, "pool");
  ModelBuilder::attr_ints(pool, "kernel_shape", {2, 2});
  ModelBuilder::attr_ints(pool, "strides", {2, 2});
  return kiln::test::import(b);
}

// A model as the host shows it to a plugin: the view of its specialization.
struct Shown {
  explicit Shown(int64_t size) : m(model(size)) {
    const auto spec =
        kiln::ir::specialize(*m.graph, {{"x", {kiln::ir::DType::Float32, {1, 3, size, size}}}}, kiln::ref::constant_evaluator());
    view = kiln::plugins::make_graph_view(m.graph, spec.result.values);
  }
  kiln::ir::Model m;
  std::unique_ptr<kiln::plugins::GraphView> view;
};

class XnnpackBlobs : public ::testing::Test {
 protected:
  void SetUp() override { api = kiln::plugins::load_plugin(KILN_XNNPACK_PLUGIN)->api; }

  kiln_backend_compiled* compile(const Shown& shown) {
    // The plugin takes the three nodes as one group: the partition is the graph.
    std::vector<std::vector<int64_t>> groups;
    kiln_backend_capability answer{sizeof answer, 0, &groups, [](void* context, const int64_t* nodes, size_t count) {
                                     static_cast<std::vector<std::vector<int64_t>>*>(context)->emplace_back(nodes, nodes + count);
                                     return KILN_BACKEND_OK;
                                   }};
    EXPECT_EQ(api->get_capability(shown.view.get(), &answer, message), KILN_BACKEND_OK) << message;
    EXPECT_EQ(groups, (std::vector<std::vector<int64_t>>{{0, 1, 2}}));
    kiln_backend_compiled* c = nullptr;
    EXPECT_EQ(api->compile(shown.view.get(), nullptr, &c, message), KILN_BACKEND_OK) << message;
    return c;
  }

  std::string blob(kiln_backend_compiled* c) {
    const void* bytes = nullptr;
    size_t size = 0;
    EXPECT_EQ(api->serialize(c, &bytes, &size, message), KILN_BACKEND_OK) << message;
    return std::string(static_cast<const char*>(bytes), size);
  }

  // Deserializes; on success runs what it made on x and returns the output.
  kiln_backend_status load(const Shown& shown, const std::string& bytes, std::vector<float>* out = nullptr) {
    kiln_backend_compiled* c = nullptr;
    message[0] = 0;
    const kiln_backend_status s = api->deserialize(shown.view.get(), bytes.data(), bytes.size(), nullptr, &c, message);
    if (s != KILN_BACKEND_OK) return s;
    if (out) *out = run(c);
    api->release_compiled(c);
    return s;
  }

  std::vector<float> run(kiln_backend_compiled* c) {
    alignas(64) static float x[1 * 3 * 8 * 8], y[1 * 4 * 4 * 4];
    const std::vector<float> values = kiln::test::random_values(sizeof x / sizeof x[0], 7);
    std::copy(values.begin(), values.end(), x);
    const void* in[] = {x};
    void* out[] = {y};
    EXPECT_EQ(api->run(c, in, 1, out, 1, nullptr, message), KILN_BACKEND_OK) << message;
    return std::vector<float>(y, y + sizeof y / sizeof y[0]);
  }

  const kiln_backend_api* api = nullptr;
  char message[KILN_BACKEND_MESSAGE_BYTES] = {};
};

TEST_F(XnnpackBlobs, DeserializeMakesWhatCompileMadeAndCompilesNothing) {
  Shown shown(8);
  kiln_backend_compiled* c = compile(shown);
  ASSERT_NE(c, nullptr);
  const std::vector<float> compiled = run(c);
  const std::string bytes = blob(c);
  api->release_compiled(c);
  // Weights stay with the host's constants: the blob describes the subgraph only.
  EXPECT_LT(bytes.size(), 1000u);
  const int64_t compiles = api->compile_count();
  std::vector<float> loaded;
  ASSERT_EQ(load(shown, bytes, &loaded), KILN_BACKEND_OK) << message;
  EXPECT_EQ(api->compile_count(), compiles);
  EXPECT_EQ(loaded, compiled);
}

TEST_F(XnnpackBlobs, BytesCutShortAreRefused) {
  Shown shown(8);
  kiln_backend_compiled* c = compile(shown);
  const std::string bytes = blob(c);
  api->release_compiled(c);
  for (size_t size = 0; size < bytes.size(); ++size) {
    EXPECT_EQ(load(shown, bytes.substr(0, size)), KILN_BACKEND_UNSUPPORTED) << size << " bytes";
    EXPECT_NE(message[0], 0) << size << " bytes: no message";
  }
}

TEST_F(XnnpackBlobs, AnyChangedByteIsRefused) {
  Shown shown(8);
  kiln_backend_compiled* c = compile(shown);
  const std::string bytes = blob(c);
  api->release_compiled(c);
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string changed = bytes;
    changed[i] = char(changed[i] ^ 0x5a);
    EXPECT_EQ(load(shown, changed), KILN_BACKEND_UNSUPPORTED) << "byte " << i;
  }
}

TEST_F(XnnpackBlobs, NoiseIsRefused) {
  Shown shown(8);
  std::mt19937 rng(3);
  for (size_t size : {0, 1, 8, 24, 64, 4096}) {
    std::string noise(size, '\0');
    for (char& ch : noise) ch = char(rng());
    EXPECT_EQ(load(shown, noise), KILN_BACKEND_UNSUPPORTED) << size << " bytes";
    EXPECT_NE(std::string(message).find("not a partition this plugin serialized"), std::string::npos) << message;
  }
  EXPECT_EQ(api->deserialize(shown.view.get(), nullptr, 0, nullptr, nullptr, message), KILN_BACKEND_INVALID_ARGUMENT);
}

// Well-formed bytes, for a partition of other shapes: its checks, not its checksum, refuse them.
TEST_F(XnnpackBlobs, TheBlobOfAnotherPartitionIsRefused) {
  Shown other(10), shown(8);
  kiln_backend_compiled* c = compile(other);
  const std::string bytes = blob(c);
  api->release_compiled(c);
  EXPECT_EQ(load(shown, bytes), KILN_BACKEND_UNSUPPORTED);
  EXPECT_NE(std::string(message).find("[1,3,10,10], the partition's 'x' is [1,3,8,8]"), std::string::npos) << message;
}

}  // namespace
