// Frozen bundles as a user builds them: `kiln aot-freeze` (here through the
// same C++ call), a plain `cc` link of examples/bundle-c with nothing of
// Kiln's on the library path, runs over batch sizes the bundle was and was
// not compiled for (split and padded), compared with the JIT; what `ldd`
// shows; broken weights files and misused calls; bundles for CPUs other
// than the one they run on, under qemu (x86-64 and aarch64).
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
#include <sstream>
#include <tuple>

#include "bundle/runtime/bundle_abi.h"
#include "kiln/kiln.hpp"
#include "model_builder.hpp"
#include "shell.hpp"

namespace fs = std::filesystem;

namespace {

const std::string kSource = KILN_SOURCE_DIR;
const std::string kModel = kSource + "/examples/digits/digits.onnx";

class BundleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) / ("kiln_bundle_test_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    kiln::RuntimeOptions o;
    o.cache = false;
    o.threads = 1;
    runtime_ = std::make_unique<kiln::Runtime>(o);
    model_ = std::make_unique<kiln::Model>(kiln::Model::load(*runtime_, kModel));
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  kiln::Model::FreezeResult freeze(kiln::Model::FreezeOptions o) {
    o.output_dir = dir_.string();
    o.name = "digits";
    return model_->freeze(o);
  }
  void expect_refused(const std::string& model, const std::string& name, const std::string& node,
                      std::vector<std::string> kernels = {"portable", "native"});
  void quantized_net_matches(bool qdq, const std::string& target, const std::string& cc, const std::string& runner);

  // Images of 64 values in 0..16, like the training data.
  std::vector<float> images(int64_t count, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> value(0, 16);
    std::vector<float> v(size_t(count * 64));
    for (float& x : v) x = value(rng);
    return v;
  }

  std::vector<float> jit(const std::vector<float>& pixels, int64_t count) {
    kiln::Tensor in = kiln::Tensor::from_vector(kiln::DType::Float32, {count, 1, 8, 8}, pixels);
    const kiln::Tensor out = model_->run({{"image", in}})[0];
    return std::vector<float>(out.data_as<float>(), out.data_as<float>() + out.numel());
  }

  // Runs the linked example (through `runner`, e.g. qemu) on `count` images.
  std::vector<float> run_example(const fs::path& program, const std::vector<float>& pixels, int64_t count,
                                 const std::string& runner = "", const std::string& rule = "", int threads = 1,
                                 Output* result = nullptr) {
    write_file(dir_ / "images.f32", std::string(reinterpret_cast<const char*>(pixels.data()), pixels.size() * sizeof(float)));
    const Output o = sh(runner + " " + program.string() + " " + (dir_ / "digits.weights.bin").string() + " " +
                        (dir_ / "images.f32").string() + " " + std::to_string(count) + " " + (dir_ / "probs.f32").string() +
                        " '" + (rule.empty() ? "-" : rule) + "' " + std::to_string(threads));
    if (result)
      *result = o;  // the caller checks it
    else
      EXPECT_EQ(o.code, 0) << o.text;
    const std::string bytes = read_file(dir_ / "probs.f32");
    std::vector<float> probs(bytes.size() / sizeof(float));
    std::memcpy(probs.data(), bytes.data(), probs.size() * sizeof(float));
    return probs;
  }

  void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what, float step = 0) {
    ASSERT_EQ(got.size(), want.size()) << what;
    int bad = 0;
    for (size_t i = 0; i < want.size(); ++i)
      if (!(std::fabs(got[i] - want[i]) <= step * 1.001f + 1e-5f + 1e-4f * std::fabs(want[i])) && bad++ < 5)
        ADD_FAILURE() << what << ": [" << i << "] got " << got[i] << ", want " << want[i];
  }

  // tests/integration/bundle_misuse.c against the digits bundle.
  fs::path link_misuse(const std::string& cc = "cc") {
    const fs::path program = dir_ / "misuse";
    const Output o = sh(cc + " -O2 -DPREFIX=digits -DUPREFIX=DIGITS -include " + (dir_ / "digits.h").string() + " " + kSource +
                        "/tests/integration/bundle_misuse.c " + (dir_ / "digits.o").string() + " -lm -o " + program.string());
    EXPECT_EQ(o.code, 0) << o.text;
    return program;
  }

  fs::path link(const std::string& cc, const std::string& extra = "") {
    const fs::path program = dir_ / "classify";
    const Output o =
        sh(cc + " -O2 -I" + dir_.string() + " " + kSource + "/examples/bundle-c/main.c " + extra + " -lm -o " + program.string());
    EXPECT_EQ(o.code, 0) << o.text;
    return program;
  }

  // `model` (default: conv_net()) frozen with `kernels` at batch sizes 1 and
  // 8, run by a C program at batch sizes 1, 3, 8 and 13 and on 1 and 3
  // threads, against the JIT. Its input "x" is [batch, item...].
  // `step`: as expect_close's.
  void net_matches_the_jit(kiln::Runtime& runtime, const std::string& kernels, const std::string& libs, const std::string& model,
                           const std::vector<int64_t>& item);
  // How net_matches runs a bundle: compiled and run batch sizes, the target
  // (and the compiler and runner for it), and how far an output may be from
  // the runtime's (a quantized output: one step of its scale).
  struct NetRun {
    std::string kernels = "portable", libs = "-lm";
    std::vector<int64_t> frozen{1, 8}, batches{1, 3, 8, 13};
    std::string target, cc = "cc", runner;
    float step = 0;
  };
  void net_matches(kiln::Runtime& runtime, const std::string& model, const std::vector<int64_t>& item, const NetRun& how);
  void conv_net_matches_the_jit(kiln::Runtime& runtime, const std::string& kernels, const std::string& libs);

  fs::path dir_;
  std::unique_ptr<kiln::Runtime> runtime_;
  std::unique_ptr<kiln::Model> model_;
};

TEST_F(BundleTest, FilesAndHeaderDescribeTheBundle) {
  kiln::Model::FreezeOptions o;
  o.batch_sizes = {4, 1};
  const auto r = freeze(o);
  EXPECT_EQ(r.batch_sizes, (std::vector<int64_t>{1, 4}));
  for (const char* f : {"digits.h", "digits.o", "digits.weights.bin", "README.md"}) EXPECT_TRUE(fs::exists(dir_ / f)) << f;
  const std::string header = read_file(dir_ / "digits.h");
  for (const char* text :
       {"input  0 \"image\" float32 [B, 1, 8, 8]", "output 0 \"probabilities\" float32 [B, 10]", "Compiled batch sizes: 1, 4",
        "#define DIGITS_ARENA_BYTES_B4", "int32_t digits_run_b1(", "#define DIGITS_INPUT_0_ITEM_BYTES 256"})
    EXPECT_NE(header.find(text), std::string::npos) << "header lacks: " << text << "\n" << header;
  EXPECT_NE(read_file(dir_ / "README.md").find("cc main.c digits.o -lm"), std::string::npos);
}

// Batch sizes 1, 3, 8 and 13 from sizes 1 and 4: exact, split and padded.
TEST_F(BundleTest, CProgramMatchesTheJitForAnyBatchSize) {
  if (!have("cc")) GTEST_SKIP() << "no C compiler";
  kiln::Model::FreezeOptions o;
  o.batch_sizes = {1, 4};
  freeze(o);
  const fs::path program = link("cc", (dir_ / "digits.o").string());
  for (int64_t n : {1, 3, 8, 13}) {
    SCOPED_TRACE("batch " + std::to_string(n));
    const auto pixels = images(n, unsigned(n));
    expect_close(run_example(program, pixels, n), jit(pixels, n), "probabilities");
  }
  // A rule that pads: batch 3 as one padded run of 4.
  const auto pixels = images(3, 99);
  expect_close(run_example(program, pixels, 3, "", "3:4"), jit(pixels, 3), "probabilities with rule 3:4");
  // A rule naming a size the bundle was not compiled for is refused.
  Output bad;
  run_example(program, pixels, 3, "", "3:2,1", 1, &bad);
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.text.find("not compiled for"), std::string::npos) << bad.text;
}

// The host's parallel_for (pthreads in the example) splits the work; the
// results do not depend on it.
TEST_F(BundleTest, HostThreadsThroughParallelFor) {
  if (!have("cc")) GTEST_SKIP() << "no C compiler";
  kiln::Model::FreezeOptions o;
  o.batch_sizes = {1, 64};
  freeze(o);
  const fs::path program = link("cc", (dir_ / "digits.o").string());
  for (int64_t n : {3, 200}) {
    SCOPED_TRACE("batch " + std::to_string(n));
    const auto pixels = images(n, unsigned(30 + n));
    Output out;
    const auto threaded = run_example(program, pixels, n, "", "", 3, &out);
    EXPECT_EQ(out.code, 0) << out.text;
    EXPECT_NE(out.text.find("parallel_for calls:"), std::string::npos) << out.text;
    expect_close(threaded, jit(pixels, n), "probabilities");
    expect_close(threaded, run_example(program, pixels, n), "threaded against serial");
  }
}

// Bundles for older x86-64 CPUs than this one (other vector widths, so other
// GEMM micro-kernels) run here too and agree with the JIT.
TEST_F(BundleTest, OlderCpusGiveTheSameResults) {
  if (!have("cc")) GTEST_SKIP() << "no C compiler";
  for (const char* cpu : {"x86-64", "x86-64-v3"}) {
    SCOPED_TRACE(cpu);
    kiln::Model::FreezeOptions o;
    o.cpu = cpu;
    o.batch_sizes = {1, 4};
    EXPECT_EQ(freeze(o).cpu, cpu);
    const fs::path program = link("cc", (dir_ / "digits.o").string());
    const auto pixels = images(7, 3);
    expect_close(run_example(program, pixels, 7), jit(pixels, 7), "probabilities");
  }
  kiln::Model::FreezeOptions bad;
  bad.cpu = "no-such-cpu";
  EXPECT_THROW(freeze(bad), kiln::Error);
}

TEST_F(BundleTest, LinkedProgramNeedsOnlyTheCLibrary) {
  if (!have("cc") || !have("ldd")) GTEST_SKIP() << "no C compiler or ldd";
  freeze({});
  const fs::path program = link("cc", (dir_ / "digits.o").string());
  const Output o = sh("ldd " + program.string());
  ASSERT_EQ(o.code, 0) << o.text;
  std::istringstream lines(o.text);
  for (std::string line; std::getline(lines, line);) {
    const bool allowed = line.find("linux-vdso") != std::string::npos || line.find("libc.so") != std::string::npos ||
                         line.find("libm.so") != std::string::npos || line.find("ld-linux") != std::string::npos;
    EXPECT_TRUE(allowed) << "unexpected dependency: " << line;
  }
  const Output nm = sh("nm -u " + (dir_ / "digits.o").string());
  for (const char* forbidden : {"dnnl", "tbb", "_Z", "kiln_pk_", "kiln_bundle_"})
    EXPECT_EQ(nm.text.find(forbidden), std::string::npos) << "digits.o needs " << forbidden << ":\n" << nm.text;
}

