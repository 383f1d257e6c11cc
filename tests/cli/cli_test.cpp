// The kiln command, run as a user would: exit codes, stdout, stderr, files.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/npy.hpp"
#include "kiln/kiln.hpp"
#include "model_builder.hpp"

namespace fs = std::filesystem;

namespace {

const std::string kDigits = std::string(KILN_SOURCE_DIR) + "/examples/digits/";

// Per-process paths: ctest runs tests (and CI other clones) in parallel.
fs::path temp_path(const std::string& name) { return fs::path(::testing::TempDir()) / (name + "_" + std::to_string(::getpid())); }

struct Result {
  int code;
  std::string out;
  std::string err;
};

Result kiln_cmd(const std::string& args) {
  // ctest runs tests in parallel processes: each call gets its own file.
  static int calls = 0;
  std::string err_path = temp_path("kiln_stderr_" + std::to_string(calls++)).string();
  std::string cmd = std::string(KILN_CLI_PATH) + " " + args + " 2>" + err_path;
  FILE* p = popen(cmd.c_str(), "r");
  Result r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_path);
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  fs::remove(err_path);
  return r;
}

}  // namespace

TEST(Cli, InspectShowsInputsOutputsAndOperators) {
  auto r = kiln_cmd("inspect " + kDigits + "digits.onnx");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("image  float32 [batch,1,8,8]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("probabilities  float32 [batch,10]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Gemm"), std::string::npos);
  EXPECT_NE(r.out.find("all operators are supported"), std::string::npos) << r.out;
}

TEST(Cli, InspectJson) {
  auto r = kiln_cmd("inspect --json " + kDigits + "digits.onnx");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["opset"], 13);
  EXPECT_EQ(j["inputs"][0]["shape"][0], "batch");
  EXPECT_EQ(j["operators"]["Gemm"], 2);
  EXPECT_TRUE(j["supported"].get<bool>());
}

TEST(Cli, RunWritesOutputsThatRoundTripThroughNpy) {
  fs::path dir = temp_path("kiln_cli_out");
  fs::remove_all(dir);
  auto r = kiln_cmd("run " + kDigits + "digits.onnx --input image=" + kDigits + "digit.npy --output-dir " + dir.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("predicted class): 7"), std::string::npos) << r.out;

  kiln::Tensor written = kiln::npy::load((dir / "probabilities.npy").string());
  kiln::Runtime rt;
  auto model = kiln::Model::load(rt, kDigits + "digits.onnx");
  auto expected = model.run({{"image", kiln::npy::load(kDigits + "digit.npy")}})[0];
  ASSERT_EQ(written.shape(), expected.shape());
  EXPECT_EQ(std::memcmp(written.data(), expected.data(), expected.nbytes()), 0);
}

