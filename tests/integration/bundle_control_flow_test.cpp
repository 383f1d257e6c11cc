// If, Loop and Scan frozen into bundles: an If on an input's value keeps
// both branches and takes one per run, a Loop and a Scan run their bodies
// in the bundle's own code; each linked with plain cc and compared with the
// JIT, split over compiled batch sizes, with a batch on another axis, on
// host threads and, with a code version per CPU, under qemu. A body whose
// shapes depend on the data is refused, naming the node.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "kiln/kiln.hpp"
#include "model_builder.hpp"
#include "shell.hpp"

namespace fs = std::filesystem;

namespace {

using kiln::test::ModelBuilder;

const std::string kSource = KILN_SOURCE_DIR;
constexpr int kFloat = onnx::TensorProto::FLOAT, kInt64 = onnx::TensorProto::INT64, kBool = onnx::TensorProto::BOOL;

onnx::TensorProto random_weights(std::mt19937& rng, float sd, const std::string& name, std::vector<int64_t> dims) {
  std::normal_distribution<float> normal(0, sd);
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return ModelBuilder::float_tensor(name, std::move(dims), v);
}

kiln::Tensor floats(std::mt19937& rng, kiln::Shape shape) {
  std::normal_distribution<float> value(0, 1);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = value(rng);
  return kiln::Tensor::from_vector(kiln::DType::Float32, std::move(shape), v);
}
kiln::Tensor int64_scalar(int64_t v) { return kiln::Tensor::from_vector(kiln::DType::Int64, {}, std::vector<int64_t>{v}); }

class BundleControlFlowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have("cc")) GTEST_SKIP() << "no C compiler";
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ =
        fs::path(::testing::TempDir()) / ("kiln_bundle_cf_test_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    kiln::RuntimeOptions o;
    o.cache = false;
    o.threads = 1;
    runtime_ = std::make_unique<kiln::Runtime>(o);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  kiln::Model load(const std::string& name, const onnx::ModelProto& model) {
    write_file(dir_ / (name + ".onnx"), model.SerializeAsString());
    return kiln::Model::load(*runtime_, (dir_ / (name + ".onnx")).string());
  }

  // Freezes `model` as bundle "net" and links tests/integration/bundle_files_driver.c
  // with it (with `cc`, and `libs`).
  fs::path freeze(const kiln::Model& model, kiln::Model::FreezeOptions o, const std::string& cc = "cc",
                  const std::string& libs = "") {
    o.output_dir = dir_.string();
    o.name = "net";
    model.freeze(o);
    const fs::path driver = dir_ / "driver";
    const Output built = sh(cc + " -O2 -DPREFIX=net -DUPREFIX=NET -include " + (dir_ / "net.h").string() + " " + kSource +
                            "/tests/integration/bundle_files_driver.c " + (dir_ / "net.o").string() + " " + libs +
                            " -lm -lpthread -o " + driver.string());
    EXPECT_EQ(built.code, 0) << built.text;
    return driver;
  }

  // Runs the bundle on `inputs` (in the bundle's order) at `batch` through
  // `runner`, and compares every output with the JIT's.
  void matches_the_jit(const kiln::Model& model, const fs::path& driver, int64_t batch,
                       const std::vector<std::pair<std::string, kiln::Tensor>>& inputs, int threads = 1,
                       const std::string& runner = "") {
    std::string command = runner + " " + driver.string() + " " + (dir_ / "net.weights.bin").string() + " " +
                          std::to_string(batch) + " " + std::to_string(threads);
    for (const auto& [name, t] : inputs) {
      write_file(dir_ / (name + ".in"), std::string(static_cast<const char*>(t.data()), t.nbytes()));
      command += " " + (dir_ / (name + ".in")).string();
    }
    const std::vector<kiln::Tensor> want = model.run(inputs);
    for (size_t k = 0; k < want.size(); ++k)
      command += " " + (dir_ / ("out" + std::to_string(k))).string() + ":" + std::to_string(want[k].nbytes());
    const Output r = sh(command);
    ASSERT_EQ(r.code, 0) << r.text;
    for (size_t k = 0; k < want.size(); ++k) {
      const std::string got = read_file(dir_ / ("out" + std::to_string(k)));
      ASSERT_EQ(got.size(), want[k].nbytes()) << "output " << k;
      const auto* g = reinterpret_cast<const float*>(got.data());
      const float* w = want[k].data_as<float>();
      int bad = 0;
      for (int64_t i = 0; i < want[k].numel(); ++i)
        if (!(std::fabs(g[i] - w[i]) <= 1e-5f + 1e-4f * std::fabs(w[i])) && bad++ < 5)
          ADD_FAILURE() << "output " << k << " [" << i << "]: got " << g[i] << ", want " << w[i];
    }
  }

  fs::path dir_;
  std::unique_ptr<kiln::Runtime> runtime_;
};

