// Many threads calling one Runtime through the public API: outputs as on
// one thread, no second OpenMP team for a thread that serves a model warmed
// on another, and no deadlock when a run fails, when the Runtime goes away
// with runs queued, or when a logger callback runs a model (ConcurrentRuns:
// the suite a ThreadSanitizer build runs).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <iostream>
#include <optional>
#include <thread>
#include <vector>

#include "cli/npy.hpp"
#include "kiln/kiln.hpp"
#include "model_builder.hpp"

namespace {

const std::string kDigits = std::string(KILN_SOURCE_DIR) + "/examples/digits/";

// The first `batch` test images.
kiln::Tensor images(int64_t batch) {
  static const kiln::Tensor all = kiln::npy::load(kDigits + "test_images.npy");
  kiln::Tensor t(kiln::DType::Float32, {batch, 1, 8, 8});
  std::memcpy(t.data(), all.data(), t.nbytes());
  return t;
}

bool same(const kiln::Tensor& a, const kiln::Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

int threads_in_process() {
  int n = 0;
  for ([[maybe_unused]] const auto& task : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// A deadlock ends the test binary with a message instead of hanging ctest.
void finishes_within(std::chrono::seconds limit, const std::string& what, std::function<void()> f) {
  auto done = std::async(std::launch::async, std::move(f));
  if (done.wait_for(limit) == std::future_status::ready) return done.get();
  std::cerr << what << ": not finished after " << limit.count() << " s (deadlock)\n";
  std::_Exit(1);
}

}  // namespace

TEST(ConcurrentRuns, ManyThreadsRunningMixedShapesMatchOneThread) {
  kiln::RuntimeOptions options;
  options.threads = 2;
  kiln::Runtime rt(options);
  const auto model = kiln::Model::load(rt, kDigits + "digits.onnx");
  const std::vector<int64_t> batches = {1, 2, 3, 5, 8};
  std::vector<kiln::Tensor> inputs, expected;
  for (int64_t b : batches) {
    inputs.push_back(images(b));
    expected.push_back(model.run({{"image", inputs.back()}})[0]);
  }
  std::atomic<int> mismatches{0}, errors{0};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < 40; ++i) {
        const size_t k = (t + i) % batches.size();
        try {
          if (!same(model.run({{"image", inputs[k]}})[0], expected[k])) ++mismatches;
          std::vector<kiln::Tensor> into = {kiln::Tensor(kiln::DType::Float32, {batches[k], 10})};
          model.run({{"image", inputs[k]}}, into);
          if (!same(into[0], expected[k])) ++mismatches;
        } catch (const kiln::Error& e) {
          ++errors;
        }
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  for (const auto& s : model.specializations()) EXPECT_EQ(s.runs, 1 + 4 * 40 * 2 / int64_t(batches.size())) << s.key;
}

// A service warms its model on the main thread and serves it from a worker:
// the worker's runs execute on the Runtime's one OpenMP team, so serving
// starts no threads besides the worker itself (each thread that ran
// oneDNN used to get a team of its own, and with more team threads than
// CPUs libgomp sleeps in every wait: lenet ran 4.5x slower).
TEST(ConcurrentRuns, ServingFromAnotherThreadThanTheWarmingOneStartsNoTeam) {
  kiln::RuntimeOptions options;
  options.threads = 2;
  kiln::Runtime rt(options);
  const auto model = kiln::Model::load(rt, kDigits + "digits.onnx");
  const kiln::Tensor x = images(8);
  const kiln::Tensor expected = model.run({{"image", x}})[0];
  const int warmed = threads_in_process();
  std::thread([&] {
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(same(model.run({{"image", x}})[0], expected));
    EXPECT_LE(threads_in_process(), warmed + 1) << "the serving thread started threads of its own";
  }).join();
}

// Indices are data: a run with a bad one fails with its own error while
// the runs queued around it go on.
TEST(ConcurrentRuns, AFailingRunHoldsUpNoOtherRun) {
  kiln::test::ModelBuilder b;
  b.input("data", onnx::TensorProto::FLOAT, {5, 4}).input("idx", onnx::TensorProto::INT64, {3});
  b.output("y", onnx::TensorProto::FLOAT, {3, 4});
  b.node("Gather", {"data", "idx"}, {"y"}, "pick_rows");
  const std::string bytes = b.bytes();
  kiln::Runtime rt;
  const auto model = kiln::Model::load_from_memory(rt, bytes.data(), bytes.size());
  std::vector<float> values(20);
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i);
  const auto data = kiln::Tensor::from_vector<float>(kiln::DType::Float32, {5, 4}, values);
  const auto good = kiln::Tensor::from_vector<int64_t>(kiln::DType::Int64, {3}, {4, 0, 2});
  const auto bad = kiln::Tensor::from_vector<int64_t>(kiln::DType::Int64, {3}, {4, 7, 2});
  const kiln::Tensor expected = model.run({{"data", data}, {"idx", good}})[0];
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 30; ++i) {
        const bool fails = (t + i) % 2 == 0;
        try {
          const kiln::Tensor y = model.run({{"data", data}, {"idx", fails ? bad : good}})[0];
          if (fails || !same(y, expected)) ++wrong;
        } catch (const kiln::Error& e) {
          if (!fails || e.code() != kiln::ErrorCode::InvalidArgument || !std::strstr(e.what(), "pick_rows")) ++wrong;
        }
      }
    });
  finishes_within(std::chrono::seconds(120), "failing runs", [&] {
    for (auto& t : threads) t.join();
  });
  EXPECT_EQ(wrong.load(), 0);
}

