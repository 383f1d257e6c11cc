// The public C++ API on the shipped digits model: results, errors, threads.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli/npy.hpp"
#include "kiln/kiln.hpp"
#include "model_builder.hpp"

namespace {

const std::string kDigits = std::string(KILN_SOURCE_DIR) + "/examples/digits/";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// ctest turns the cache off for this suite (KILN_CACHE=off); tests of the
// cache need a Runtime with it on.
// Models from memory stay out of the cache unless asked.
const kiln::Model::MemoryLoadOptions kCached{.external_data_dir = "", .cache = true};

kiln::Runtime runtime_with_cache(const kiln::RuntimeOptions& opts) {
  const char* env = std::getenv("KILN_CACHE");
  const std::string saved = env ? env : "";
  ::unsetenv("KILN_CACHE");
  kiln::Runtime rt(opts);
  if (env) ::setenv("KILN_CACHE", saved.c_str(), 1);
  return rt;
}

}  // namespace

TEST(Api, DescribesInputsAndOutputs) {
  kiln::Runtime rt;
  auto model = kiln::Model::load(rt, kDigits + "digits.onnx");
  ASSERT_EQ(model.inputs().size(), 1u);
  EXPECT_EQ(model.inputs()[0].name, "image");
  EXPECT_EQ(model.inputs()[0].shape_string(), "[batch,1,8,8]");
  EXPECT_EQ(model.outputs()[0].shape_string(), "[batch,10]");
  EXPECT_EQ(model.opset(), 13);
  EXPECT_EQ(model.op_histogram().at("Gemm"), 2);
  EXPECT_TRUE(model.unsupported_ops().empty());
  EXPECT_GE(rt.threads(), 1);
}

TEST(Api, ClassifiesHeldOutDigits) {
  kiln::Runtime rt;
  auto model = kiln::Model::load(rt, kDigits + "digits.onnx");
  kiln::Tensor images = kiln::npy::load(kDigits + "test_images.npy");
  kiln::Tensor labels = kiln::npy::load(kDigits + "test_labels.npy");
  auto out = model.run({{"image", images}});
  ASSERT_EQ(out.size(), 1u);
  const int64_t n = images.shape()[0];
  ASSERT_EQ(out[0].shape(), (kiln::Shape{n, 10}));
  int correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* p = out[0].data_as<float>() + i * 10;
    float sum = 0;
    int best = 0;
    for (int c = 0; c < 10; ++c) {
      sum += p[c];
      if (p[c] > p[best]) best = c;
    }
    EXPECT_NEAR(sum, 1.0f, 1e-4);
    correct += best == labels.data_as<int64_t>()[i];
  }
  // The training script measured 96.9% on these images.
  EXPECT_GE(double(correct) / double(n), 0.95);
}

TEST(Api, WrongInputsNameTheInputAndWhatWasExpected) {
  kiln::Runtime rt;
  auto model = kiln::Model::load(rt, kDigits + "digits.onnx");
  std::vector<float> pixels(64, 0.5f);
  auto good = kiln::Tensor::view(kiln::DType::Float32, {1, 1, 8, 8}, pixels.data());

  std::string e = error_of([&] { model.run({{"pixels", good}}); });
  EXPECT_NE(e.find("unknown input 'pixels'"), std::string::npos) << e;
  EXPECT_NE(e.find("'image'"), std::string::npos) << e;

  e = error_of([&] { model.run({}); });
  EXPECT_NE(e.find("'image'"), std::string::npos) << e;
  EXPECT_NE(e.find("required"), std::string::npos) << e;

  auto wrong_shape = kiln::Tensor::view(kiln::DType::Float32, {1, 64}, pixels.data());
  e = error_of([&] { model.run({{"image", wrong_shape}}); });
  EXPECT_NE(e.find("'image'"), std::string::npos) << e;
  EXPECT_NE(e.find("[batch,1,8,8]"), std::string::npos) << e;
  EXPECT_NE(e.find("1x64"), std::string::npos) << e;

  auto wrong_dim = kiln::Tensor::view(kiln::DType::Float32, {1, 1, 4, 16}, pixels.data());
  e = error_of([&] { model.run({{"image", wrong_dim}}); });
  EXPECT_NE(e.find("dimension 2 must be 8"), std::string::npos) << e;

  std::vector<int64_t> ints(64);
  auto wrong_type = kiln::Tensor::view(kiln::DType::Int64, {1, 1, 8, 8}, ints.data());
  e = error_of([&] { model.run({{"image", wrong_type}}); });
  EXPECT_NE(e.find("must be float32, got int64"), std::string::npos) << e;

  e = error_of([&] { model.run({{"image", good}, {"image", good}}); });
  EXPECT_NE(e.find("twice"), std::string::npos) << e;
}