// An If on a sample rate: a convolution and a Relu at 16 kHz, a Sigmoid
// scaled by a branch weight otherwise, both reading x from the enclosing
// graph.
onnx::ModelProto if_on_rate() {
  std::mt19937 rng(11);
  ModelBuilder fast, slow;
  fast.graph().set_name("fast");
  fast.output("r", kFloat, {"batch", 4, 6});
  fast.initializer(random_weights(rng, 0.5f, "w", {4, 4, 3}));
  ModelBuilder::attr_ints(fast.node("Conv", {"x", "w"}, {"c"}), "pads", {1, 1});
  fast.node("Relu", {"c"}, {"r"});
  slow.graph().set_name("slow");
  slow.output("s", kFloat, {"batch", 4, 6});
  slow.initializer(ModelBuilder::float_tensor("half", {}, {0.5f}));
  slow.node("Sigmoid", {"x"}, {"g"});
  slow.node("Mul", {"g", "half"}, {"s"});
  ModelBuilder b;
  b.input("x", kFloat, {"batch", 4, 6}).input("rate", kInt64, {}).output("y", kFloat, {"batch", 4, 6});
  b.initializer(ModelBuilder::int64_tensor("k", {}, {16000}));
  b.node("Equal", {"rate", "k"}, {"is_16k"});
  auto& branch = b.node("If", {"is_16k"}, {"y"});
  ModelBuilder::attr_graph(branch, "then_branch", fast.graph());
  ModelBuilder::attr_graph(branch, "else_branch", slow.graph());
  return b.model();
}

// Without --constant, the bundle takes the rate and holds both branches:
// each run takes the one the rate picks, batch 3 split as 1+1+1 over sizes
// 1 and 4, on one and on three threads, and through the static API in an
// arena of the size the header gives.
TEST_F(BundleControlFlowTest, IfOnAnInputTakesEitherBranch) {
  const kiln::Model model = load("vad", if_on_rate());
  kiln::Model::FreezeOptions o;
  o.batch_sizes = {1, 4};
  const fs::path driver = freeze(model, o);
  EXPECT_NE(read_file(dir_ / "net.h").find("#define NET_NUM_INPUTS 2"), std::string::npos);
  std::mt19937 rng(3);
  for (int64_t rate : {16000, 8000})
    for (int64_t batch : {3, 4})
      for (int threads : {1, 3}) {
        SCOPED_TRACE("rate " + std::to_string(rate) + ", batch " + std::to_string(batch) + ", threads " +
                     std::to_string(threads));
        matches_the_jit(model, driver, batch, {{"x", floats(rng, {batch, 4, 6})}, {"rate", int64_scalar(rate)}}, threads);
      }
  for (int64_t rate : {16000, 8000}) {
    SCOPED_TRACE("static API, rate " + std::to_string(rate));
    matches_the_jit(model, driver, 1, {{"x", floats(rng, {1, 4, 6})}, {"rate", int64_scalar(rate)}}, 0);
  }
}

// A code version per CPU holds the branches of each: a Nehalem (no AVX)
// runs the x86-64-v2 version's, with the JIT's results.
TEST_F(BundleControlFlowTest, IfInEveryCodeVersion) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "x86-64 only";
#endif
  if (!have("qemu-x86_64")) GTEST_SKIP() << "no qemu-x86_64";
  const kiln::Model model = load("vad", if_on_rate());
  kiln::Model::FreezeOptions o;
  o.batch_sizes = {1, 4};
  o.cpu = "x86-64-v3,x86-64-v2";
  const fs::path driver = freeze(model, o);
  std::mt19937 rng(4);
  for (const std::string runner : {"", "qemu-x86_64 -cpu Nehalem"})
    for (int64_t rate : {16000, 8000}) {
      SCOPED_TRACE(runner + " rate " + std::to_string(rate));
      matches_the_jit(model, driver, 5, {{"x", floats(rng, {5, 4, 6})}, {"rate", int64_scalar(rate)}}, 1, runner);
    }
}