TEST_F(BundleTest, BrokenWeightsAreClearErrors) {
  if (!have("cc")) GTEST_SKIP() << "no C compiler";
  freeze({});
  const fs::path program = link("cc", (dir_ / "digits.o").string());
  const auto pixels = images(1, 1);
  const std::string good = read_file(dir_ / "digits.weights.bin");
  struct Case {
    std::string name, bytes, message;
  };
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x10;
  // The header's ABI version (a little-endian uint32 after the 8-byte magic)
  // one below and one above the bundle's: a bundle reads its own format only.
  ASSERT_EQ(uint8_t(good[8]), KILN_BUNDLE_ABI_VERSION);
  std::string older = good, newer = good;
  older[8] = char(KILN_BUNDLE_ABI_VERSION - 1);
  newer[8] = char(KILN_BUNDLE_ABI_VERSION + 1);
  const std::vector<Case> cases = {
      {"flipped byte", flipped, "checksum"},
      {"an older format", older, "written for an older bundle format"},
      {"a newer format", newer, "written for a newer bundle format"},
      {"truncated", good.substr(0, good.size() - 100), "truncated"},
      {"a byte more", good + std::string(1, '\0'), "extra bytes after the weights"},
      {"not weights", "hello, this is not a weights file at all, not even close to one....", "bad magic"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    write_file(dir_ / "digits.weights.bin", c.bytes);
    Output o;
    write_file(dir_ / "images.f32", std::string(reinterpret_cast<const char*>(pixels.data()), pixels.size() * sizeof(float)));
    o = sh(program.string() + " " + (dir_ / "digits.weights.bin").string() + " " + (dir_ / "images.f32").string() + " 1");
    EXPECT_EQ(o.code, 1) << o.text;
    EXPECT_NE(o.text.find("cannot create the model"), std::string::npos) << o.text;
    EXPECT_NE(o.text.find(c.message), std::string::npos) << o.text;
  }
  fs::remove(dir_ / "digits.weights.bin");
  const Output o =
      sh(program.string() + " " + (dir_ / "digits.weights.bin").string() + " " + (dir_ / "images.f32").string() + " 1");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("cannot open the weights file"), std::string::npos) << o.text;
}

// Only a regular file of the size its header and the bundle give is read: a
// directory, a FIFO (opening it would wait for a writer) and a file longer
// than that (3 GB, sparse, under a 1 GB address-space limit) are refused
// before anything is allocated.
TEST_F(BundleTest, WeightsPathIsCheckedBeforeItIsRead) {
  if (!have("cc") || !have("mkfifo") || !have("timeout") || !have("truncate"))
    GTEST_SKIP() << "no cc, mkfifo, timeout or truncate";
  freeze({});
  const fs::path program = link("cc", (dir_ / "digits.o").string());
  const auto pixels = images(1, 1);
  write_file(dir_ / "images.f32", std::string(reinterpret_cast<const char*>(pixels.data()), pixels.size() * sizeof(float)));
  fs::create_directory(dir_ / "a-directory");
  ASSERT_EQ(sh("mkfifo " + (dir_ / "a-fifo").string()).code, 0);
  fs::copy_file(dir_ / "digits.weights.bin", dir_ / "huge.bin");
  ASSERT_EQ(sh("truncate -s 3G " + (dir_ / "huge.bin").string()).code, 0);
  for (const auto& [file, message] : {std::pair{"a-directory", "is a directory"},
                                      {"a-fifo", "not a regular file"},
                                      {"huge.bin", "extra bytes after the weights"}}) {
    SCOPED_TRACE(file);
    const Output o = sh("timeout 20 sh -c 'ulimit -v 1000000; " + program.string() + " " + (dir_ / file).string() + " " +
                        (dir_ / "images.f32").string() + " 1'");
    EXPECT_EQ(o.code, 1) << o.text;  // 124: timed out
    EXPECT_NE(o.text.find("cannot create the model"), std::string::npos) << o.text;
    EXPECT_NE(o.text.find(message), std::string::npos) << o.text;
  }
}

// What a call the API refuses says is about that call; the weights in memory
// are held to the same exact size as on disk.
TEST_F(BundleTest, MisusedCallsSayWhatIsWrong) {
  if (!have("cc")) GTEST_SKIP() << "no C compiler";
  freeze({});
  const Output o = sh(link_misuse().string() + " " + (dir_ / "digits.weights.bin").string());
  ASSERT_EQ(o.code, 0) << o.text;
  auto line = [&](const std::string& what) {
    const size_t at = o.text.find("\n" + what + ": ");
    return at == std::string::npos ? "(no line '" + what + "')" : o.text.substr(at + 1, o.text.find('\n', at + 1) - at - 1);
  };
  EXPECT_EQ(o.text.rfind("create: 0 ", 0), 0u) << o.text;
  EXPECT_NE(line("bad rule").find("1 a batch rule names a batch size this bundle was not compiled for"), std::string::npos);
  const std::string null_rule = line("null rule");
  EXPECT_EQ(null_rule.rfind("null rule: 1 ", 0), 0u) << null_rule;
  EXPECT_NE(null_rule.find("NULL"), std::string::npos) << null_rule;
  EXPECT_EQ(null_rule.find("not compiled for"), std::string::npos) << "the last call's message: " << null_rule;
  EXPECT_EQ(line("check_weights"), "check_weights: 0");
  EXPECT_EQ(line("check_weights with a byte more"), "check_weights with a byte more: 2");
  EXPECT_EQ(
      line("create_from_memory with a byte more"),
      "create_from_memory with a byte more: 2 weights in memory: longer than its header says (extra bytes after the weights)");
  EXPECT_EQ(line("static run"), "static run: 0");
}

TEST_F(BundleTest, EmbeddedWeightsInAStaticLibrary) {
  if (!have("cc")) GTEST_SKIP() << "no C compiler";
  kiln::Model::FreezeOptions o;
  o.embed_weights = true;
  o.format = "static";
  o.batch_sizes = {2};
  freeze(o);
  EXPECT_TRUE(fs::exists(dir_ / "libdigits.a"));
  EXPECT_FALSE(fs::exists(dir_ / "digits.weights.bin"));
  const fs::path program = link("cc", "-L" + dir_.string() + " -ldigits");
  const auto pixels = images(5, 5);
  expect_close(run_example(program, pixels, 5), jit(pixels, 5), "probabilities");
}