TEST(Api, SymbolsMustAgreeAcrossInputs) {
  kiln::test::ModelBuilder b;
  b.input("a", onnx::TensorProto::FLOAT, {"batch", 2}).input("b", onnx::TensorProto::FLOAT, {"batch", 2});
  b.output("y", onnx::TensorProto::FLOAT, {"batch", 2});
  b.node("Add", {"a", "b"}, {"y"});
  std::string bytes = b.bytes();
  kiln::Runtime rt;
  auto model = kiln::Model::load_from_memory(rt, bytes.data(), bytes.size());
  kiln::Tensor a(kiln::DType::Float32, {3, 2}), c(kiln::DType::Float32, {4, 2});
  std::string e = error_of([&] { model.run({{"a", a}, {"b", c}}); });
  EXPECT_NE(e.find("'batch'"), std::string::npos) << e;
  auto y = model.run({{"a", a}, {"b", a}});
  EXPECT_EQ(y[0].shape(), (kiln::Shape{3, 2}));
}

TEST(Api, BadFilesAreErrorsWithCodes) {
  kiln::Runtime rt;
  try {
    kiln::Model::load(rt, "/does/not/exist.onnx");
    FAIL();
  } catch (const kiln::Error& e) {
    EXPECT_EQ(e.code(), kiln::ErrorCode::Io);
  }
  std::string junk = "definitely not onnx";
  try {
    kiln::Model::load_from_memory(rt, junk.data(), junk.size());
    FAIL();
  } catch (const kiln::Error& e) {
    EXPECT_EQ(e.code(), kiln::ErrorCode::InvalidModel);
  }
}

TEST(Api, UnsupportedOperatorsAreReportedAndRunFailsCleanly) {
  kiln::test::ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {2}).output("y", onnx::TensorProto::FLOAT, {2});
  b.node("NoSuchOperator", {"x"}, {"y"}, "mystery");
  std::string bytes = b.bytes();
  kiln::RuntimeOptions opts;
  std::vector<std::string> logged;
  opts.logger = [&](kiln::LogLevel, const std::string& m) { logged.push_back(m); };
  kiln::Runtime rt(opts);
  auto model = kiln::Model::load_from_memory(rt, bytes.data(), bytes.size());
  EXPECT_EQ(model.unsupported_ops(), (std::vector<std::string>{"NoSuchOperator"}));
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_NE(logged[0].find("NoSuchOperator"), std::string::npos);
  kiln::Tensor x(kiln::DType::Float32, {2});
  try {
    model.run({{"x", x}});
    FAIL();
  } catch (const kiln::Error& e) {
    EXPECT_EQ(e.code(), kiln::ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("mystery"), std::string::npos) << e.what();
  }
}