TEST(Cli, RunJsonWithRepeatAndRandomInputs) {
  auto r = kiln_cmd("run " + kDigits + "digits.onnx --random-inputs --dim batch=3 --repeat 5 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["outputs"][0]["shape"], nlohmann::json({3, 10}));
  EXPECT_EQ(j["outputs"][0]["argmax"].size(), 3u);
  EXPECT_EQ(j["latency_ms"]["runs"], 5);
  EXPECT_LE(j["latency_ms"]["min"].get<double>(), j["latency_ms"]["p90"].get<double>());
  for (const char* phase : {"runtime_ms", "load_ms", "first_run_ms"}) EXPECT_GT(j[phase].get<double>(), 0.0) << phase;
  // The first run includes the compile.
  EXPECT_GE(j["first_run_ms"].get<double>(), j["specializations"][0]["compile_ms"].get<double>());
}

TEST(Cli, AnEmptyBatchRunsAndAnUnknownDimIsWarnedAbout) {
  auto r = kiln_cmd("run " + kDigits + "digits.onnx --random-inputs --dim batch=0 --dim bach=3 --no-cache --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["outputs"][0]["shape"], nlohmann::json({0, 10}));
  EXPECT_NE(r.err.find("warning: --dim bach=3: no input has a dimension named 'bach' (named: batch); ignored"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("'batch'"), std::string::npos) << "the batch was given: " << r.err;
}

TEST(Cli, ProfileTimesTheStepsOfCompiledAndInterpretedParts) {
  // NonZero's count depends on the data: the interpreter runs it and what
  // follows it up to the Mul, between compiled parts.
  kiln::test::ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {2, 3}).output("y", onnx::TensorProto::FLOAT, {2, 3});
  b.node("Relu", {"x"}, {"a"});
  b.node("NonZero", {"a"}, {"where"});
  kiln::test::ModelBuilder::attr_int(b.node("Cast", {"where"}, {"where_f"}), "to", onnx::TensorProto::FLOAT);
  b.node("ReduceSum", {"where_f"}, {"s"});
  b.node("Mul", {"a", "s"}, {"y"});
  const fs::path model = temp_path("kiln_cli_nonzero.onnx");
  {
    std::ofstream f(model, std::ios::binary);
    ASSERT_TRUE(b.model().SerializeToOstream(&f));
  }
  ::setenv("KILN_PROFILE", "all", 1);
  auto r = kiln_cmd("run " + model.string() + " --random-inputs --repeat 3");
  ::unsetenv("KILN_PROFILE");
  fs::remove(model);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("cpu+interpreter backend (3 parts)"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("kiln profile: 3 interpreted nodes, "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("over 3 runs after the first; every step, each its median:"), std::string::npos) << r.err;
  for (const char* step : {"interp node 'NonZero_1' (NonZero)", "interp node 'ReduceSum_3' (ReduceSum)", "(Relu)", "(Mul)"})
    EXPECT_NE(r.err.find(step), std::string::npos) << step << " in\n" << r.err;
}

TEST(Cli, OutputNamesAreMadeFileSafe) {
  // Output names with '/' and ':' (common in exported graphs) must not escape the directory.
  fs::path dir = temp_path("kiln_cli_safe");
  fs::remove_all(dir);
  auto model = temp_path("odd_names.onnx");
  {
    // A model whose output is called "../out:0".
    kiln::Runtime rt;
    std::string src;
    std::ifstream in(kDigits + "digits.onnx", std::ios::binary);
    src.assign(std::istreambuf_iterator<char>(in), {});
    size_t pos;
    while ((pos = src.find("probabilities")) != std::string::npos) src.replace(pos, 13, "../prob:ties0");
    std::ofstream out(model, std::ios::binary);
    out << src;
  }
  auto r = kiln_cmd("run " + model.string() + " --random-inputs --output-dir " + dir.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir / ".._prob_ties0.npy"));
}

TEST(Cli, ErrorsGoToStderrWithExitCode1) {
  fs::path trunc = temp_path("truncated.onnx");
  {
    std::ifstream in(kDigits + "digits.onnx", std::ios::binary);
    std::string bytes(std::istreambuf_iterator<char>(in), {});
    std::ofstream out(trunc, std::ios::binary);
    out << bytes.substr(0, bytes.size() / 2);
  }
  for (const std::string& cmd : {"inspect " + trunc.string(), "run " + trunc.string() + " --random-inputs"}) {
    auto r = kiln_cmd(cmd);
    EXPECT_EQ(r.code, 1) << cmd;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  auto r = kiln_cmd("run " + kDigits + "digits.onnx --input image=" + kDigits + "test_labels.npy");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("'image'"), std::string::npos) << r.err;
  r = kiln_cmd("run " + kDigits + "digits.onnx");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--random-inputs"), std::string::npos) << r.err;
}

TEST(Cli, CacheDirMayFollowTheCacheSubcommand) {
  // ctest turns the cache off for these tests; the cache commands need it on.
  const std::string cache_env = std::getenv("KILN_CACHE") ? std::getenv("KILN_CACHE") : "";
  ::unsetenv("KILN_CACHE");
  const fs::path dir = temp_path("kiln_cli_cache");
  fs::remove_all(dir);
  auto r = kiln_cmd("run " + kDigits + "digits.onnx --random-inputs --cache-dir " + dir.string());
  ASSERT_EQ(r.code, 0) << r.err;
  // Both places of the option, for every subcommand; each must see the one entry.
  const std::string d = " --cache-dir " + dir.string();
  for (const std::string& ls : {"cache ls" + d, "cache" + d + " ls"}) {
    r = kiln_cmd(ls);
    EXPECT_EQ(r.code, 0) << ls << ": " << r.err;
    EXPECT_NE(r.out.find("1 entries, "), std::string::npos) << ls << ": " << r.out;
    EXPECT_NE(r.out.find(dir.string()), std::string::npos) << ls << ": " << r.out;
  }
  for (const std::string& verify : {"cache verify" + d, "cache" + d + " verify"}) {
    r = kiln_cmd(verify);
    EXPECT_EQ(r.code, 0) << verify << ": " << r.err;
    EXPECT_NE(r.out.find("0 bad entries removed"), std::string::npos) << verify << ": " << r.out;
    EXPECT_NE(r.out.find("; 1 entries remain"), std::string::npos) << verify << ": " << r.out;
  }
  for (const std::string& prune : {"cache prune --max-bytes 1000000000" + d, "cache" + d + " prune --max-bytes 1000000000"}) {
    r = kiln_cmd(prune);
    EXPECT_EQ(r.code, 0) << prune << ": " << r.err;
    EXPECT_NE(r.out.find("0 entries removed"), std::string::npos) << prune << ": " << r.out;
  }
  r = kiln_cmd("cache clear" + d);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("1 entries removed"), std::string::npos) << r.out;
  r = kiln_cmd("cache" + d + " clear");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("0 entries removed"), std::string::npos) << r.out;
  if (!cache_env.empty()) ::setenv("KILN_CACHE", cache_env.c_str(), 1);
  fs::remove_all(dir);
}

