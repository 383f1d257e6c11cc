// Backend plugins through the public API: a model split between a plugin and
// the cpu backend matches the reference; plugin partitions come back from the
// cache with no compile; and every way toy_plugin.c can be built broken
// costs an error naming the plugin, or one warning and the right outputs.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"
#include "model_builder.hpp"

namespace fs = std::filesystem;

namespace {

using kiln::test::ModelBuilder;
constexpr int kFloat = onnx::TensorProto::FLOAT;

std::string plugin(const std::string& name) { return std::string(KILN_TEST_PLUGIN_DIR) + "/" + name + ".so"; }

// x [2,3] -> Relu -> Mul by a constant -> MatMul [3,4] -> Add to itself -> y.
// The toy plugin takes Relu, Mul and Add, the cpu backend the MatMul: three parts.
std::string split_model() {
  ModelBuilder b;
  b.input("x", kFloat, {2, 3}).output("y", kFloat, {2, 4});
  b.initializer(ModelBuilder::float_tensor("c", {2, 3}, {1, 2, 3, -1, -2, 0.5f}));
  std::vector<float> w(12);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * float(i) - 1;
  b.initializer(ModelBuilder::float_tensor("w", {3, 4}, w));
  b.node("Relu", {"x"}, {"r"}, "relu");
  b.node("Mul", {"r", "c"}, {"m"}, "scale");
  b.node("MatMul", {"m", "w"}, {"mm"}, "project");
  b.node("Add", {"mm", "mm"}, {"y"}, "double");
  return b.bytes();
}

kiln::Tensor input_x() {
  kiln::Tensor x(kiln::DType::Float32, {2, 3});
  const float v[] = {0.5f, -1, 2, 3, -0.25f, 1};
  for (int i = 0; i < 6; ++i) x.data_as<float>()[i] = v[i];
  return x;
}

// A private temporary directory (plugins and caches must not be shared).
struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/kiln-plugin-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string path;
};

class Plugins : public ::testing::Test {
 protected:
  kiln::RuntimeOptions options(std::vector<std::string> plugins, const std::string& cache_dir = "") {
    kiln::RuntimeOptions o;
    o.plugins = std::move(plugins);
    o.cache = !cache_dir.empty();
    o.cache_dir = cache_dir;
    o.logger = [this](kiln::LogLevel level, const std::string& m) {
      if (level >= kiln::LogLevel::Warning) warnings += m + "\n";
    };
    return o;
  }
  std::vector<float> run(const kiln::RuntimeOptions& o, kiln::SpecializationStats* stats = nullptr) {
    kiln::Runtime rt(o);
    const std::string bytes = split_model();
    kiln::Model model =
        kiln::Model::load_from_memory(rt, bytes.data(), bytes.size(), kiln::Model::MemoryLoadOptions{"", !o.cache_dir.empty()});
    auto out = model.run({{"x", input_x()}});
    if (stats) *stats = model.specializations().at(0);
    rt.wait_for_cache();
    const float* y = out.at(0).data_as<float>();
    return std::vector<float>(y, y + out.at(0).numel());
  }
  std::vector<float> reference() {
    kiln::RuntimeOptions o = options({});
    o.backend = "reference";
    return run(o);
  }
  std::string warnings;
};

void expect_near(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f * (1 + std::fabs(want[i]))) << "element " << i;
}

TEST_F(Plugins, AModelSplitBetweenAPluginAndCpuMatchesTheReference) {
  kiln::SpecializationStats stats;
  const auto got = run(options({plugin("toy")}), &stats);
  expect_near(got, reference());
  EXPECT_EQ(stats.backend, "toy+cpu");
  EXPECT_EQ(stats.parts, 3);
  EXPECT_EQ(warnings, "");
}