TEST(Api, ConcurrentRunsOnOneModelAgree) {
  kiln::Runtime rt;
  auto model = kiln::Model::load(rt, kDigits + "digits.onnx");
  kiln::Tensor images = kiln::npy::load(kDigits + "test_images.npy");
  auto expected = model.run({{"image", images}})[0];
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 5; ++i) {
        try {
          auto out = model.run({{"image", images}})[0];
          if (std::memcmp(out.data(), expected.data(), expected.nbytes()) != 0) ++mismatches;
        } catch (const kiln::Error&) {
          ++mismatches;
        }
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// A grouped convolution that oneDNN runs as im2col + GEMM, which needs a
// scratchpad. oneDNN's own scratchpad belongs to the thread that created the
// primitive: a run from any other thread (a service's worker pool, or a
// process that loaded the specialization from the cache) crashed before the
// backend gave every primitive a scratchpad in the run's arena.
TEST(Api, RunsFromOtherThreadsThanTheCompileOrTheCacheLoadAgree) {
  kiln::test::ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {1, 8, 6, 6}).output("y", onnx::TensorProto::FLOAT, {1, 6, 4, 4});
  std::vector<float> w(6 * 4 * 3 * 3), bias(6);
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i % 7) - 3) / 8;
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = float(i);
  b.initializer(kiln::test::ModelBuilder::float_tensor("w", {6, 4, 3, 3}, w));
  b.initializer(kiln::test::ModelBuilder::float_tensor("b", {6}, bias));
  kiln::test::ModelBuilder::attr_int(b.node("Conv", {"x", "w", "b"}, {"y"}), "group", 2);
  const std::string bytes = b.bytes();
  std::vector<float> xs(8 * 6 * 6);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = float(int(i % 5) - 2);
  const auto x = kiln::Tensor::from_vector<float>(kiln::DType::Float32, {1, 8, 6, 6}, xs);

  kiln::RuntimeOptions ref_opts;
  ref_opts.backend = "reference";
  kiln::Runtime ref_rt(ref_opts);
  const auto expected = kiln::Model::load_from_memory(ref_rt, bytes.data(), bytes.size()).run({{"x", x}})[0];

  // Compiled on this thread, then loaded from the cache on this thread by a
  // second Runtime; both run on other threads.
  kiln::RuntimeOptions opts;
  opts.threads = 2;
  opts.cache_dir = ::testing::TempDir() + "kiln_scratchpad_cache_" + std::to_string(::getpid());
  kiln::Runtime compiling = runtime_with_cache(opts), loading = runtime_with_cache(opts);
  auto compiled = kiln::Model::load_from_memory(compiling, bytes.data(), bytes.size(), kCached);
  const auto first = compiled.run({{"x", x}})[0];
  compiling.wait_for_cache();
  auto loaded = kiln::Model::load_from_memory(loading, bytes.data(), bytes.size(), kCached);
  const auto again = loaded.run({{"x", x}})[0];
  ASSERT_EQ(loaded.specializations().at(0).cache, kiln::CacheOutcome::Hit);
  ASSERT_EQ(first.nbytes(), expected.nbytes());
  for (size_t i = 0; i < 6 * 4 * 4; ++i) EXPECT_NEAR(first.data_as<float>()[i], expected.data_as<float>()[i], 1e-4) << i;
  EXPECT_EQ(std::memcmp(again.data(), first.data(), first.nbytes()), 0);
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (auto* model : {&compiled, &loaded})
    for (int t = 0; t < 2; ++t)
      threads.emplace_back([&, model] {
        for (int i = 0; i < 3; ++i) {
          const auto out = model->run({{"x", x}})[0];
          if (std::memcmp(out.data(), first.data(), first.nbytes()) != 0) ++mismatches;
        }
      });
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  std::filesystem::remove_all(opts.cache_dir);
}

TEST(Api, OutputsNeverAliasInputsOrWeights) {
  kiln::test::ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {2}).output("y", onnx::TensorProto::FLOAT, {2});
  b.node("Identity", {"x"}, {"y"});
  std::string bytes = b.bytes();
  kiln::Runtime rt;
  auto model = kiln::Model::load_from_memory(rt, bytes.data(), bytes.size());
  std::vector<float> x = {1, 2};
  auto y = model.run({{"x", kiln::Tensor::view(kiln::DType::Float32, {2}, x.data())}})[0];
  EXPECT_NE(y.data(), static_cast<void*>(x.data()));
  EXPECT_EQ(y.data_as<float>()[1], 2.0f);
}