// With native kernels the parent's nodes are oneDNN primitives and the
// branches portable code, as in any bundle; for aarch64, under qemu.
TEST_F(BundleControlFlowTest, IfInNativeAndAarch64Bundles) {
  const kiln::Model model = load("vad", if_on_rate());
  std::mt19937 rng(7);
  kiln::Model::FreezeOptions o;
  o.batch_sizes = {1, 4};
  o.kernels = "native";
  const fs::path native = freeze(model, o, "cc -DNO_STATIC_API", "-ldnnl");
  for (int64_t rate : {16000, 8000}) {
    SCOPED_TRACE("native, rate " + std::to_string(rate));
    matches_the_jit(model, native, 5, {{"x", floats(rng, {5, 4, 6})}, {"rate", int64_scalar(rate)}}, 2);
  }
  if (!have("aarch64-linux-gnu-gcc") || !have("qemu-aarch64")) GTEST_SKIP() << "no aarch64 cross compiler or qemu";
  o.kernels = "portable";
  o.target = "aarch64-linux-gnu";
  const fs::path arm = freeze(model, o, "aarch64-linux-gnu-gcc");
  for (int64_t rate : {16000, 8000}) {
    SCOPED_TRACE("aarch64, rate " + std::to_string(rate));
    matches_the_jit(model, arm, 3, {{"x", floats(rng, {3, 4, 6})}, {"rate", int64_scalar(rate)}}, 1,
                    "qemu-aarch64 -L /usr/aarch64-linux-gnu");
  }
}

// A recurrent cell as a Loop: h = tanh(h W + x), `trip` times, each step's
// h also stacked ([trip, batch, 3]: the batch on axis 1). With the trip
// count as data there is no stacked output (its length would be the data's).
onnx::ModelProto loop_cell(bool trip_from_input) {
  std::mt19937 rng(12);
  ModelBuilder body;
  body.graph().set_name("body");
  body.input("i", kInt64, {}).input("cond_in", kBool, {}).input("h_in", kFloat, {"batch", 3});
  body.output("cond_out", kBool, {}).output("h_out", kFloat, {"batch", 3});
  if (!trip_from_input) body.output("h_each", kFloat, {"batch", 3});
  body.node("Identity", {"cond_in"}, {"cond_out"});
  body.node("MatMul", {"h_in", "W"}, {"p"});
  body.node("Add", {"p", "x"}, {"q"});
  body.node("Tanh", {"q"}, {"h_out"});
  if (!trip_from_input) body.node("Relu", {"h_out"}, {"h_each"});
  ModelBuilder b(13);
  b.input("x", kFloat, {"batch", 3}).input("h0", kFloat, {"batch", 3}).output("h", kFloat, {"batch", 3});
  b.initializer(random_weights(rng, 0.6f, "W", {3, 3}));
  if (trip_from_input) {
    b.input("trip", kInt64, {});
  } else {
    b.output("hs", kFloat, {5, "batch", 3});
    b.initializer(ModelBuilder::int64_tensor("trip", {}, {5}));
  }
  auto& n =
      b.node("Loop", {"trip", "", "h0"}, trip_from_input ? std::vector<std::string>{"h"} : std::vector<std::string>{"h", "hs"});
  ModelBuilder::attr_graph(n, "body", body.graph());
  return b.model();
}

TEST_F(BundleControlFlowTest, LoopWithStackedStepsOnAnotherBatchAxis) {
  const kiln::Model model = load("cell", loop_cell(false));
  kiln::Model::FreezeOptions o;
  o.batch_sizes = {1, 4};
  o.batch_axes = {{"hs", 1}};
  const fs::path driver = freeze(model, o);
  std::mt19937 rng(5);
  for (int64_t batch : {1, 4, 6})
    for (int threads : {1, 3}) {
      SCOPED_TRACE("batch " + std::to_string(batch) + ", threads " + std::to_string(threads));
      matches_the_jit(model, driver, batch, {{"x", floats(rng, {batch, 3})}, {"h0", floats(rng, {batch, 3})}}, threads);
    }
  matches_the_jit(model, driver, 1, {{"x", floats(rng, {1, 3})}, {"h0", floats(rng, {1, 3})}}, 0);  // the static API
}