TEST_F(BundleTest, BadRequestsAreErrors) {
  kiln::Model::FreezeOptions o;
  o.name = "not a name";
  o.output_dir = dir_.string();
  EXPECT_THROW(model_->freeze(o), kiln::Error);
  o.name = "ok";
  o.target = "no-such-target";
  EXPECT_THROW(model_->freeze(o), kiln::Error);
  o.target = "";
  o.shapes = {{"nope", {1, 2}}};
  EXPECT_THROW(model_->freeze(o), kiln::Error);
  o.shapes = {};
  o.kernels = "oneDNN";
  EXPECT_THROW(model_->freeze(o), kiln::Error);
  // Native bundles hold the layouts oneDNN chose on this machine.
  o.kernels = "native";
  o.target = "aarch64-linux-gnu";
  try {
    model_->freeze(o);
    ADD_FAILURE() << "a native bundle for another target froze";
  } catch (const kiln::Error& e) {
    EXPECT_EQ(e.code(), kiln::ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("this machine"), std::string::npos) << e.what();
  }
  // --cpu lists: no empty or repeated names, no list for native kernels,
  // "host" only for this machine's triple.
  const std::vector<std::tuple<std::string, std::string, std::string, std::string>> cpus = {
      {"portable", "", "x86-64,,x86-64-v2", "empty name"},
      {"portable", "", "x86-64-v2,", "empty name"},
      {"portable", "", "x86-64-v2,x86-64-v2", "names 'x86-64-v2' twice"},
      {"native", "", "host,x86-64", "give one --cpu, not a list"},
      {"portable", "aarch64-linux-gnu", "host", "--cpu host is this machine's CPU"},
  };
  for (const auto& [kernels, target, cpu, message] : cpus) {
    SCOPED_TRACE(cpu);
    o.kernels = kernels;
    o.target = target;
    o.cpu = cpu;
    try {
      model_->freeze(o);
      ADD_FAILURE() << "froze";
    } catch (const kiln::Error& e) {
      EXPECT_EQ(e.code(), kiln::ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

// A second freeze of the same request takes the object from the cache; a
// damaged entry is compiled again with a warning; a cache that cannot be
// written still gives the bundle.
TEST_F(BundleTest, FreezeReusesTheCache) {
  std::vector<std::string> warnings;
  kiln::RuntimeOptions ro;
  ro.cache_dir = (dir_ / "cache").string();
  ro.logger = [&](kiln::LogLevel level, const std::string& m) {
    if (level == kiln::LogLevel::Warning) warnings.push_back(m);
  };
  kiln::Runtime runtime(ro);
  const kiln::Model model = kiln::Model::load(runtime, kModel);
  auto freeze_into = [&](const std::string& sub, std::vector<int64_t> batches, const std::string& kernels = "portable") {
    kiln::Model::FreezeOptions o;
    o.output_dir = (dir_ / sub).string();
    o.name = "digits";
    o.batch_sizes = std::move(batches);
    o.kernels = kernels;
    return model.freeze(o);
  };
  const auto first = freeze_into("a", {1, 2});
  EXPECT_EQ(first.cache, kiln::CacheOutcome::Miss) << first.cache_note;
  const auto second = freeze_into("b", {1, 2});
  EXPECT_EQ(second.cache, kiln::CacheOutcome::Hit) << second.cache_note;
  EXPECT_EQ(second.cache_key, first.cache_key);
  for (const char* f : {"digits.o", "digits.h", "digits.weights.bin"})
    EXPECT_EQ(read_file(dir_ / "a" / f), read_file(dir_ / "b" / f)) << f;
  EXPECT_EQ(freeze_into("c", {1, 3}).cache, kiln::CacheOutcome::Miss);  // other batch sizes: another entry
  // Native kernels: another entry, reused in turn, with the same weights data.
  EXPECT_EQ(freeze_into("native1", {1, 2}, "native").cache, kiln::CacheOutcome::Miss);
  EXPECT_EQ(freeze_into("native2", {1, 2}, "native").cache, kiln::CacheOutcome::Hit);
  for (const char* f : {"digits.o", "digits.weights.bin"})
    EXPECT_EQ(read_file(dir_ / "native1" / f), read_file(dir_ / "native2" / f)) << f;

  const fs::path object = dir_ / "cache" / "entries" / first.cache_key / "object.o";
  std::string bytes = read_file(object);
  ASSERT_FALSE(bytes.empty());
  bytes[bytes.size() / 2] ^= 0x40;
  write_file(object, bytes);
  EXPECT_TRUE(warnings.empty());
  const auto rebuilt = freeze_into("d", {1, 2});
  EXPECT_EQ(rebuilt.cache, kiln::CacheOutcome::Rebuild);
  EXPECT_NE(rebuilt.cache_note.find("digest"), std::string::npos) << rebuilt.cache_note;
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(read_file(dir_ / "d" / "digits.o"), read_file(dir_ / "a" / "digits.o"));
  EXPECT_EQ(freeze_into("e", {1, 2}).cache, kiln::CacheOutcome::Hit);

  // A cache directory under a regular file cannot be created.
  write_file(dir_ / "plain-file", "x");
  ro.cache_dir = (dir_ / "plain-file" / "cache").string();
  warnings.clear();
  kiln::Runtime unwritable(ro);
  kiln::Model::FreezeOptions o;
  o.output_dir = (dir_ / "f").string();
  o.name = "digits";
  const auto r = kiln::Model::load(unwritable, kModel).freeze(o);
  EXPECT_EQ(r.cache, kiln::CacheOutcome::Off);
  EXPECT_FALSE(r.cache_note.empty());
  EXPECT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(fs::exists(dir_ / "f" / "digits.o"));
}

// examples/bundle-rust: the same classifier through Rust's FFI, built by cargo with no crates.
TEST_F(BundleTest, RustProgramMatchesTheJit) {
  if (!have("cargo")) GTEST_SKIP() << "no cargo";
  kiln::Model::FreezeOptions o;
  o.batch_sizes = {1, 4};
  freeze(o);
  // A copy, so that cargo writes its lock file and target directory outside the source tree.
  const fs::path crate = dir_ / "bundle-rust";
  fs::copy(kSource + "/examples/bundle-rust", crate, fs::copy_options::recursive);
  const Output build = sh("cd " + crate.string() + " && KILN_BUNDLE_DIR=" + dir_.string() +
                          " CARGO_TARGET_DIR=" + (dir_ / "target").string() + " cargo build --release --offline --quiet");
  ASSERT_EQ(build.code, 0) << build.text;
  const fs::path program = dir_ / "target" / "release" / "classify-digits";
  for (int64_t n : {1, 3, 8, 13}) {
    SCOPED_TRACE("batch " + std::to_string(n));
    const auto pixels = images(n, unsigned(20 + n));
    expect_close(run_example(program, pixels, n), jit(pixels, n), "probabilities");
  }
}

// A small convolutional network: convolution, pooling, depthwise with a
// residual Add, Clip, global pooling, Gemm, Softmax; batch axis "batch".
// A float initializer of normally distributed values.
onnx::TensorProto random_weights(std::mt19937& rng, float sd, const std::string& name, std::vector<int64_t> dims) {
  std::normal_distribution<float> normal(0, sd);
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return kiln::test::ModelBuilder::float_tensor(name, std::move(dims), v);
}

std::string conv_net() {
  using kiln::test::ModelBuilder;
  std::mt19937 rng(7);
  auto weights = [&](const std::string& name, std::vector<int64_t> dims) {
    return random_weights(rng, 0.3f, name, std::move(dims));
  };
  ModelBuilder b;
  b.input("x", 1, {"batch", 3, 16, 16}).output("y", 1, {"batch", 10});
  b.initializer(weights("w1", {16, 3, 3, 3})).initializer(weights("b1", {16})).initializer(weights("w4", {16, 16, 3, 3}));
  b.initializer(weights("w2", {16, 1, 3, 3})).initializer(weights("w3", {6, 8, 3, 3})).initializer(weights("b3", {6}));
  b.initializer(weights("wf", {10, 6})).initializer(weights("bf", {10}));
  ModelBuilder::attr_ints(b.node("Conv", {"x", "w1", "b1"}, {"c1"}), "pads", {1, 1, 1, 1});
  b.node("Relu", {"c1"}, {"r1"});
  auto& pool = b.node("MaxPool", {"r1"}, {"p1"});
  ModelBuilder::attr_ints(pool, "kernel_shape", {2, 2});
  ModelBuilder::attr_ints(pool, "strides", {2, 2});
  // Whole 16-channel blocks: oneDNN's Winograd kernels on AVX-512, their weights in its Winograd layouts.
  ModelBuilder::attr_ints(b.node("Conv", {"p1", "w4"}, {"c4"}), "pads", {1, 1, 1, 1});
  b.node("Relu", {"c4"}, {"r4"});
  auto& dw = b.node("Conv", {"r4", "w2"}, {"c2"});
  ModelBuilder::attr_int(dw, "group", 16);
  ModelBuilder::attr_ints(dw, "pads", {1, 1, 1, 1});
  b.node("Add", {"c2", "p1"}, {"s2"});
  // Grouped, not depthwise: oneDNN runs it as im2col + GEMM, with a scratchpad.
  auto& grouped = b.node("Conv", {"s2", "w3", "b3"}, {"c3"});
  ModelBuilder::attr_int(grouped, "group", 2);
  ModelBuilder::attr_ints(grouped, "pads", {1, 1, 1, 1});
  b.initializer(ModelBuilder::float_tensor("lo", {}, {0})).initializer(ModelBuilder::float_tensor("hi", {}, {6}));
  b.node("Clip", {"c3", "lo", "hi"}, {"r3"});
  b.node("GlobalAveragePool", {"r3"}, {"g"});
  b.node("Flatten", {"g"}, {"f"});
  ModelBuilder::attr_int(b.node("Gemm", {"f", "wf", "bf"}, {"logits"}), "transB", 1);
  b.node("Softmax", {"logits"}, {"y"});
  return b.model().SerializeAsString();
}

onnx::TensorProto int_tensor(const std::string& name, std::vector<int64_t> dims, const std::vector<int64_t>& values, int type) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(type);
  for (auto d : dims) t.add_dims(d);
  for (auto v : values) t.add_int32_data(int32_t(v));
  return t;
}

// Random int8 weights within +-60.
onnx::TensorProto int8_weights(std::mt19937& rng, const std::string& name, std::vector<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = int64_t(rng() % 121) - 60;
  return int_tensor(name, std::move(dims), v, onnx::TensorProto::INT8);
}

// A quantized network as static quantizers write it: every activation
// through a QuantizeLinear -> DequantizeLinear pair (uint8), int8 weights
// per channel through a DequantizeLinear; a convolution, max pooling, a
// depthwise convolution with a residual Add, global pooling and a MatMul.
std::string qdq_net() {
  using kiln::test::ModelBuilder;
  std::mt19937 rng(21);
  ModelBuilder b;
  b.input("x", 1, {"batch", 3, 10, 10}).output("y", 1, {"batch", 10});
  auto activation = [&](const std::string& v, const std::string& out, float scale, int64_t zero) {
    b.initializer(ModelBuilder::float_tensor(v + "_s", {}, {scale}));
    b.initializer(int_tensor(v + "_z", {}, {zero}, onnx::TensorProto::UINT8));
    b.node("QuantizeLinear", {v, v + "_s", v + "_z"}, {v + "_q"});
    b.node("DequantizeLinear", {v + "_q", v + "_s", v + "_z"}, {out});
  };
  auto weights = [&](const std::string& w, std::vector<int64_t> dims, int64_t axis) {
    const int64_t channels = dims[size_t(axis)];
    b.initializer(int8_weights(rng, w + "_q", dims));
    std::vector<float> scales;
    for (int64_t c = 0; c < channels; ++c) scales.push_back(0.004f + 0.002f * float(c % 5));
    b.initializer(ModelBuilder::float_tensor(w + "_s", {channels}, scales));
    b.initializer(int_tensor(w + "_z", {channels}, std::vector<int64_t>(size_t(channels), 0), onnx::TensorProto::INT8));
    ModelBuilder::attr_int(b.node("DequantizeLinear", {w + "_q", w + "_s", w + "_z"}, {w}), "axis", axis);
  };
  activation("x", "xd", 1.0f / 32, 128);
  weights("w1", {8, 3, 3, 3}, 0);
  b.initializer(random_weights(rng, 0.1f, "b1", {8}));
  ModelBuilder::attr_ints(b.node("Conv", {"xd", "w1", "b1"}, {"c1"}), "pads", {1, 1, 1, 1});
  b.node("Relu", {"c1"}, {"r1"});
  activation("r1", "r1d", 4.0f / 255, 0);
  auto& pool = b.node("MaxPool", {"r1d"}, {"p1"});
  ModelBuilder::attr_ints(pool, "kernel_shape", {2, 2});
  ModelBuilder::attr_ints(pool, "strides", {2, 2});
  activation("p1", "p1d", 4.0f / 255, 0);
  weights("w2", {8, 1, 3, 3}, 0);
  auto& dw = b.node("Conv", {"p1d", "w2"}, {"c2"});
  ModelBuilder::attr_int(dw, "group", 8);
  ModelBuilder::attr_ints(dw, "pads", {1, 1, 1, 1});
  activation("c2", "c2d", 6.0f / 255, 128);
  b.node("Add", {"c2d", "p1d"}, {"s"});
  b.node("Relu", {"s"}, {"sr"});
  activation("sr", "sd", 6.0f / 255, 0);
  b.node("GlobalAveragePool", {"sd"}, {"g"});
  b.node("Flatten", {"g"}, {"f"});
  activation("f", "fd", 4.0f / 255, 0);
  weights("wf", {8, 10}, 1);
  b.node("MatMul", {"fd", "wf"}, {"m"});
  activation("m", "y", 20.0f / 255, 128);
  return b.model().SerializeAsString();
}

// The QOperator form (QLinearConv, a depthwise one into int8, MaxPool of
// int8 values, QLinearMatMul), ConvInteger, and a product quantized
// dynamically as ONNX Runtime's quantize_dynamic writes it
// (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul), summed.
std::string qoperator_net() {
  using kiln::test::ModelBuilder;
  std::mt19937 rng(22);
  ModelBuilder b(13);
  b.input("x", 1, {"batch", 3, 8, 8}).output("y", 1, {"batch", 10});
  auto scalar = [&](const std::string& name, float v) { b.initializer(ModelBuilder::float_tensor(name, {}, {v})); };
  auto zero = [&](const std::string& name, int64_t v, int type) { b.initializer(int_tensor(name, {}, {v}, type)); };
  scalar("xs", 1.0f / 32);
  zero("xz", 128, onnx::TensorProto::UINT8);
  b.node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
  b.initializer(int8_weights(rng, "w1", {6, 3, 3, 3}));
  b.initializer(ModelBuilder::float_tensor("w1s", {6}, {0.004f, 0.006f, 0.005f, 0.008f, 0.003f, 0.007f}));
  b.initializer(int_tensor("w1z", {6}, {0, 0, 0, 0, 0, 0}, onnx::TensorProto::INT8));
  b.initializer(int_tensor("b1", {6}, {100, -2000, 0, 512, 7, -64}, onnx::TensorProto::INT32));
  scalar("c1s", 4.0f / 255);
  zero("c1z", 100, onnx::TensorProto::UINT8);
  auto& c1 = b.node("QLinearConv", {"xq", "xs", "xz", "w1", "w1s", "w1z", "c1s", "c1z", "b1"}, {"c1"});
  ModelBuilder::attr_ints(c1, "pads", {1, 1, 1, 1});
  ModelBuilder::attr_ints(c1, "strides", {2, 2});
  b.initializer(int8_weights(rng, "w2", {6, 1, 3, 3}));
  scalar("w2s", 0.01f);
  zero("w2z", 0, onnx::TensorProto::INT8);
  scalar("c2s", 4.0f / 255);
  zero("c2z", -5, onnx::TensorProto::INT8);
  auto& c2 = b.node("QLinearConv", {"c1", "c1s", "c1z", "w2", "w2s", "w2z", "c2s", "c2z"}, {"c2"});
  ModelBuilder::attr_int(c2, "group", 6);
  ModelBuilder::attr_ints(c2, "pads", {1, 1, 1, 1});
  auto& pool = b.node("MaxPool", {"c2"}, {"p"});
  ModelBuilder::attr_ints(pool, "kernel_shape", {2, 2});
  ModelBuilder::attr_ints(pool, "strides", {2, 2});
  b.node("Flatten", {"p"}, {"pf"});
  b.initializer(int8_weights(rng, "wm", {24, 10}));
  scalar("wms", 0.01f);
  zero("wmz", 0, onnx::TensorProto::INT8);
  scalar("ms", 16.0f / 255);
  zero("mz", 128, onnx::TensorProto::UINT8);
  b.node("QLinearMatMul", {"pf", "c2s", "c2z", "wm", "wms", "wmz", "ms", "mz"}, {"mq"});
  b.node("DequantizeLinear", {"mq", "ms", "mz"}, {"m1"});
  // ConvInteger's int32 sums, scaled, pooled and projected in float.
  b.initializer(int8_weights(rng, "w3", {4, 3, 3, 3}));
  b.node("ConvInteger", {"xq", "w3", "xz"}, {"ci"});
  ModelBuilder::attr_int(b.node("Cast", {"ci"}, {"cf"}), "to", 1);
  scalar("cs", 0.0005f);
  b.node("Mul", {"cf", "cs"}, {"cm"});
  b.node("GlobalAveragePool", {"cm"}, {"cg"});
  b.node("Flatten", {"cg"}, {"cgf"});
  b.initializer(random_weights(rng, 0.3f, "wc", {4, 10}));
  b.node("MatMul", {"cgf", "wc"}, {"m3"});
  // Dynamic quantization of the flattened input.
  b.node("Flatten", {"x"}, {"xf"});
  b.node("DynamicQuantizeLinear", {"xf"}, {"dq", "ds", "dz"});
  b.initializer(int8_weights(rng, "wd", {192, 10}));
  b.node("MatMulInteger", {"dq", "wd", "dz"}, {"acc"});
  ModelBuilder::attr_int(b.node("Cast", {"acc"}, {"accf"}), "to", 1);
  scalar("wds", 0.002f);
  b.node("Mul", {"ds", "wds"}, {"dscale"});
  b.node("Mul", {"accf", "dscale"}, {"m2"});
  b.node("Add", {"m1", "m2"}, {"m12"});
  b.node("Add", {"m12", "m3"}, {"y"});
  return b.model().SerializeAsString();
}

// Freezes conv_net() with `kernels`, links tests/integration/bundle_driver.c
// with `libs`, and compares its outputs with the JIT's (in `runtime`) for
// batch sizes 1, 3, 8 and 13 from compiled sizes 1 and 8, on 1 and 3 host threads.
void BundleTest::conv_net_matches_the_jit(kiln::Runtime& runtime, const std::string& kernels, const std::string& libs) {
  net_matches_the_jit(runtime, kernels, libs, conv_net(), {3, 16, 16});
}

void BundleTest::net_matches_the_jit(kiln::Runtime& runtime, const std::string& kernels, const std::string& libs,
                                     const std::string& model, const std::vector<int64_t>& item) {
  NetRun how;
  how.kernels = kernels;
  how.libs = libs;
  net_matches(runtime, model, item, how);
}

void BundleTest::net_matches(kiln::Runtime& runtime, const std::string& model, const std::vector<int64_t>& item,
                             const NetRun& how) {
  write_file(dir_ / "net.onnx", model);
  kiln::Model net = kiln::Model::load(runtime, (dir_ / "net.onnx").string());
  kiln::Model::FreezeOptions o;
  o.output_dir = dir_.string();
  o.name = "net";
  o.batch_sizes = how.frozen;
  o.kernels = how.kernels;
  o.target = how.target;
  net.freeze(o);
  const fs::path driver = dir_ / "driver";
  const Output built =
      sh(how.cc + " -O2 -DPREFIX=net -DUPREFIX=NET -include " + (dir_ / "net.h").string() + " " + kSource +
         "/tests/integration/bundle_driver.c " + (dir_ / "net.o").string() + " " + how.libs + " -o " + driver.string());
  ASSERT_EQ(built.code, 0) << built.text;
  std::mt19937 rng(8);
  std::normal_distribution<float> pixel(0, 1);
  for (int64_t n : how.batches)
    for (int threads : {1, 3}) {
      SCOPED_TRACE("batch " + std::to_string(n) + ", threads " + std::to_string(threads));
      std::vector<int64_t> shape{n};
      shape.insert(shape.end(), item.begin(), item.end());
      int64_t values = 1;
      for (int64_t d : shape) values *= d;
      std::vector<float> x(static_cast<size_t>(values));
      for (float& v : x) v = pixel(rng);
      write_file(dir_ / "x.f32", std::string(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float)));
      const Output r =
          sh(how.runner + " " + driver.string() + " " + (dir_ / "net.weights.bin").string() + " " + std::to_string(n) + " " +
             (dir_ / "x.f32").string() + " " + (dir_ / "y.f32").string() + " " + std::to_string(threads));
      ASSERT_EQ(r.code, 0) << r.text;
      const std::string y = read_file(dir_ / "y.f32");
      std::vector<float> got(y.size() / sizeof(float));
      std::memcpy(got.data(), y.data(), y.size());
      const kiln::Tensor want = net.run({{"x", kiln::Tensor::from_vector(kiln::DType::Float32, shape, x)}})[0];
      expect_close(got, std::vector<float>(want.data_as<float>(), want.data_as<float>() + want.numel()), "y", how.step);
    }
}

TEST_F(BundleTest, ConvolutionalNetworkMatchesTheJit) {
  if (!have("cc")) GTEST_SKIP() << "no C compiler";
  conv_net_matches_the_jit(*runtime_, "portable", "-lm");
}

// A bidirectional GRU over batch-major input (ONNX's layout 1, so that the
// batch is the first axis, as a bundle's inputs have it), then an LSTM over
// its output: kiln_pk_recurrent in a bundle.
TEST_F(BundleTest, RecurrentNetworkMatchesTheJit) {
  if (!have("cc")) GTEST_SKIP() << "no C compiler";
  using kiln::test::ModelBuilder;
  std::mt19937 rng(11);
  auto weights = [&](const std::string& name, std::vector<int64_t> dims) {
    return random_weights(rng, 0.4f, name, std::move(dims));
  };
  ModelBuilder b(14);
  b.input("x", 1, {"batch", 7, 5}).output("y", 1, {"batch", 7, 1, 4});
  b.initializer(weights("gw", {2, 18, 5})).initializer(weights("gr", {2, 18, 6})).initializer(weights("gb", {2, 36}));
  b.initializer(weights("lw", {1, 16, 12})).initializer(weights("lr", {1, 16, 4})).initializer(weights("lb", {1, 32}));
  b.initializer(ModelBuilder::int64_tensor("flat", {3}, {0, 7, 12}));
  auto& gru = b.node("GRU", {"x", "gw", "gr", "gb"}, {"g"});
  ModelBuilder::attr_int(gru, "hidden_size", 6);
  ModelBuilder::attr_int(gru, "layout", 1);
  ModelBuilder::attr_string(gru, "direction", "bidirectional");
  b.node("Reshape", {"g", "flat"}, {"gf"});
  auto& lstm = b.node("LSTM", {"gf", "lw", "lr", "lb"}, {"y"});
  ModelBuilder::attr_int(lstm, "hidden_size", 4);
  ModelBuilder::attr_int(lstm, "layout", 1);
  net_matches_the_jit(*runtime_, "portable", "-lm", b.model().SerializeAsString(), {7, 5});
}

// A GRU as exported without layout 1: the sequence-major input x and
// output y carry the batch on axes 1 and 2, the recurrent state h0/yh
// ([directions, batch, hidden]) on axis 1. With --batch-axis for each, the
// bundle splits and pads them along those axes; without, or with an axis
// that is not the batch, freezing says what to give.
TEST_F(BundleTest, BatchOnAnotherAxis) {
  if (!have("cc")) GTEST_SKIP() << "no C compiler";
  using kiln::test::ModelBuilder;
  std::mt19937 rng(5);
  ModelBuilder b(14);
  b.input("x", 1, {5, "batch", 4}).input("h0", 1, {1, "batch", 6});
  b.output("y", 1, {5, 1, "batch", 6}).output("yh", 1, {1, "batch", 6});
  b.initializer(random_weights(rng, 0.4f, "w", {1, 18, 4})).initializer(random_weights(rng, 0.4f, "r", {1, 18, 6}));
  b.initializer(random_weights(rng, 0.4f, "b", {1, 36}));
  ModelBuilder::attr_int(b.node("GRU", {"x", "w", "r", "b", "", "h0"}, {"y", "yh"}), "hidden_size", 6);
  write_file(dir_ / "gru.onnx", b.model().SerializeAsString());
  kiln::Model gru = kiln::Model::load(*runtime_, (dir_ / "gru.onnx").string());
  kiln::Model::FreezeOptions o;
  o.output_dir = dir_.string();
  o.name = "gru";
  o.batch_sizes = {1, 4};
  const std::vector<std::pair<std::map<std::string, int64_t>, std::string>> refused = {
      {{{"x", 1}}, "give --batch-axis h0=1 (it is the batch)"},
      {{{"x", 1}, {"h0", 1}, {"y", 2}},
       "output 'yh' is [1, 1, 6] at batch 1: its axis 1 follows the batch size: give --batch-axis yh=1"},
      {{{"x", 1}, {"h0", 1}, {"y", 2}, {"yh", 0}},
       "--batch-axis yh=0: output 'yh' is [1, 1, 6] at batch 1, its axis 0 does not follow"},
      {{{"x", 1}, {"h0", 3}}, "--batch-axis h0=3: the input has 3 axes"},
      {{{"x", 0}}, "the input's axis 0 is declared 5"},
      {{{"x", 1}, {"state", 1}}, "--batch-axis names 'state', which is neither an input nor an output"},
  };
  for (const auto& [axes, message] : refused) {
    o.batch_axes = axes;
    try {
      gru.freeze(o);
      ADD_FAILURE() << "froze, expected: " << message;
    } catch (const kiln::Error& e) {
      EXPECT_EQ(e.code(), kiln::ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
  o.batch_axes = {{"x", 1}, {"h0", 1}, {"y", 2}, {"yh", 1}};
  gru.freeze(o);
  const std::string header = read_file(dir_ / "gru.h");
  for (const char* text : {"input  1 \"h0\" float32 [1, B, 6]", "output 0 \"y\" float32 [5, 1, B, 6]",
                           "\"y\", per batch item (batch on axis 2)", "run() splits it along that axis"})
    EXPECT_NE(header.find(text), std::string::npos) << "header lacks: " << text << "\n" << header;

  write_file(dir_ / "main.c", R"(#include <stdio.h>
#include <stdlib.h>
#include "gru.h"
/* WEIGHTS BATCH DIR [RULE]: DIR/x.f32 and DIR/h0.f32 in, DIR/y.f32 and DIR/yh.f32 out. */
static int file(const char* dir, const char* name, void* data, size_t bytes, int write) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE* f = fopen(path, write ? "wb" : "rb");
  const size_t done = f ? (write ? fwrite(data, 1, bytes, f) : fread(data, 1, bytes, f)) : 0;
  if (f) fclose(f);
  return done == bytes;
}
int main(int argc, char** argv) {
  const long n = strtol(argv[2], NULL, 10);
  gru* model = NULL;
  if (gru_create(argv[1], &model) != GRU_OK || (argc > 4 && gru_set_batch_rule(model, argv[4]) != GRU_OK)) {
    fprintf(stderr, "error: %s\n", gru_last_error(model));
    return 1;
  }
  void* x = malloc(n * GRU_INPUT_0_ITEM_BYTES);
  void* h0 = malloc(n * GRU_INPUT_1_ITEM_BYTES);
  void* y = malloc(n * GRU_OUTPUT_0_ITEM_BYTES);
  void* yh = malloc(n * GRU_OUTPUT_1_ITEM_BYTES);
  if (!file(argv[3], "x.f32", x, n * GRU_INPUT_0_ITEM_BYTES, 0) || !file(argv[3], "h0.f32", h0, n * GRU_INPUT_1_ITEM_BYTES, 0))
    return 3;
  const void* inputs[] = {x, h0};
  void* outputs[] = {y, yh};
  if (gru_run(model, n, inputs, outputs) != GRU_OK) {
    fprintf(stderr, "run: %s\n", gru_last_error(model));
    return 1;
  }
  if (!file(argv[3], "y.f32", y, n * GRU_OUTPUT_0_ITEM_BYTES, 1) || !file(argv[3], "yh.f32", yh, n * GRU_OUTPUT_1_ITEM_BYTES, 1))
    return 4;
  gru_destroy(model);
  return 0;
}
)");
  const fs::path program = dir_ / "run_gru";
  const Output built = sh("cc -O2 -I" + dir_.string() + " " + (dir_ / "main.c").string() + " " + (dir_ / "gru.o").string() +
                          " -lm -o " + program.string());
  ASSERT_EQ(built.code, 0) << built.text;
  std::normal_distribution<float> value(0, 1);
  auto floats = [](const std::string& bytes) {
    std::vector<float> v(bytes.size() / sizeof(float));
    std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
    return v;
  };
  // Batch 3 runs as 1+1+1, 6 as 4+1+1, 2 with the rule "2:4" as a padded 4.
  for (const auto& [n, rule] : std::vector<std::pair<int64_t, std::string>>{{3, ""}, {6, ""}, {4, ""}, {2, "2:4"}}) {
    SCOPED_TRACE("batch " + std::to_string(n) + " " + rule);
    std::vector<float> x(size_t(5 * n * 4)), h0(size_t(n * 6));
    for (float& v : x) v = value(rng);
    for (float& v : h0) v = value(rng);
    write_file(dir_ / "x.f32", std::string(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float)));
    write_file(dir_ / "h0.f32", std::string(reinterpret_cast<const char*>(h0.data()), h0.size() * sizeof(float)));
    const Output r = sh(program.string() + " " + (dir_ / "gru.weights.bin").string() + " " + std::to_string(n) + " " +
                        dir_.string() + " " + rule);
    ASSERT_EQ(r.code, 0) << r.text;
    const auto want = gru.run({{"x", kiln::Tensor::from_vector(kiln::DType::Float32, {5, n, 4}, x)},
                               {"h0", kiln::Tensor::from_vector(kiln::DType::Float32, {1, n, 6}, h0)}});
    expect_close(floats(read_file(dir_ / "y.f32")),
                 std::vector<float>(want[0].data_as<float>(), want[0].data_as<float>() + want[0].numel()), "y");
    expect_close(floats(read_file(dir_ / "yh.f32")),
                 std::vector<float>(want[1].data_as<float>(), want[1].data_as<float>() + want[1].numel()), "yh");
  }
}

// --kernels native: oneDNN's primitives, made again from the bundle's tables
// when it is created, against the JIT with the same kernels. The program
// links libdnnl and nothing of Kiln's; the header says so and has no static API.
TEST_F(BundleTest, NativeKernelsMatchTheJit) {
  if (!have("cc")) GTEST_SKIP() << "no C compiler";
  kiln::RuntimeOptions ro;
  ro.cache = false;
  ro.threads = 1;
  ro.kernels = "native";
  kiln::Runtime runtime(ro);
  conv_net_matches_the_jit(runtime, "native", "-ldnnl -lm");
  const std::string header = read_file(dir_ / "net.h");
  for (const char* text : {"cc main.c net.o -ldnnl -lm", "native kernels (oneDNN", "NET_ERROR_NATIVE = 5", "No static API"})
    EXPECT_NE(header.find(text), std::string::npos) << "header lacks: " << text << "\n" << header;
  EXPECT_EQ(header.find("net_run_b1("), std::string::npos) << header;
  const Output nm = sh("nm -u " + (dir_ / "net.o").string());
  EXPECT_NE(nm.text.find("dnnl_primitive_execute"), std::string::npos) << nm.text;
  for (const char* forbidden : {"tbb", "_Z", "kiln_pk_", "kiln_bundle_"})
    EXPECT_EQ(nm.text.find(forbidden), std::string::npos) << "net.o needs " << forbidden << ":\n" << nm.text;
  if (have("ldd")) EXPECT_NE(sh("ldd " + (dir_ / "driver").string()).text.find("libdnnl"), std::string::npos);

  // oneDNN held to an older ISA than the bundle was frozen for picks other
  // weight layouts: create says so, and nothing runs.
  if (read_file("/proc/cpuinfo").find(" avx512f") != std::string::npos) {
    const Output older = sh("DNNL_MAX_CPU_ISA=AVX2 " + (dir_ / "driver").string() + " " + (dir_ / "net.weights.bin").string() +
                            " 1 " + (dir_ / "x.f32").string() + " " + (dir_ / "y.f32").string() + " 1");
    EXPECT_EQ(older.code, 1) << older.text;
    EXPECT_NE(older.text.find("wants the weights in another layout"), std::string::npos) << older.text;
  }

  // The weights are checked before any primitive is made from them.
  std::string weights = read_file(dir_ / "net.weights.bin");
  weights[weights.size() - 3] ^= 0x40;
  write_file(dir_ / "net.weights.bin", weights);
  const Output o = sh((dir_ / "driver").string() + " " + (dir_ / "net.weights.bin").string() + " 1 " + (dir_ / "x.f32").string() +
                      " " + (dir_ / "y.f32").string() + " 1");
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.text.find("checksum"), std::string::npos) << o.text;
}

// Freezing `model` (written as NAME.onnx) is refused for these kernel
// families, the error naming `node`, and leaves no object behind.
void BundleTest::expect_refused(const std::string& model, const std::string& name, const std::string& node,
                                std::vector<std::string> kernels_list) {
  write_file(dir_ / (name + ".onnx"), model);
  kiln::Model m = kiln::Model::load(*runtime_, (dir_ / (name + ".onnx")).string());
  for (const std::string& kernels : kernels_list) {
    SCOPED_TRACE(kernels);
    kiln::Model::FreezeOptions o;
    o.output_dir = dir_.string();
    o.kernels = kernels;
    try {
      m.freeze(o);
      ADD_FAILURE() << name << " froze";
    } catch (const kiln::Error& e) {
      EXPECT_EQ(e.code(), kiln::ErrorCode::Unsupported);
      EXPECT_NE(std::string(e.what()).find(node), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(dir_ / (name + ".o")));
  }
}

// A node only the reference kernels run cannot go into a bundle: the error
// names it.
TEST_F(BundleTest, UnsupportedNodeIsNamed) {
  using kiln::test::ModelBuilder;
  ModelBuilder b(18);  // Mish
  b.input("x", 1, {"batch", 4}).output("y", 1, {"batch", 4});
  b.node("Mish", {"x"}, {"y"}, "mish_it");
  expect_refused(b.model().SerializeAsString(), "mish", "mish_it");
}

// Every node that stops a freeze is listed with why, one a line, the first
// 20 of them and how many more: 25 the kernels cannot run; then two whose
// output's shape depends on the data (and not the values after them).
TEST_F(BundleTest, EveryNodeThatStopsAFreezeIsListed) {
  using kiln::test::ModelBuilder;
  ModelBuilder b(18);  // Mish
  b.input("x", 1, {"batch", 4});
  for (int i = 0; i < 25; ++i) {
    const std::string n = std::to_string(i);
    b.output("y" + n, 1, {"batch", 4});
    b.node("Mish", {"x"}, {"y" + n}, "mish" + n);
  }
  write_file(dir_ / "mishes.onnx", b.model().SerializeAsString());
  kiln::Model mishes = kiln::Model::load(*runtime_, (dir_ / "mishes.onnx").string());
  kiln::Model::FreezeOptions o;
  o.output_dir = dir_.string();
  try {
    mishes.freeze(o);
    ADD_FAILURE() << "froze";
  } catch (const kiln::Error& e) {
    const std::string what = e.what();
    for (const char* text :
         {"the portable kernels cannot run 25 node(s) of batch 1:\n  node 'mish0' (Mish): no compiled kernel runs Mish",
          "\n  node 'mish19' (Mish): ", "\n  ... and 5 more"})
      EXPECT_NE(what.find(text), std::string::npos) << text << " in: " << what;
    EXPECT_EQ(what.find("'mish20'"), std::string::npos) << what;
  }

  ModelBuilder d;
  d.input("x", 1, {"batch", 4}).output("a", 7, {}).output("b", 7, {});
  d.node("NonZero", {"x"}, {"nz"}, "first");
  d.node("NonZero", {"x"}, {"nz2"}, "second");
  d.node("Size", {"nz"}, {"a"});
  d.node("Size", {"nz2"}, {"b"});
  write_file(dir_ / "nonzero.onnx", d.model().SerializeAsString());
  kiln::Model nonzero = kiln::Model::load(*runtime_, (dir_ / "nonzero.onnx").string());
  try {
    nonzero.freeze(o);
    ADD_FAILURE() << "froze";
  } catch (const kiln::Error& e) {
    const std::string what = e.what();
    for (const char* text : {"cannot freeze: 2 node(s) make values whose shape depends on the data",
                             "\n  node 'first' (NonZero): the shape of 'nz' depends on the data",
                             "\n  node 'second' (NonZero): the shape of 'nz2' depends on the data"})
      EXPECT_NE(what.find(text), std::string::npos) << text << " in: " << what;
    EXPECT_EQ(what.find("(Size)"), std::string::npos) << what;
  }
}

// ---- native bundles of quantized models -------------------------------------
// Their oneDNN primitives carry output scales, source scales and zero points
// (bundle ABI version 4); the bundle's outputs are the reference backend's,
// within a quantization step (`kStep`: the output's scale).

// `x` quantized to uint8 and dequantized again into `out`, as quantizers
// write activations.
void quantize_dequantize(kiln::test::ModelBuilder& b, const std::string& x, const std::string& out, float scale,
                         int64_t zero_point) {
  b.initializer(kiln::test::ModelBuilder::float_tensor(x + "_scale", {}, {scale}));
  b.initializer(int_tensor(x + "_zp", {}, {zero_point}, onnx::TensorProto::UINT8));
  b.node("QuantizeLinear", {x, x + "_scale", x + "_zp"}, {x + "_q"});
  b.node("DequantizeLinear", {x + "_q", x + "_scale", x + "_zp"}, {out});
}

// Random int8 weights within +-`limit`, per-channel scales along `axis`,
// dequantized into `name`. Within +-64 every CPU's int8 kernels take them;
// beyond, CPUs without VNNI compute in float (passes::int8_products_exact).
void dequantized_weights(kiln::test::ModelBuilder& b, std::mt19937& rng, const std::string& name,
                         const std::vector<int64_t>& dims, int64_t axis, int limit = 64) {
  std::uniform_int_distribution<int64_t> value(-limit, limit);
  std::uniform_real_distribution<float> scale(0.002f, 0.01f);
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<int64_t> q(static_cast<size_t>(n));
  for (int64_t& v : q) v = value(rng);
  const int64_t channels = dims[size_t(axis)];
  std::vector<float> scales(static_cast<size_t>(channels));
  for (float& s : scales) s = scale(rng);
  b.initializer(int_tensor(name + "_q", dims, q, onnx::TensorProto::INT8));
  b.initializer(kiln::test::ModelBuilder::float_tensor(name + "_scale", {channels}, scales));
  b.initializer(int_tensor(name + "_zp", {channels}, std::vector<int64_t>(size_t(channels), 0), onnx::TensorProto::INT8));
  kiln::test::ModelBuilder::attr_int(b.node("DequantizeLinear", {name + "_q", name + "_scale", name + "_zp"}, {name}), "axis",
                                     axis);
}

constexpr float kStep = 1.0f / 32;

// A small QDQ network as ONNX Runtime's quantizer writes one, which the
// graph passes turn into QLinearConv (with a Relu), a uint8 MaxPool,
// QLinearAdd (a residual connection through a Relu) and QLinearMatMul over
// a stack of rows; quantizing and dequantizing reorders at both ends.
std::string residual_qdq_net() {
  using kiln::test::ModelBuilder;
  std::mt19937 rng(17);
  ModelBuilder b;
  b.input("x", 1, {"batch", 3, 16, 16}).output("y", 1, {"batch", 16, 8, 10});
  quantize_dequantize(b, "x", "xd", 1.0f / 64, 128);
  dequantized_weights(b, rng, "w1", {16, 3, 3, 3}, 0);
  b.initializer(random_weights(rng, 0.3f, "b1", {16}));
  ModelBuilder::attr_ints(b.node("Conv", {"xd", "w1", "b1"}, {"c1"}), "pads", {1, 1, 1, 1});
  b.node("Relu", {"c1"}, {"r1"});
  quantize_dequantize(b, "r1", "r1d", 1.0f / 64, 0);
  auto& pool = b.node("MaxPool", {"r1d"}, {"p1"});
  ModelBuilder::attr_ints(pool, "kernel_shape", {2, 2});
  ModelBuilder::attr_ints(pool, "strides", {2, 2});
  quantize_dequantize(b, "p1", "p1d", 1.0f / 64, 0);
  dequantized_weights(b, rng, "w2", {16, 16, 3, 3}, 0);
  ModelBuilder::attr_ints(b.node("Conv", {"p1d", "w2"}, {"c2"}), "pads", {1, 1, 1, 1});
  quantize_dequantize(b, "c2", "c2d", 1.0f / 32, 120);
  b.node("Add", {"c2d", "p1d"}, {"s"});
  b.node("Relu", {"s"}, {"r"});
  quantize_dequantize(b, "r", "rd", 1.0f / 32, 0);
  dequantized_weights(b, rng, "wm", {8, 10}, 1);
  b.node("MatMul", {"rd", "wm"}, {"m"});
  quantize_dequantize(b, "m", "y", kStep, 128);
  return b.model().SerializeAsString();
}

// The QOperator form: QLinearConv with full-range weights (in float on CPUs
// without VNNI: reorders with the input's zero point and the requantization),
// then QLinearMatMul over its rows.
std::string qlinear_net() {
  using kiln::test::ModelBuilder;
  std::mt19937 rng(23);
  std::uniform_int_distribution<int64_t> full(-127, 127), near(-64, 64), bias(-2000, 2000);
  auto ints = [&](size_t n, std::uniform_int_distribution<int64_t>& d) {
    std::vector<int64_t> v(n);
    for (int64_t& x : v) x = d(rng);
    return v;
  };
  ModelBuilder b;
  b.input("x", 1, {"batch", 3, 5, 5}).output("y", 1, {"batch", 4, 5, 3});
  b.initializer(ModelBuilder::float_tensor("xs", {}, {1.0f / 64}))
      .initializer(int_tensor("xz", {}, {128}, onnx::TensorProto::UINT8));
  b.node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
  b.initializer(int_tensor("w", {4, 3, 2, 2}, ints(48, full), onnx::TensorProto::INT8));
  b.initializer(ModelBuilder::float_tensor("ws", {4}, {0.01f, 0.02f, 0.005f, 0.008f}));
  b.initializer(int_tensor("wz", {4}, {0, 0, 0, 0}, onnx::TensorProto::INT8));
  b.initializer(int_tensor("b", {4}, ints(4, bias), onnx::TensorProto::INT32));
  b.initializer(ModelBuilder::float_tensor("ys", {}, {1.0f / 32}))
      .initializer(int_tensor("yz", {}, {128}, onnx::TensorProto::UINT8));
  ModelBuilder::attr_ints(b.node("QLinearConv", {"xq", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"}, {"yq"}), "pads",
                          {0, 0, 1, 1});
  b.initializer(int_tensor("m", {5, 3}, ints(15, near), onnx::TensorProto::INT8));
  b.initializer(ModelBuilder::float_tensor("ms", {}, {0.01f})).initializer(int_tensor("mz", {}, {0}, onnx::TensorProto::INT8));
  b.initializer(ModelBuilder::float_tensor("zs", {}, {kStep})).initializer(int_tensor("zz", {}, {100}, onnx::TensorProto::UINT8));
  b.node("QLinearMatMul", {"yq", "ys", "yz", "m", "ms", "mz", "zs", "zz"}, {"zq"});
  b.node("DequantizeLinear", {"zq", "zs", "zz"}, {"y"});
  return b.model().SerializeAsString();
}

class QuantizedNativeBundle : public BundleTest {
 protected:
  void SetUp() override {
    BundleTest::SetUp();
    kiln::RuntimeOptions o;
    o.backend = "reference";
    o.cache = false;
    reference_ = std::make_unique<kiln::Runtime>(o);
  }
  static NetRun native_run() {
    NetRun how;
    how.kernels = "native";
    how.libs = "-ldnnl -lm";
    how.step = kStep;
    return how;
  }
  std::unique_ptr<kiln::Runtime> reference_;
};

TEST_F(QuantizedNativeBundle, QdqNetworkMatchesTheReference) {
  if (!have("cc")) GTEST_SKIP() << "no C compiler";
  net_matches(*reference_, residual_qdq_net(), {3, 16, 16}, native_run());
}

TEST_F(QuantizedNativeBundle, QOperatorNetworkMatchesTheReference) {
  if (!have("cc")) GTEST_SKIP() << "no C compiler";
  net_matches(*reference_, qlinear_net(), {3, 5, 5}, native_run());
}

// DynamicQuantizeLinear computes its scale and zero point from the data:
// a host kernel in the JIT, the portable kernel in a native bundle. The
// QOperator network has it (at whole compiled batch sizes: its range is the
// whole batch's).
TEST_F(QuantizedNativeBundle, DynamicQuantizationCallsThePortableKernel) {
  if (!have("cc")) GTEST_SKIP() << "no C compiler";
  NetRun how = native_run();
  how.frozen = how.batches = {1, 3};
  how.step = 16.0f / 255;
  net_matches(*reference_, qoperator_net(), {3, 8, 8}, how);
}

// A quantized model (`qdq`: as quantizers write it, QuantizeLinear and
// DequantizeLinear around float operators, which the graph passes fuse
// into integer ones; otherwise the QOperator form and a dynamically
// quantized product) frozen with the portable kernels, its outputs against
// the reference backend's: the same within one step of the output's scale
// (the product's requantization is in float, the reference's in double: a
// value on a rounding tie may round the other way).
void BundleTest::quantized_net_matches(bool qdq, const std::string& target, const std::string& cc, const std::string& runner) {
  kiln::RuntimeOptions ro;
  ro.cache = false;
  ro.backend = "reference";
  kiln::Runtime reference(ro);
  NetRun how;
  how.target = target;
  how.cc = cc;
  how.runner = runner;
  if (qdq) {
    how.step = 20.0f / 255;
    net_matches(reference, qdq_net(), {3, 10, 10}, how);
  } else {
    // DynamicQuantizeLinear's range is the whole batch's: split or padded
    // runs would quantize differently, so only whole compiled sizes run.
    how.frozen = how.batches = {1, 3};
    how.step = 16.0f / 255;
    net_matches(reference, qoperator_net(), {3, 8, 8}, how);
  }
}

TEST_F(BundleTest, QuantizedModelsInPortableBundles) {
  if (!have("cc")) GTEST_SKIP() << "no C compiler";
  for (bool qdq : {true, false}) {
    SCOPED_TRACE(qdq ? "QDQ" : "QOperator");
    quantized_net_matches(qdq, "", "cc", "");
  }
  const Output nm = sh("nm -u " + (dir_ / "net.o").string());
  for (const char* forbidden : {"dnnl", "tbb", "_Z", "kiln_pk_", "kiln_bundle_"})
    EXPECT_EQ(nm.text.find(forbidden), std::string::npos) << "net.o needs " << forbidden << ":\n" << nm.text;
}

TEST_F(BundleTest, QuantizedModelsInAarch64BundlesUnderQemu) {
  if (!have("aarch64-linux-gnu-gcc") || !have("qemu-aarch64")) GTEST_SKIP() << "no aarch64 cross compiler or qemu";
  for (bool qdq : {true, false}) {
    SCOPED_TRACE(qdq ? "QDQ" : "QOperator");
    quantized_net_matches(qdq, "aarch64-linux-gnu", "aarch64-linux-gnu-gcc", "qemu-aarch64 -L /usr/aarch64-linux-gnu");
  }
}

// ONNX Runtime's contrib operators in the forms quantizers and the graph
// passes make fewer of: QLinearAdd of a per-channel operand and of a
// scalar (broadcast), QGemm without a y_scale (float output) and QGemm of a
// transposed A (the batch along A's columns) with per-tensor weight scales.
std::string contrib_qnet() {
  using kiln::test::ModelBuilder;
  std::mt19937 rng(23);
  ModelBuilder b(13);
  auto* opset = b.model().add_opset_import();
  opset->set_domain("com.microsoft");
  opset->set_version(1);
  b.input("x", 1, {"batch", 4, 3, 3}).output("y", 1, {"batch", 10});
  auto scalar = [&](const std::string& name, float v) { b.initializer(ModelBuilder::float_tensor(name, {}, {v})); };
  auto zero = [&](const std::string& name, int64_t v, int type) { b.initializer(int_tensor(name, {}, {v}, type)); };
  auto contrib = [&](const std::string& op, std::vector<std::string> in, const std::string& out) -> onnx::NodeProto& {
    onnx::NodeProto& n = b.node(op, std::move(in), {out});
    n.set_domain("com.microsoft");
    return n;
  };
  scalar("xs", 1.0f / 32);
  zero("xz", 128, onnx::TensorProto::UINT8);
  b.node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
  b.initializer(int_tensor("cq", {4, 1, 1}, {0, 40, 200, 255}, onnx::TensorProto::UINT8));
  scalar("cs", 1.0f / 64);
  zero("cz", 128, onnx::TensorProto::UINT8);
  scalar("as", 1.0f / 20);
  zero("az", 120, onnx::TensorProto::UINT8);
  contrib("QLinearAdd", {"xq", "xs", "xz", "cq", "cs", "cz", "as", "az"}, "aq");
  b.initializer(int_tensor("dq", {1}, {-7}, onnx::TensorProto::INT8));
  scalar("ds", 1.0f / 16);
  zero("dz", 0, onnx::TensorProto::INT8);
  scalar("es", 1.0f / 20);
  zero("ez", 10, onnx::TensorProto::INT8);
  contrib("QLinearAdd", {"dq", "ds", "dz", "aq", "as", "az", "es", "ez"}, "eq");
  b.node("Flatten", {"eq"}, {"f"});
  b.initializer(int8_weights(rng, "w1", {36, 10}));
  b.initializer(
      ModelBuilder::float_tensor("w1s", {10}, {0.004f, 0.006f, 0.005f, 0.008f, 0.003f, 0.007f, 0.002f, 0.01f, 0.005f, 0.004f}));
  b.initializer(int_tensor("w1z", {10}, std::vector<int64_t>(10, 0), onnx::TensorProto::INT8));
  b.initializer(int_tensor("b1", {10}, {100, -2000, 0, 512, 7, -64, 3000, -1, 20, -300}, onnx::TensorProto::INT32));
  contrib("QGemm", {"f", "es", "ez", "w1", "w1s", "w1z", "b1"}, "g1");
  ModelBuilder::attr_ints(b.node("Transpose", {"f"}, {"ft"}), "perm", {1, 0});
  b.initializer(int8_weights(rng, "w2", {10, 36}));
  scalar("w2s", 0.005f);
  zero("w2z", 0, onnx::TensorProto::INT8);
  b.initializer(int_tensor("b2", {10}, {-50, 60, 0, 1000, -7, 64, -300, 1, 2, 30}, onnx::TensorProto::INT32));
  scalar("gs", kStep);
  zero("gz", 128, onnx::TensorProto::UINT8);
  auto& g2 = contrib("QGemm", {"ft", "es", "ez", "w2", "w2s", "w2z", "b2", "gs", "gz"}, "g2q");
  ModelBuilder::attr_int(g2, "transA", 1);
  ModelBuilder::attr_int(g2, "transB", 1);
  b.node("DequantizeLinear", {"g2q", "gs", "gz"}, {"g2"});
  b.node("Add", {"g1", "g2"}, {"y"});
  return b.model().SerializeAsString();
}

// contrib_qnet() frozen with the portable kernels, for this machine and
// (under qemu) for aarch64, against the JIT on the same kernels and against
// the reference backend: within one step of QGemm's output scale (its
// requantization is in float, the reference's in double, so a value on a
// rounding tie may round the other way). Not against the native JIT: its
// QLinearAdd requantizes in float too, and a step of an activation moves
// the products after it by more than that.
TEST_F(BundleTest, QuantizedContribOperatorsInPortableBundles) {
  struct Target {
    std::string triple, cc, runner;
  };
  kiln::RuntimeOptions ro;
  ro.cache = false;
  ro.kernels = "portable";
  kiln::Runtime jit(ro);
  ro.kernels.clear();
  ro.backend = "reference";
  kiln::Runtime reference(ro);
  for (const Target& t :
       {Target{"", "cc", ""}, Target{"aarch64-linux-gnu", "aarch64-linux-gnu-gcc", "qemu-aarch64 -L /usr/aarch64-linux-gnu"}}) {
    SCOPED_TRACE(t.triple.empty() ? "this machine" : t.triple);
    if (!have(t.cc) || (!t.runner.empty() && !have("qemu-aarch64"))) {
      std::printf("skipped: no %s\n", t.cc.c_str());
      continue;
    }
    NetRun how;
    how.target = t.triple;
    how.cc = t.cc;
    how.runner = t.runner;
    how.step = kStep;
    for (kiln::Runtime* against : {&jit, &reference}) net_matches(*against, contrib_qnet(), {4, 3, 3}, how);
  }
}

// A bundle compiled for AVX-512 (x86-64-v4) on a CPU without it (qemu's has
// none): create and the static API return DIGITS_ERROR_CPU naming what is
// missing, before any of its instructions runs, instead of dying of SIGILL.
// Bundles for this machine and for x86-64-v3 pass the same check under qemu
// and give the JIT's results (or, for this machine's, refuse the same way).
TEST_F(BundleTest, MissingCpuFeaturesAreAStatusNotACrash) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "x86-64 only";
#endif
  if (!have("cc") || !have("qemu-x86_64")) GTEST_SKIP() << "no C compiler or qemu-x86_64";
  const bool avx512_here = read_file("/proc/cpuinfo").find(" avx512f") != std::string::npos;
  const auto pixels = images(3, 17);
  const std::vector<float> want = jit(pixels, 3);
  for (const std::string cpu : {"x86-64-v4", "", "x86-64-v3"}) {
    SCOPED_TRACE("cpu '" + cpu + "'");
    kiln::Model::FreezeOptions o;
    o.cpu = cpu;
    o.batch_sizes = {1};
    freeze(o);
    const std::string header = read_file(dir_ / "digits.h");
    EXPECT_NE(header.find("DIGITS_ERROR_CPU = 6"), std::string::npos) << header;
    const fs::path program = link("cc", (dir_ / "digits.o").string());
    const fs::path misuse = link_misuse();
    for (const std::string runner : {"qemu-x86_64", ""}) {
      SCOPED_TRACE("runner '" + runner + "'");
      Output o;
      const std::vector<float> got = run_example(program, pixels, 3, runner, "", 1, &o);
      const Output static_api = sh(runner + " " + misuse.string() + " " + (dir_ / "digits.weights.bin").string());
      const bool must_refuse = cpu == "x86-64-v4" && (!runner.empty() || !avx512_here);
      const bool may_refuse = cpu.empty() && !runner.empty();  // this machine's CPU against qemu's
      if (must_refuse || (may_refuse && o.code == 1)) {
        EXPECT_EQ(o.code, 1) << o.text;
        EXPECT_NE(o.text.find("cannot create the model: this CPU lacks "), std::string::npos) << o.text;
        if (must_refuse)
          for (const char* text : {"avx512f", "avx512bw", "(cpu x86-64-v4)", "--cpu x86-64-v3"})
            EXPECT_NE(o.text.find(text), std::string::npos) << text << " in: " << o.text;
        EXPECT_NE(static_api.text.find("create: 6 this CPU lacks"), std::string::npos) << static_api.text;
        EXPECT_NE(static_api.text.find("static run: 6"), std::string::npos) << static_api.text;
      } else {
        EXPECT_EQ(o.code, 0) << o.text;
        expect_close(got, want, "probabilities");
        EXPECT_NE(static_api.text.find("static run: 0"), std::string::npos) << static_api.text;
      }
    }
    if (cpu == "x86-64-v4") EXPECT_NE(header.find("avx512f"), std::string::npos) << header;
  }
}

// One bundle with a version of the code per CPU, best first: create runs
// the first whose features the CPU has. Under qemu, a Nehalem (SSE4.2, no
// AVX) runs the x86-64-v2 code, qemu's default CPU (AVX2, no AVX-512) the
// x86-64-v3 code, both with the JIT's results, through create and the
// static API; on a CPU none fits (qemu64: no SSE4.1) create names what each
// version lacks, as it does on a Nehalem for a bundle of x86-64-v3 code only.
TEST_F(BundleTest, OneBundleForSeveralCpus) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "x86-64 only";
#endif
  if (!have("cc") || !have("qemu-x86_64")) GTEST_SKIP() << "no C compiler or qemu-x86_64";
  const bool avx512_here = read_file("/proc/cpuinfo").find(" avx512f") != std::string::npos;
  kiln::Model::FreezeOptions o;
  o.cpu = "x86-64-v4,x86-64-v3,x86-64-v2";
  o.batch_sizes = {1, 4};
  EXPECT_EQ(freeze(o).cpu, o.cpu);
  const std::string header = read_file(dir_ / "digits.h");
  for (const char* text : {"code for each cpu of x86-64-v4, x86-64-v3, x86-64-v2", "- x86-64-v4: needs", "avx512f",
                           "- x86-64-v2: needs", "const char* digits_cpu(const digits* model);"})
    EXPECT_NE(header.find(text), std::string::npos) << "header lacks: " << text << "\n" << header;
  auto build_driver = [&] {
    const fs::path driver = dir_ / "driver";
    const Output built = sh("cc -O2 -DPREFIX=digits -DUPREFIX=DIGITS -include " + (dir_ / "digits.h").string() + " " + kSource +
                            "/tests/integration/bundle_driver.c " + (dir_ / "digits.o").string() + " -lm -o " + driver.string());
    EXPECT_EQ(built.code, 0) << built.text;
    return driver;
  };
  auto run = [&](const fs::path& driver, const std::string& runner, int64_t n, std::vector<float>* got) {
    const auto pixels = images(n, unsigned(40 + n));
    write_file(dir_ / "x.f32", std::string(reinterpret_cast<const char*>(pixels.data()), pixels.size() * sizeof(float)));
    fs::remove(dir_ / "y.f32");
    const Output r = sh(runner + " " + driver.string() + " " + (dir_ / "digits.weights.bin").string() + " " + std::to_string(n) +
                        " " + (dir_ / "x.f32").string() + " " + (dir_ / "y.f32").string());
    if (got) {
      const std::string y = read_file(dir_ / "y.f32");
      got->resize(y.size() / sizeof(float));
      std::memcpy(got->data(), y.data(), y.size());
      expect_close(*got, jit(pixels, n), "probabilities");
    }
    return r;
  };
  const fs::path driver = build_driver();
  const fs::path misuse = link_misuse();
  const std::string here = avx512_here ? "x86-64-v4" : "x86-64-v3";
  for (const auto& [runner, cpu] : std::vector<std::pair<std::string, std::string>>{
           {"qemu-x86_64 -cpu Nehalem", "x86-64-v2"}, {"qemu-x86_64", "x86-64-v3"}, {"", here}}) {
    SCOPED_TRACE("runner '" + runner + "'");
    for (int64_t n : {3, 6}) {
      std::vector<float> got;
      const Output r = run(driver, runner, n, &got);
      EXPECT_EQ(r.code, 0) << r.text;
      EXPECT_NE(r.text.find("code for cpu " + cpu + "\n"), std::string::npos) << r.text;
    }
    const Output static_api = sh(runner + " " + misuse.string() + " " + (dir_ / "digits.weights.bin").string());
    EXPECT_NE(static_api.text.find("static run: 0"), std::string::npos) << static_api.text;
  }
  Output none = run(driver, "qemu-x86_64 -cpu qemu64", 3, nullptr);
  EXPECT_EQ(none.code, 1) << none.text;
  for (const char* text :
       {"create: this CPU lacks, for each of the bundle's code versions, what it was compiled for: ", "(cpu x86-64-v4); ",
        "(cpu x86-64-v3); ", "sse4.2", "(cpu x86-64-v2): freeze it again with an older CPU last"})
    EXPECT_NE(none.text.find(text), std::string::npos) << text << " in: " << none.text;
  const Output static_none = sh("qemu-x86_64 -cpu qemu64 " + misuse.string() + " " + (dir_ / "digits.weights.bin").string());
  EXPECT_NE(static_none.text.find("static run: 6"), std::string::npos) << static_none.text;

  o.cpu = "x86-64-v3";
  freeze(o);
  const Output refused = run(build_driver(), "qemu-x86_64 -cpu Nehalem", 3, nullptr);
  EXPECT_EQ(refused.code, 1) << refused.text;
  for (const char* text : {"create: this CPU lacks ", "avx2", "(cpu x86-64-v3)", "--cpu x86-64-v3,x86-64-v2,x86-64)"})
    EXPECT_NE(refused.text.find(text), std::string::npos) << text << " in: " << refused.text;

  // "host" is this CPU by its name; a Nehalem runs the version after it.
  o.cpu = "host,x86-64-v2";
  const std::string cpus = freeze(o).cpu;
  EXPECT_TRUE(cpus.find("host") == std::string::npos && cpus.size() > 10 && cpus.compare(cpus.size() - 10, 10, ",x86-64-v2") == 0)
      << cpus;
  std::vector<float> got;
  const Output nehalem = run(build_driver(), "qemu-x86_64 -cpu Nehalem", 5, &got);
  EXPECT_EQ(nehalem.code, 0) << nehalem.text;
  EXPECT_NE(nehalem.text.find("code for cpu x86-64-v2\n"), std::string::npos) << nehalem.text;

  // A CPU after one it has every feature of would never run: left out.
  o.cpu = "x86-64-v2,x86-64-v3";
  EXPECT_EQ(freeze(o).cpu, "x86-64-v2");
}

TEST_F(BundleTest, Aarch64BundleRunsUnderQemu) {
  if (!have("aarch64-linux-gnu-gcc") || !have("qemu-aarch64")) GTEST_SKIP() << "no aarch64 cross compiler or qemu";
  kiln::Model::FreezeOptions o;
  o.target = "aarch64-linux-gnu";
  o.batch_sizes = {1, 4};
  const auto r = freeze(o);
  EXPECT_NE(r.target.find("aarch64"), std::string::npos);
  EXPECT_NE(sh("file " + (dir_ / "digits.o").string()).text.find("aarch64"), std::string::npos);
  const fs::path program = link("aarch64-linux-gnu-gcc", (dir_ / "digits.o").string());
  for (int64_t n : {1, 6}) {
    SCOPED_TRACE("batch " + std::to_string(n));
    const auto pixels = images(n, unsigned(10 + n));
    expect_close(run_example(program, pixels, n, "qemu-aarch64 -L /usr/aarch64-linux-gnu"), jit(pixels, n), "probabilities");
  }
  // Compiled for a CPU with SVE, BF16 and I8MM: it runs on qemu's "max" CPU,
  // and on a Cortex-A53 create names what the kernel's HWCAP lacks.
  o.cpu = "neoverse-v1";
  freeze(o);
  const fs::path newer = link("aarch64-linux-gnu-gcc", (dir_ / "digits.o").string());
  const auto pixels = images(5, 15);
  expect_close(run_example(newer, pixels, 5, "qemu-aarch64 -cpu max -L /usr/aarch64-linux-gnu"), jit(pixels, 5), "probabilities");
  Output refused;
  run_example(newer, pixels, 5, "qemu-aarch64 -cpu cortex-a53 -L /usr/aarch64-linux-gnu", "", 1, &refused);
  EXPECT_EQ(refused.code, 1) << refused.text;
  for (const char* text : {"this CPU lacks ", "sve", "bf16", "i8mm", "(cpu neoverse-v1)"})
    EXPECT_NE(refused.text.find(text), std::string::npos) << text << " in: " << refused.text;
}

// A model with an If on a sample rate (between a Conv stack and a Sigmoid),
// with the rate fixed by --constant: the bundle holds the branch taken only
// and takes only x. (bundle_control_flow_test.cpp freezes it without.)
TEST_F(BundleTest, ConstantInputKeepsTheBranchTaken) {
  if (!have("cc")) GTEST_SKIP() << "no C compiler";
  using kiln::test::ModelBuilder;
  std::mt19937 rng(11);
  ModelBuilder fast, slow;
  fast.graph().set_name("fast");
  fast.output("r", 1, {"batch", 4, 6});
  fast.initializer(random_weights(rng, 0.5f, "w", {4, 4, 3}));
  ModelBuilder::attr_ints(fast.node("Conv", {"x", "w"}, {"c"}), "pads", {1, 1});
  fast.node("Relu", {"c"}, {"r"});
  slow.graph().set_name("slow");
  slow.output("s", 1, {"batch", 4, 6});
  slow.node("Sigmoid", {"x"}, {"s"});
  ModelBuilder b;
  b.input("x", 1, {"batch", 4, 6}).input("rate", onnx::TensorProto::INT64, {}).output("y", 1, {"batch", 4, 6});
  b.initializer(ModelBuilder::int64_tensor("k", {}, {16000}));
  b.node("Equal", {"rate", "k"}, {"is_16k"});
  auto& branch = b.node("If", {"is_16k"}, {"y"});
  ModelBuilder::attr_graph(branch, "then_branch", fast.graph());
  ModelBuilder::attr_graph(branch, "else_branch", slow.graph());
  write_file(dir_ / "vad.onnx", b.model().SerializeAsString());
  kiln::Model vad = kiln::Model::load(*runtime_, (dir_ / "vad.onnx").string());
  kiln::Model::FreezeOptions o;
  o.output_dir = dir_.string();
  o.name = "vad";
  o.batch_sizes = {1, 4};
  std::normal_distribution<float> value(0, 1);
  for (int64_t rate : {16000, 8000}) {
    SCOPED_TRACE("rate " + std::to_string(rate));
    const kiln::Tensor fixed = kiln::Tensor::from_vector(kiln::DType::Int64, {}, std::vector<int64_t>{rate});
    o.constants = {{"rate", fixed}};
    vad.freeze(o);
    EXPECT_NE(read_file(dir_ / "vad.h").find("#define VAD_NUM_INPUTS 1"), std::string::npos);
    const fs::path driver = dir_ / "driver";
    const Output built = sh("cc -O2 -DPREFIX=vad -DUPREFIX=VAD -include " + (dir_ / "vad.h").string() + " " + kSource +
                            "/tests/integration/bundle_driver.c " + (dir_ / "vad.o").string() + " -lm -o " + driver.string());
    ASSERT_EQ(built.code, 0) << built.text;
    std::vector<float> x(3 * 4 * 6);
    for (float& v : x) v = value(rng);
    write_file(dir_ / "x.f32", std::string(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float)));
    const Output r = sh(driver.string() + " " + (dir_ / "vad.weights.bin").string() + " 3 " + (dir_ / "x.f32").string() + " " +
                        (dir_ / "y.f32").string());
    ASSERT_EQ(r.code, 0) << r.text;
    const std::string y = read_file(dir_ / "y.f32");
    std::vector<float> got(y.size() / sizeof(float));
    std::memcpy(got.data(), y.data(), y.size());
    const kiln::Tensor want = vad.run({{"x", kiln::Tensor::from_vector(kiln::DType::Float32, {3, 4, 6}, x)}, {"rate", fixed}})[0];
    expect_close(got, std::vector<float>(want.data_as<float>(), want.data_as<float>() + want.numel()), "y");
  }
  o.constants = {{"rate", kiln::Tensor::from_vector(kiln::DType::Float32, {}, std::vector<float>{16000})}};
  try {
    vad.freeze(o);
    ADD_FAILURE() << "took a float constant for an int64 input";
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("constant 'rate' is float32, the input is int64"), std::string::npos) << e.what();
  }
}

}  // namespace