TEST(Cli, AHostileNpyInputIsAnErrorNotACrash) {
  // A 30 KB element type crashed `kiln run`: std::regex overflowed the stack.
  const fs::path npy = temp_path("kiln_cli_long_descr.npy");
  {
    std::string header = "{'descr': '" + std::string(30000, 'x') + "', 'fortran_order': False, 'shape': (1, 1, 8, 8), }";
    header.append(63 - (10 + header.size()) % 64, ' ');
    header += '\n';
    std::ofstream out(npy, std::ios::binary);
    const char prefix[10] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0, char(header.size() & 0xff), char(header.size() >> 8)};
    out.write(prefix, 10);
    out << header << std::string(256, '\0');
  }
  auto r = kiln_cmd("run " + kDigits + "digits.onnx --input image=" + npy.string() + " --no-cache");
  fs::remove(npy);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err.rfind("error: '" + npy.string() + "' is not a usable .npy file: element type 'xxx", 0), 0u) << r.err;
  EXPECT_LT(r.err.size(), 600u) << r.err;
}

TEST(Cli, EverySubcommandHasHelp) {
  for (const std::string& sub : {"inspect", "run"}) {
    auto r = kiln_cmd(sub + " --help");
    EXPECT_EQ(r.code, 0) << sub;
    EXPECT_NE(r.out.find("MODEL"), std::string::npos) << r.out;
  }
  EXPECT_NE(kiln_cmd("--help").out.find("inspect"), std::string::npos);
  EXPECT_NE(kiln_cmd("frobnicate").code, 0);
}

// aot-freeze --batch-axis NAME=AXIS: a whole number per input or output,
// each named once; the output whose batch is on axis 1 must be given too.
TEST(Cli, AotFreezeBatchAxisIsChecked) {
  using kiln::test::ModelBuilder;
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {4, "batch"}).output("y", onnx::TensorProto::FLOAT, {4, "batch"});
  b.node("Relu", {"x"}, {"y"});
  const fs::path model = temp_path("columns.onnx"), out = temp_path("columns_bundle");
  {
    std::ofstream f(model, std::ios::binary);
    f << b.model().SerializeAsString();
  }
  const std::string freeze = "aot-freeze " + model.string() + " -o " + out.string() + " --no-cache --batch-sizes 1,2 ";
  auto r = kiln_cmd(freeze + "--batch-axis x=1 --batch-axis y=1");
  EXPECT_EQ(r.code, 0) << r.err;
  std::ifstream header(out / "columns.h");
  const std::string h(std::istreambuf_iterator<char>(header), {});
  EXPECT_NE(h.find("input  0 \"x\" float32 [4, B]"), std::string::npos) << h;
  for (const auto& [options, message] :
       std::vector<std::pair<std::string, std::string>>{{"--batch-axis x", "must look like NAME=VALUE"},
                                                        {"--batch-axis x=-1", "'-1' is not a non-negative integer"},
                                                        {"--batch-axis x=one", "'one' is not a non-negative integer"},
                                                        {"--batch-axis x=1 --batch-axis x=1", "--batch-axis names 'x' twice"},
                                                        {"--batch-axis x=1", "give --batch-axis y=1"},
                                                        {"", "leave out --batch-sizes, or give --batch-axis NAME=AXIS"}}) {
    r = kiln_cmd(freeze + options);
    EXPECT_EQ(r.code, 1) << options;
    EXPECT_NE(r.err.find(message), std::string::npos) << options << ": " << r.err;
  }
  fs::remove_all(out);
  fs::remove(model);
}

// aot-freeze --constant: a number for an input of one element, of the
// input's type; a .npy file otherwise. The frozen bundle takes the other
// inputs only.
TEST(Cli, AotFreezeConstantIsCheckedAgainstTheInput) {
  using kiln::test::ModelBuilder;
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {"batch", 4}).input("gain", onnx::TensorProto::INT64, {});
  b.output("y", onnx::TensorProto::FLOAT, {"batch", 4});
  ModelBuilder::attr_int(b.node("Cast", {"gain"}, {"g"}), "to", onnx::TensorProto::FLOAT);
  b.node("Mul", {"x", "g"}, {"y"});
  const fs::path model = temp_path("gain.onnx"), out = temp_path("gain_bundle");
  {
    std::ofstream f(model, std::ios::binary);
    f << b.model().SerializeAsString();
  }
  const std::string freeze = "aot-freeze " + model.string() + " -o " + out.string() + " --no-cache --constant ";
  auto r = kiln_cmd(freeze + "gain=3");
  EXPECT_EQ(r.code, 0) << r.err;
  std::ifstream header(out / "gain.h");
  const std::string h(std::istreambuf_iterator<char>(header), {});
  EXPECT_NE(h.find("#define GAIN_NUM_INPUTS 1"), std::string::npos) << h;
  for (const auto& [value, message] :
       std::vector<std::pair<std::string, std::string>>{{"gain=1.5", "takes integers of its type (int64)"},
                                                        {"gain=1e30", "takes integers of its type (int64)"},
                                                        {"gain=three", "is neither a number nor a .npy file"},
                                                        {"x=1", "not one element: give its value as a .npy file"},
                                                        {"rate=1", "the model has no input 'rate'"}}) {
    r = kiln_cmd(freeze + value);
    EXPECT_EQ(r.code, 1) << value;
    EXPECT_NE(r.err.find(message), std::string::npos) << value << ": " << r.err;
  }
  fs::remove_all(out);
  fs::remove(model);
}