// The trip count is an input: the bundle runs as many iterations as it says, none included.
TEST_F(BundleControlFlowTest, LoopWithATripCountFromData) {
  const kiln::Model model = load("cell", loop_cell(true));
  kiln::Model::FreezeOptions o;
  o.batch_sizes = {1, 2};
  const fs::path driver = freeze(model, o);
  std::mt19937 rng(6);
  for (int64_t trip : {0, 1, 7}) {
    SCOPED_TRACE("trip " + std::to_string(trip));
    matches_the_jit(model, driver, 2, {{"x", floats(rng, {2, 3})}, {"h0", floats(rng, {2, 3})}, {"trip", int64_scalar(trip)}});
  }
}

// A Loop that stops on its condition: h doubles while its sum stays under
// a limit, so the data decides how often; a state of fixed shape only.
TEST_F(BundleControlFlowTest, LoopUntilItsConditionTurnsFalse) {
  ModelBuilder body;
  body.graph().set_name("body");
  body.input("i", kInt64, {}).input("cond_in", kBool, {}).input("h_in", kFloat, {1, 4});
  body.output("cond_out", kBool, {}).output("h_out", kFloat, {1, 4});
  body.initializer(ModelBuilder::float_tensor("two", {}, {2.0f}));
  body.initializer(ModelBuilder::float_tensor("limit", {}, {100.0f}));
  body.node("Mul", {"h_in", "two"}, {"h_out"});
  ModelBuilder::attr_int(body.node("ReduceSum", {"h_out"}, {"sum"}), "keepdims", 0);
  body.node("Less", {"sum", "limit"}, {"cond_out"});
  ModelBuilder b(13);
  b.input("h0", kFloat, {1, 4}).input("go", kBool, {}).output("h", kFloat, {1, 4});
  ModelBuilder::attr_graph(b.node("Loop", {"", "go", "h0"}, {"h"}), "body", body.graph());
  const kiln::Model model = load("doubling", b.model());
  const fs::path driver = freeze(model, {});
  for (const auto& [start, go] : std::vector<std::pair<float, bool>>{{0.1f, true}, {3.0f, true}, {1.0f, false}}) {
    SCOPED_TRACE(std::to_string(start) + (go ? " go" : " stop"));
    matches_the_jit(model, driver, 1,
                    {{"h0", kiln::Tensor::from_vector(kiln::DType::Float32, {1, 4}, std::vector<float>(4, start))},
                     {"go", kiln::Tensor::from_vector(kiln::DType::Bool, {}, std::vector<uint8_t>{uint8_t(go)})}});
  }
}

// A Loop with neither a trip count nor a condition that turns false stops
// after 2^24 iterations (as the JIT's does) with a status, not a hang.
TEST_F(BundleControlFlowTest, LoopThatRunsAwayFails) {
  ModelBuilder body;
  body.graph().set_name("body");
  body.input("i", kInt64, {}).input("cond_in", kBool, {}).input("h_in", kFloat, {4});
  body.output("cond_out", kBool, {}).output("h_out", kFloat, {4});
  body.node("Identity", {"cond_in"}, {"cond_out"});
  body.node("Neg", {"h_in"}, {"h_out"});
  ModelBuilder b(13);
  b.input("h0", kFloat, {4}).input("go", kBool, {}).output("h", kFloat, {4});
  ModelBuilder::attr_graph(b.node("Loop", {"", "go", "h0"}, {"h"}), "body", body.graph());
  const kiln::Model model = load("forever", b.model());
  const fs::path driver = freeze(model, {});
  write_file(dir_ / "h0.in", std::string(16, '\0'));
  write_file(dir_ / "go.in", std::string(1, '\1'));
  const Output r = sh(driver.string() + " " + (dir_ / "net.weights.bin").string() + " 1 1 " + (dir_ / "h0.in").string() + " " +
                      (dir_ / "go.in").string() + " " + (dir_ / "h.out").string() + ":16");
  EXPECT_EQ(r.code, 1) << r.text;
  EXPECT_NE(r.text.find("run: a Loop ran another number of iterations"), std::string::npos) << r.text;
}