TEST(Api, NpyRoundTrip) {
  kiln::Tensor t = kiln::Tensor::from_vector<int32_t>(kiln::DType::Int32, {2, 3}, {1, -2, 3, -4, 5, -6});
  std::string path = ::testing::TempDir() + "/roundtrip_" + std::to_string(::getpid()) + ".npy";
  kiln::npy::save(path, t);
  kiln::Tensor back = kiln::npy::load(path);
  EXPECT_EQ(back.dtype(), kiln::DType::Int32);
  EXPECT_EQ(back.shape(), t.shape());
  EXPECT_EQ(std::memcmp(back.data(), t.data(), t.nbytes()), 0);
}

TEST(Api, EachInputShapeIsSpecializedOnceEvenUnderConcurrency) {
  kiln::Runtime rt;
  auto model = kiln::Model::load(rt, kDigits + "digits.onnx");
  EXPECT_TRUE(model.specializations().empty());
  kiln::Tensor one(kiln::DType::Float32, {1, 1, 8, 8}), five(kiln::DType::Float32, {5, 1, 8, 8});
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 3; ++i) {
        try {
          model.run({{"image", one}});
        } catch (const kiln::Error&) {
          ++errors;
        }
      }
    });
  for (auto& t : threads) t.join();
  ASSERT_EQ(errors.load(), 0);
  model.run({{"image", five}});
  auto stats = model.specializations();
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[0].key, "image:float32:1x1x8x8");
  EXPECT_EQ(stats[0].runs, 12);
  EXPECT_EQ(stats[0].backend, "cpu");
  EXPECT_EQ(stats[0].fallback_nodes, 0);
  EXPECT_GT(stats[0].compiled_nodes, 0);
  EXPECT_EQ(stats[1].key, "image:float32:5x1x8x8");
  EXPECT_EQ(stats[1].runs, 1);
}