TEST_F(Plugins, TheReferencePluginForcedRunsEveryNodeAsTheReferenceDoes) {
  kiln::RuntimeOptions o = options({plugin("kiln-reference")});
  o.backend = "kiln-reference";
  kiln::SpecializationStats stats;
  EXPECT_EQ(run(o, &stats), reference());
  EXPECT_EQ(stats.backend, "kiln-reference");
  EXPECT_EQ(stats.compiled_nodes, stats.nodes);
}

// A plugin that takes every node is still handed only the outputs its nodes
// make: the graph's input and constant among the outputs are served by the host.
TEST_F(Plugins, OutputsThatAreAnInputOrAConstantAreServedByTheHost) {
  ModelBuilder b;
  b.input("x", kFloat, {2, 3}).output("y", kFloat, {2, 3}).output("x", kFloat, {2, 3}).output("c", kFloat, {2, 3});
  b.initializer(ModelBuilder::float_tensor("c", {2, 3}, {1, 2, 3, -1, -2, 0.5f}));
  b.node("Relu", {"x"}, {"y"}, "relu");
  const std::string bytes = b.bytes();
  kiln::Runtime rt(options({plugin("toy")}));
  kiln::Model model = kiln::Model::load_from_memory(rt, bytes.data(), bytes.size());
  const auto out = model.run({{"x", input_x()}});
  ASSERT_EQ(out.size(), 3u);
  const kiln::Tensor x = input_x();
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(out[0].data_as<float>()[i], std::max(0.f, x.data_as<float>()[i]));
    EXPECT_EQ(out[1].data_as<float>()[i], x.data_as<float>()[i]);
  }
  EXPECT_EQ(out[2].data_as<float>()[5], 0.5f);
  EXPECT_EQ(model.specializations().at(0).backend, "toy");
  EXPECT_EQ(warnings, "");
}