// The threads' Model copies keep what a run needs: the Runtime and the
// Model they were made from may go while runs are queued.
TEST(ConcurrentRuns, RuntimeAndModelMayGoWhileRunsAreQueued) {
  const kiln::Tensor x = images(3);
  std::atomic<int> started{0}, wrong{0};
  std::vector<std::thread> threads;
  {
    kiln::RuntimeOptions options;
    options.threads = 2;
    kiln::Runtime rt(options);
    const auto model = kiln::Model::load(rt, kDigits + "digits.onnx");
    const kiln::Tensor expected = model.run({{"image", x}})[0];
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, model, expected] {
        for (int i = 0; i < 50; ++i) {
          if (!same(model.run({{"image", x}})[0], expected)) ++wrong;
          if (i == 0) ++started;
        }
      });
    while (started.load() < 4) std::this_thread::yield();
  }
  finishes_within(std::chrono::seconds(120), "runs after the Runtime went", [&] {
    for (auto& t : threads) t.join();
  });
  EXPECT_EQ(wrong.load(), 0);
}

// A logger that runs a model when told about a compile: the shapes just
// compiled, and new ones, whose compile logs again from inside the logger.
TEST(ConcurrentRuns, ALoggerCallbackMayRunModels) {
  finishes_within(std::chrono::seconds(120), "runs from a logger", [] {
    std::optional<kiln::Model> model;
    std::vector<std::string> messages;
    int depth = 0;
    kiln::RuntimeOptions options;
    options.threads = 2;
    options.log_level = kiln::LogLevel::Debug;
    options.logger = [&](kiln::LogLevel, const std::string& message) {
      messages.push_back(message);
      if (!model || depth > 0 || message.find("compiled") == std::string::npos) return;
      ++depth;
      EXPECT_EQ(model->run({{"image", images(1)}})[0].shape(), (kiln::Shape{1, 10}));
      EXPECT_EQ(model->run({{"image", images(4)}})[0].shape(), (kiln::Shape{4, 10}));
      --depth;
    };
    kiln::Runtime rt(options);
    model = kiln::Model::load(rt, kDigits + "digits.onnx");
    EXPECT_EQ(model->run({{"image", images(1)}})[0].shape(), (kiln::Shape{1, 10}));
    EXPECT_EQ(model->specializations().size(), 2u);
  });
}