// A Scan over a sequence-major input ([steps, batch, 3]: the batch on axis
// 1), read from its last step to its first: s = tanh(s + x_t W), each
// step's 2s stacked.
TEST_F(BundleControlFlowTest, ScanReversedOverASequence) {
  std::mt19937 rng(13);
  ModelBuilder body;
  body.graph().set_name("body");
  body.input("s_in", kFloat, {"batch", 4}).input("x_t", kFloat, {"batch", 3});
  body.output("s_out", kFloat, {"batch", 4}).output("y_t", kFloat, {"batch", 4});
  body.initializer(ModelBuilder::float_tensor("two", {}, {2.0f}));
  body.node("MatMul", {"x_t", "W"}, {"p"});
  body.node("Add", {"s_in", "p"}, {"q"});
  body.node("Tanh", {"q"}, {"s_out"});
  body.node("Mul", {"s_out", "two"}, {"y_t"});
  ModelBuilder b(11);
  b.input("s0", kFloat, {"batch", 4}).input("xs", kFloat, {6, "batch", 3});
  b.output("s", kFloat, {"batch", 4}).output("ys", kFloat, {6, "batch", 4});
  b.initializer(random_weights(rng, 0.6f, "W", {3, 4}));
  auto& n = b.node("Scan", {"s0", "xs"}, {"s", "ys"});
  ModelBuilder::attr_graph(n, "body", body.graph());
  ModelBuilder::attr_int(n, "num_scan_inputs", 1);
  ModelBuilder::attr_ints(n, "scan_input_directions", {1});
  const kiln::Model model = load("scan", b.model());
  kiln::Model::FreezeOptions o;
  o.batch_sizes = {1, 2};
  o.batch_axes = {{"xs", 1}, {"ys", 1}};
  const fs::path driver = freeze(model, o);
  for (int64_t batch : {2, 3})
    for (int threads : {1, 3}) {
      SCOPED_TRACE("batch " + std::to_string(batch) + ", threads " + std::to_string(threads));
      matches_the_jit(model, driver, batch, {{"s0", floats(rng, {batch, 4})}, {"xs", floats(rng, {6, batch, 3})}}, threads);
    }
}

// A branch whose values' shapes depend on the data (NonZero) cannot be
// frozen, though its output's shape does not: the error names the If, the
// branch and the value.
TEST_F(BundleControlFlowTest, BodyWithShapesFromDataIsRefused) {
  ModelBuilder counted, plain;
  counted.graph().set_name("counted");
  counted.output("r", kFloat, {2, 4});
  counted.node("NonZero", {"x"}, {"nz"});
  counted.node("Size", {"nz"}, {"n"});
  ModelBuilder::attr_int(counted.node("Cast", {"n"}, {"nf"}), "to", kFloat);
  counted.node("Mul", {"x", "nf"}, {"r"});
  plain.graph().set_name("plain");
  plain.output("r", kFloat, {2, 4});
  plain.node("Relu", {"x"}, {"r"});
  ModelBuilder b;
  b.input("x", kFloat, {2, 4}).input("flag", kBool, {}).output("y", kFloat, {2, 4});
  auto& branch = b.node("If", {"flag"}, {"y"}, "choose");
  ModelBuilder::attr_graph(branch, "then_branch", counted.graph());
  ModelBuilder::attr_graph(branch, "else_branch", plain.graph());
  const kiln::Model model = load("counted", b.model());
  kiln::Model::FreezeOptions o;
  o.output_dir = dir_.string();
  try {
    model.freeze(o);
    ADD_FAILURE() << "froze a branch whose shapes depend on the data";
  } catch (const kiln::Error& e) {
    EXPECT_EQ(e.code(), kiln::ErrorCode::Unsupported);
    for (const char* text : {"node 'choose' (If): ", "the shape of 'nz' in its then_branch depends on the data"})
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << text << " in: " << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ / "counted.o"));
}

}  // namespace