// Run in a fresh process (a death test re-executes this binary), where no
// plugin is loaded yet: the entry point's message goes to the Runtime's
// logger, not to stderr.
TEST(PluginLog, WhatAPluginSaysWhenLoadedReachesTheRuntimeThatLoadsIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        std::string said;
        kiln::RuntimeOptions o;
        o.plugins = {plugin("toy")};
        o.cache = false;  // the default cache directory is shared with tests running beside this one
        o.log_level = kiln::LogLevel::Info;
        o.logger = [&](kiln::LogLevel level, const std::string& m) {
          if (level == kiln::LogLevel::Info) said += m;
        };
        // Destroyed before exit(): exit() runs static destructors, which a
        // live Runtime's worker threads may still be using.
        {
          kiln::Runtime rt(o);
        }
        std::exit(said.find("toy: ready") != std::string::npos ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(Plugins, ExcludedPluginsAreNotAsked) {
  kiln::RuntimeOptions o = options({plugin("toy")});
  o.excluded_plugins = {"toy"};
  kiln::SpecializationStats stats;
  run(o, &stats);
  EXPECT_EQ(stats.backend, "cpu");
}

TEST_F(Plugins, PluginPartitionsComeBackFromTheCacheWithNoCompile) {
  TempDir cache;
  kiln::SpecializationStats cold, warm;
  const auto first = run(options({plugin("toy")}, cache.path), &cold);
  EXPECT_EQ(cold.cache, kiln::CacheOutcome::Miss);
  kiln::Runtime rt(options({plugin("toy")}, cache.path));
  const std::string bytes = split_model();
  kiln::Model model = kiln::Model::load_from_memory(rt, bytes.data(), bytes.size(), kiln::Model::MemoryLoadOptions{"", true});
  auto out = model.run({{"x", input_x()}});
  warm = model.specializations().at(0);
  EXPECT_EQ(warm.cache, kiln::CacheOutcome::Hit) << warm.cache_note;
  EXPECT_EQ(warm.backend, "toy+cpu");
  EXPECT_EQ(rt.codegen_runs(), 0) << "a warm start compiled on some backend";
  const float* y = out.at(0).data_as<float>();
  EXPECT_EQ(std::vector<float>(y, y + out.at(0).numel()), first);
}

TEST_F(Plugins, PluginsAreListedWithWhatTheyClaim) {
  kiln::Runtime rt(options({plugin("toy"), plugin("kiln-reference")}));
  const auto list = rt.plugins();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name, "toy");  // priority 10 before 0
  EXPECT_EQ(list[0].abi_version, 1);
  EXPECT_EQ(list[0].operators, (std::vector<std::string>{"Relu", "Add", "Mul"}));
  EXPECT_EQ(list[1].name, "kiln-reference");
}

TEST_F(Plugins, APluginWritableByOthersIsRefused) {
  TempDir dir;
  const std::string copy = dir.path + "/toy-copy.so";
  fs::copy_file(plugin("toy-compile-fails"), copy);
  ::chmod(copy.c_str(), 0777);
  try {
    kiln::Runtime rt(options({copy}));
    FAIL() << "a world-writable plugin was loaded";
  } catch (const kiln::Error& e) {
    EXPECT_EQ(e.code(), kiln::ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("writable by everyone"), std::string::npos) << e.what();
  }
}

// ---- Broken plugins ----------------------------------------------------------

struct Broken {
  const char* name;     // the library: toy-<name>.so
  const char* message;  // what the error or the warning says
};
void PrintTo(const Broken& b, std::ostream* os) { *os << b.name; }

const Broken kUnloadable[] = {
    {"wrong-abi", "built for backend ABI version 99"},
    {"no-entry", "exports no kiln_backend_entry"},
    {"refuses", "toy refuses: no licence for this host"},
    {"builtin-name", "is a built-in backend's"},
};

std::string broken_name(const ::testing::TestParamInfo<Broken>& info) {
  std::string n = info.param.name;
  for (char& c : n)
    if (c == '-') c = '_';
  return n;
}

class UnloadablePlugins : public Plugins, public ::testing::WithParamInterface<Broken> {};

TEST_P(UnloadablePlugins, NamedInOptionsAreAnErrorNamingThePlugin) {
  const std::string path = plugin(std::string("toy-") + GetParam().name);
  try {
    kiln::Runtime rt(options({path}));
    FAIL() << "loaded";
  } catch (const kiln::Error& e) {
    EXPECT_EQ(e.code(), kiln::ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(GetParam().message), std::string::npos) << e.what();
  }
}

TEST_P(UnloadablePlugins, FromTheEnvironmentCostAWarningAndTheModelRunsOnCpu) {
  const std::string path = plugin(std::string("toy-") + GetParam().name);
  ::setenv("KILN_PLUGIN_PATH", path.c_str(), 1);
  kiln::SpecializationStats stats;
  const auto got = run(options({}), &stats);
  ::unsetenv("KILN_PLUGIN_PATH");
  expect_near(got, reference());
  EXPECT_EQ(stats.backend, "cpu");
  EXPECT_NE(warnings.find(GetParam().message), std::string::npos) << warnings;
}

INSTANTIATE_TEST_SUITE_P(Toy, UnloadablePlugins, ::testing::ValuesIn(kUnloadable), broken_name);

// Plugins that load and then misbehave: one warning each, and the cpu
// backend takes their nodes.
const Broken kMisbehaving[] = {
    {"bad-node", "it named node 9, the graph has nodes 0 to 3"},
    {"duplicate", "claimed node 'relu' (Relu) twice"},
    {"compile-fails", "toy compile failed on purpose"},
};

class MisbehavingPlugins : public Plugins, public ::testing::WithParamInterface<Broken> {};

TEST_P(MisbehavingPlugins, CostOneWarningAndTheBuiltInBackendsTakeTheirNodes) {
  kiln::SpecializationStats stats;
  const auto got = run(options({plugin(std::string("toy-") + GetParam().name)}), &stats);
  expect_near(got, reference());
  EXPECT_EQ(stats.backend, "cpu");
  EXPECT_NE(warnings.find(GetParam().message), std::string::npos) << warnings;
  EXPECT_NE(warnings.find(std::string("plugin 'toy-") + GetParam().name + "'"), std::string::npos) << warnings;
}

INSTANTIATE_TEST_SUITE_P(Toy, MisbehavingPlugins, ::testing::ValuesIn(kMisbehaving), broken_name);

TEST_F(Plugins, ARunThePluginFailsIsAnErrorNamingIt) {
  kiln::Runtime rt(options({plugin("toy-run-fails")}));
  const std::string bytes = split_model();
  kiln::Model model = kiln::Model::load_from_memory(rt, bytes.data(), bytes.size());
  try {
    model.run({{"x", input_x()}});
    FAIL() << "the run succeeded";
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("plugin 'toy-run-fails' failed to run its partition"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("toy run failed on purpose"), std::string::npos) << e.what();
  }
}

TEST_F(Plugins, ABlobThePluginCannotReadIsRebuiltWithAWarning) {
  TempDir cache;
  run(options({plugin("toy-bad-blob")}, cache.path));
  warnings.clear();
  kiln::SpecializationStats stats;
  const auto got = run(options({plugin("toy-bad-blob")}, cache.path), &stats);
  expect_near(got, reference());
  EXPECT_EQ(stats.cache, kiln::CacheOutcome::Rebuild);
  EXPECT_NE(stats.cache_note.find("refused by the plugin"), std::string::npos) << stats.cache_note;
  EXPECT_NE(warnings.find("toy-bad-blob"), std::string::npos) << warnings;
}

// ---- The kiln command -----------------------------------------------------------

struct Command {
  int code = -1;
  std::string out;
};

Command kiln_cmd(const std::string& args) {
  const std::string cmd = std::string(KILN_CLI_PATH) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  Command r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

const std::string kDigits = std::string(KILN_SOURCE_DIR) + "/examples/digits/digits.onnx";

TEST(PluginCommands, AotFreezeWithAPluginIsRefusedSayingWhy) {
  const auto r = kiln_cmd("aot-freeze " + kDigits + " -o /tmp/kiln-never-written --no-cache --plugin " + plugin("toy"));
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("a bundle runs without Kiln, so it cannot call a plugin"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists("/tmp/kiln-never-written"));
}

TEST(PluginCommands, PluginsListsEachWithItsAbiIdentityAndOperators) {
  const auto r = kiln_cmd("plugins --json --plugin " + plugin("toy") + " --plugin " + plugin("kiln-reference"));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["name"], "toy");
  EXPECT_EQ(j[0]["abi_version"], 1);
  EXPECT_EQ(j[0]["identity"], "toy plugin 1 (toy)");
  EXPECT_EQ(j[0]["operators"], nlohmann::json({"Relu", "Add", "Mul"}));
  EXPECT_EQ(j[1]["name"], "kiln-reference");
}

TEST(PluginCommands, ABrokenPluginGivenToACommandIsAnErrorNamingIt) {
  const auto r = kiln_cmd("plugins --plugin " + plugin("toy-wrong-abi"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("toy-wrong-abi.so: it was built for backend ABI version 99"), std::string::npos) << r.out;
}

TEST(PluginCommands, InspectShowsWhichBackendTakesEachNode) {
  const auto r = kiln_cmd("inspect --json " + kDigits + " --plugin " + plugin("toy") + " --dim batch=2");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  std::map<std::string, std::string> backend_of;
  for (const auto& p : j["placement"]) backend_of[p["op_type"]] = p["backend"];
  EXPECT_EQ(backend_of["Relu"], "toy");
  EXPECT_EQ(backend_of["Gemm"], "cpu");
}

TEST(PluginCommands, RunWithAPluginSaysWhichBackendsRanIt) {
  const auto r = kiln_cmd("run " + kDigits + " --random-inputs --no-cache --plugin " + plugin("toy"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("toy+cpu backend"), std::string::npos) << r.out;
}

}  // namespace