TEST(Api, UnknownBackendIsAnError) {
  kiln::RuntimeOptions opts;
  opts.backend = "gpu";
  try {
    kiln::Runtime rt(opts);
    FAIL();
  } catch (const kiln::Error& e) {
    EXPECT_EQ(e.code(), kiln::ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'reference'"), std::string::npos) << e.what();
  }
}

// bf16 is refused with the reason wherever the cpu backend cannot compute
// in it (on every CPU without AVX-512, and not yet compiled on the others);
// an unknown precision is a wrong argument, and fp32 is the default.
TEST(Api, PrecisionIsCheckedWhenTheRuntimeIsMade) {
  for (const char* precision : {"", "fp32"}) {
    kiln::RuntimeOptions opts;
    opts.precision = precision;
    opts.cache = false;
    EXPECT_NO_THROW(kiln::Runtime{opts}) << precision;
  }
  kiln::RuntimeOptions opts;
  opts.cache = false;
  opts.precision = "bf16";
  try {
    kiln::Runtime rt(opts);
    FAIL() << "bf16 is not compiled by this cpu backend";
  } catch (const kiln::Error& e) {
    EXPECT_EQ(e.code(), kiln::ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("precision 'bf16': "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("use 'fp32'"), std::string::npos) << e.what();
  }
  opts.precision = "fp16";
  try {
    kiln::Runtime rt(opts);
    FAIL();
  } catch (const kiln::Error& e) {
    EXPECT_EQ(e.code(), kiln::ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("expected 'fp32' or 'bf16'"), std::string::npos) << e.what();
  }
  opts.backend = "reference";
  opts.precision = "bf16";
  try {
    kiln::Runtime rt(opts);
    FAIL();
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("reference computes in fp32 only"), std::string::npos) << e.what();
  }
}

// A remote tier's settings are checked when the Runtime is made, from the
// options and from the environment; without the cache's key it is not used
// (a warning), since nothing it sends could be checked.
TEST(Api, RemoteCacheSettingsAreChecked) {
  auto refused = [](kiln::RuntimeOptions opts, const std::string& expected) {
    try {
      kiln::Runtime rt(opts);
      ADD_FAILURE() << "accepted; expected " << expected;
    } catch (const kiln::Error& e) {
      EXPECT_EQ(e.code(), kiln::ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  kiln::RuntimeOptions opts;
  opts.cache = false;
  for (const char* url :
       {"redis//x", "redis://", "redis://h:0", "redis://h:70000", "redis://h/x", "unix://relative", "redis://user:pw@h"})
    refused(
        [&] {
          kiln::RuntimeOptions o = opts;
          o.remote_cache = url;
          return o;
        }(),
        "remote cache: '" + std::string(url) + "'");
  opts.remote_cache = "redis://127.0.0.1:1";
  opts.remote_cache_wait_ms = -1;
  refused(opts, "remote_cache_wait_ms must be 0");
  opts.remote_cache_wait_ms = 0;
  ::setenv("KILN_REMOTE_CACHE_TIMEOUT_MS", "soon", 1);
  refused(opts, "KILN_REMOTE_CACHE_TIMEOUT_MS='soon'");
  ::unsetenv("KILN_REMOTE_CACHE_TIMEOUT_MS");
  std::vector<std::string> warnings;
  opts.logger = [&](kiln::LogLevel, const std::string& m) { warnings.push_back(m); };
  opts.cache = true;
  opts.cache_dir = ::testing::TempDir() + "/kiln_remote_settings_" + std::to_string(::getpid());
  const char* cache_env = std::getenv("KILN_CACHE");  // ctest turns the cache off for these tests
  const std::string saved = cache_env ? cache_env : "";
  ::unsetenv("KILN_CACHE");
  {
    kiln::Runtime rt(opts);
  }
  if (cache_env) ::setenv("KILN_CACHE", saved.c_str(), 1);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("it needs the cache's key"), std::string::npos) << warnings[0];
  std::filesystem::remove_all(opts.cache_dir);
}

// x.view(x.size(0), -1) as exporters write it: after specialization only the
// Reshape is left, and the result is unchanged.
TEST(Api, SpecializationFoldsShapeArithmetic) {
  kiln::test::ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {"batch", 2, 3}).output("y", onnx::TensorProto::FLOAT, {"batch", 6});
  b.initializer(kiln::test::ModelBuilder::int64_tensor("zero", {}, {0}));
  b.initializer(kiln::test::ModelBuilder::int64_tensor("axes", {1}, {0}));
  b.initializer(kiln::test::ModelBuilder::int64_tensor("minus_one", {1}, {-1}));
  b.node("Shape", {"x"}, {"shape"});
  b.node("Gather", {"shape", "zero"}, {"n"});
  b.node("Unsqueeze", {"n", "axes"}, {"n1"});
  b.node("Concat", {"n1", "minus_one"}, {"target"}).add_attribute()->CopyFrom([] {
    onnx::AttributeProto a;
    a.set_name("axis");
    a.set_type(onnx::AttributeProto::INT);
    a.set_i(0);
    return a;
  }());
  b.node("Reshape", {"x", "target"}, {"y"});
  std::string bytes = b.bytes();
  kiln::Runtime rt;
  auto model = kiln::Model::load_from_memory(rt, bytes.data(), bytes.size());
  auto x = kiln::Tensor::from_vector<float>(kiln::DType::Float32, {2, 2, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  auto y = model.run({{"x", x}})[0];
  EXPECT_EQ(y.shape(), (kiln::Shape{2, 6}));
  EXPECT_EQ(y.data_as<float>()[7], 7.0f);
  ASSERT_EQ(model.specializations().size(), 1u);
  EXPECT_EQ(model.specializations()[0].nodes, 1);
}

// A shape that depends on data (NonZero) cannot be compiled statically: the
// runtime runs those nodes on the cpu backend's interpreter and compiles the
// rest, here in three parts (cpu, interpreter, cpu), handing values on.
TEST(Api, NodesWithDataDependentShapesAreInterpretedAndTheRestIsCompiled) {
  using B = kiln::test::ModelBuilder;
  B b;
  b.input("x", onnx::TensorProto::FLOAT, {"n", 3}).input("w", onnx::TensorProto::FLOAT, {3, 4});
  b.output("y", onnx::TensorProto::FLOAT, {"n", 3}).output("z", onnx::TensorProto::FLOAT, {"n", 4});
  // w is an input with a default: the caller may replace it.
  b.initializer(B::float_tensor("w", {3, 4}, {1, 0, 0, 1, 0, 1, 0, 1, 0, 0, 1, 1}));
  b.node("Relu", {"x"}, {"a"});
  b.node("NonZero", {"a"}, {"where"});
  B::attr_int(b.node("Cast", {"where"}, {"where_f"}), "to", onnx::TensorProto::FLOAT);
  b.node("ReduceSum", {"where_f"}, {"s"});  // keepdims: [1, 1], static again
  b.node("Mul", {"a", "s"}, {"y"});
  b.node("MatMul", {"x", "w"}, {"z"});
  const std::string bytes = b.bytes();
  const std::string dir = ::testing::TempDir() + "kiln_partition_cache_" + std::to_string(::getpid());
  kiln::RuntimeOptions opts;
  opts.cache_dir = dir;
  kiln::Runtime rt = runtime_with_cache(opts);
  auto model = kiln::Model::load_from_memory(rt, bytes.data(), bytes.size(), kCached);
  const auto x = kiln::Tensor::from_vector<float>(kiln::DType::Float32, {2, 3}, {1, -2, 3, 0, 5, -1});

  // Relu(x) is nonzero at (0,0), (0,2), (1,1): the indices add up to 4.
  const auto out = model.run({{"x", x}});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(std::vector<float>(out[0].data_as<float>(), out[0].data_as<float>() + 6), (std::vector<float>{4, 0, 12, 0, 20, 0}));
  EXPECT_EQ(std::vector<float>(out[1].data_as<float>(), out[1].data_as<float>() + 8),
            (std::vector<float>{1, -2, 3, 2, 0, 5, -1, 4}));
  auto stats = model.specializations();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].backend, "cpu+interpreter");
  EXPECT_EQ(stats[0].parts, 3);
  EXPECT_EQ(stats[0].nodes, 6);
  EXPECT_EQ(stats[0].compiled_nodes, 3);  // Relu, MatMul and Mul
  EXPECT_EQ(stats[0].fallback_nodes, 3);
  EXPECT_EQ(stats[0].cache, kiln::CacheOutcome::Miss) << stats[0].cache_note;

  // The default of w can still be replaced, and runs in flight share nothing.
  const auto w2 = kiln::Tensor::from_vector<float>(kiln::DType::Float32, {3, 4}, {2, 0, 0, 0, 0, 2, 0, 0, 0, 0, 2, 0});
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        const auto o = model.run({{"x", x}, {"w", w2}});
        const float* z = o[1].data_as<float>();
        if (o[0].data_as<float>()[4] != 20 || z[0] != 2 || z[1] != -4 || z[3] != 0 || z[6] != -2) ++wrong;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);

  // Another batch is another specialization with other data-dependent shapes.
  const auto x3 = kiln::Tensor::from_vector<float>(kiln::DType::Float32, {3, 3}, {1, 1, 1, 1, 1, 1, 1, 1, 1});
  EXPECT_EQ(model.run({{"x", x3}})[0].data_as<float>()[0], 18.0f);  // nine nonzeros, indices adding up to 18

  // A warm start loads all three parts from one entry and compiles nothing.
  rt.wait_for_cache();
  kiln::Runtime warm = runtime_with_cache(opts);
  auto again = kiln::Model::load_from_memory(warm, bytes.data(), bytes.size(), kCached);
  const auto warm_out = again.run({{"x", x}, {"w", w2}});
  EXPECT_EQ(warm.codegen_runs(), 0);
  auto warm_stats = again.specializations();
  ASSERT_EQ(warm_stats.size(), 1u);
  EXPECT_EQ(warm_stats[0].cache, kiln::CacheOutcome::Hit) << warm_stats[0].cache_note;
  EXPECT_EQ(warm_stats[0].backend, "cpu+interpreter");
  EXPECT_EQ(warm_stats[0].parts, 3);
  EXPECT_EQ(warm_stats[0].compiled_nodes, 3);
  const auto cold_out = model.run({{"x", x}, {"w", w2}});
  for (size_t k = 0; k < 2; ++k) {
    ASSERT_EQ(warm_out[k].shape(), cold_out[k].shape());
    EXPECT_EQ(std::memcmp(warm_out[k].data(), cold_out[k].data(), warm_out[k].nbytes()), 0) << "output " << k;
  }
  EXPECT_EQ(again.run({{"x", x}})[1].data_as<float>()[1], -2.0f) << "w's default is the model's";
  std::filesystem::remove_all(dir);
}

// An output the specialization computed at compile time must still be the
// caller's own memory: writing into it cannot change the next run.
TEST(Api, OutputsFoldedToConstantsAreFreshEachRun) {
  kiln::test::ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {2}).output("y", onnx::TensorProto::FLOAT, {2});
  b.output("z", onnx::TensorProto::FLOAT, {2});
  b.initializer(kiln::test::ModelBuilder::float_tensor("a", {2}, {1, 2}));
  b.node("Add", {"a", "a"}, {"y"});
  b.node("Relu", {"x"}, {"z"});
  std::string bytes = b.bytes();
  kiln::Runtime rt;
  auto model = kiln::Model::load_from_memory(rt, bytes.data(), bytes.size());
  kiln::Tensor x(kiln::DType::Float32, {2});
  auto first = model.run({{"x", x}});
  first[0].data_as<float>()[0] = 99;
  auto second = model.run({{"x", x}});
  EXPECT_EQ(second[0].data_as<float>()[0], 2.0f);
}

TEST(Api, RunIntoCallerBuffers) {
  kiln::Runtime rt;
  auto model = kiln::Model::load(rt, kDigits + "digits.onnx");
  kiln::Tensor image(kiln::DType::Float32, {2, 1, 8, 8});
  for (int64_t i = 0; i < image.numel(); ++i) image.data_as<float>()[i] = float(i % 17) / 16;
  const std::vector<kiln::Tensor> expected = model.run({{"image", image}});
  std::vector<float> storage(20, -1.0f);
  std::vector<kiln::Tensor> outputs{kiln::Tensor::view(kiln::DType::Float32, {2, 10}, storage.data())};
  model.run({{"image", image}}, outputs);
  for (int i = 0; i < 20; ++i) EXPECT_FLOAT_EQ(storage[size_t(i)], expected[0].data_as<float>()[i]);

  // A buffer of the wrong shape is refused, naming the output and both shapes.
  std::vector<kiln::Tensor> wrong{kiln::Tensor(kiln::DType::Float32, {2, 9})};
  try {
    model.run({{"image", image}}, wrong);
    FAIL();
  } catch (const kiln::Error& e) {
    EXPECT_EQ(e.code(), kiln::ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("probabilities"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("2x10"), std::string::npos) << e.what();
  }
  std::vector<kiln::Tensor> none;
  EXPECT_THROW(model.run({{"image", image}}, none), kiln::Error);
}

// Weights stay in the mapped file until the first compile, which checks the
// file first: a file rewritten in place is an error, never another model's
// weights under this model's cache key.
TEST(Api, AModelFileRewrittenInPlaceBeforeTheFirstRunIsAnIoError) {
  const std::string path = ::testing::TempDir() + "kiln_rewritten_" + std::to_string(::getpid()) + ".onnx";
  std::ifstream in(kDigits + "digits.onnx", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  kiln::Runtime rt;
  auto model = kiln::Model::load(rt, path);
  bytes[bytes.size() / 2] ^= 1;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
  kiln::Tensor images = kiln::npy::load(kDigits + "test_images.npy");
  try {
    model.run({{"image", images}});
    ADD_FAILURE() << "ran on a model file changed since loading";
  } catch (const kiln::Error& e) {
    EXPECT_EQ(e.code(), kiln::ErrorCode::Io);
    EXPECT_NE(std::string(e.what()).find("changed on disk"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

// BatchNormalization that the exporter left in the graph: after a Conv (an
// export in training mode) it folds into it; after a Concat (DenseNet) it
// becomes a depthwise Conv; on [N, C] (after a Gemm) it is oneDNN's own. All
// three must compile: a new weight the specialization did not know used to
// send its Conv to the reference kernels.
TEST(Api, BatchNormalizationsLeftByTheExporterAreCompiled) {
  using B = kiln::test::ModelBuilder;
  B b;
  b.input("x", onnx::TensorProto::FLOAT, {"n", 3, 8, 8}).output("y", onnx::TensorProto::FLOAT, {"n", 5});
  std::vector<float> ramp;
  for (int i = 0; i < 500; ++i) ramp.push_back(float((i * 37) % 17) / 17.0f - 0.5f);
  auto params = [&](const std::string& p, int64_t c) {
    b.initializer(B::float_tensor(p + "_scale", {c}, std::vector<float>(ramp.begin(), ramp.begin() + c)));
    b.initializer(B::float_tensor(p + "_shift", {c}, std::vector<float>(ramp.begin() + 20, ramp.begin() + 20 + c)));
    b.initializer(B::float_tensor(p + "_mean", {c}, std::vector<float>(ramp.begin() + 40, ramp.begin() + 40 + c)));
    std::vector<float> var;
    for (int64_t i = 0; i < c; ++i) var.push_back(0.5f + float(i) / 8);
    b.initializer(B::float_tensor(p + "_var", {c}, var));
    return std::vector<std::string>{p + "_scale", p + "_shift", p + "_mean", p + "_var"};
  };
  auto bn = [&](const std::string& in, const std::string& out, const std::string& p, int64_t c) {
    auto ps = params(p, c);
    b.node("BatchNormalization", {in, ps[0], ps[1], ps[2], ps[3]}, {out});
  };
  b.initializer(B::float_tensor("w1", {4, 3, 3, 3}, std::vector<float>(ramp.begin(), ramp.begin() + 108)));
  B::attr_ints(b.node("Conv", {"x", "w1"}, {"c1"}), "pads", {1, 1, 1, 1});
  bn("c1", "n1", "bn1", 4);  // folds into the Conv
  b.node("Relu", {"n1"}, {"r1"});
  B::attr_int(b.node("Concat", {"x", "r1"}, {"cat"}), "axis", 1);
  bn("cat", "n2", "bn2", 7);  // a depthwise Conv, with the Relu fused
  b.node("Relu", {"n2"}, {"r2"});
  b.node("GlobalAveragePool", {"r2"}, {"pool"});
  b.node("Flatten", {"pool"}, {"flat"});
  b.initializer(B::float_tensor("wg", {7, 5}, std::vector<float>(ramp.begin() + 100, ramp.begin() + 135)));
  b.node("Gemm", {"flat", "wg"}, {"g"});
  bn("g", "y", "bn3", 5);  // on [N, C]
  const std::string bytes = b.bytes();
  std::vector<float> pixels;
  for (int i = 0; i < 2 * 3 * 8 * 8; ++i) pixels.push_back(float((i * 13) % 29) / 29.0f - 0.3f);
  const auto x = kiln::Tensor::from_vector<float>(kiln::DType::Float32, {2, 3, 8, 8}, pixels);

  kiln::RuntimeOptions ref_opts;
  ref_opts.backend = "reference";
  kiln::Runtime ref_rt(ref_opts);
  const auto want = kiln::Model::load_from_memory(ref_rt, bytes.data(), bytes.size()).run({{"x", x}});
  kiln::Runtime rt;
  auto model = kiln::Model::load_from_memory(rt, bytes.data(), bytes.size());
  const auto got = model.run({{"x", x}});
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].shape(), want[0].shape());
  for (int64_t i = 0; i < want[0].numel(); ++i) EXPECT_NEAR(got[0].data_as<float>()[i], want[0].data_as<float>()[i], 1e-4f) << i;
  const auto stats = model.specializations();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].backend, "cpu");
  EXPECT_EQ(stats[0].parts, 1);
  EXPECT_EQ(stats[0].fallback_nodes, 0);
  EXPECT_EQ(stats[0].nodes, stats[0].compiled_nodes);
}
