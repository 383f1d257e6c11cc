#pragma once
// Running small hostile models as the runtime would, for the sweep over every
// operator (hostile_shapes_test.cpp) and the cases it cannot reach
// (hostile_work_test.cpp): each must run or fail with a kiln error; a crash
// or a hang aborts the binary naming the case.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "backends/partitioner.hpp"
#include "backends/reference/reference_executor.hpp"
#include "runtime/ir/error.hpp"
#include "runtime/ir/shape_inference.hpp"
#include "runtime/onnx/onnx_importer.hpp"
#include "runtime/passes/passes.hpp"

namespace kiln::test {

// A case that takes longer has a loop that its inputs do not bound (the
// first compile on the portable kernels takes seconds).
constexpr unsigned kCaseSeconds = 60;
// Every tensor of these models is tiny: an allocation near this size is one
// that an attribute or a constant asked for. Under this cap on the address
// space it fails at once, as it would on a machine without the memory (a
// clean "out of memory" error), instead of filling this one's.
constexpr rlim_t kMemoryLimit = rlim_t(4) << 30;

// ---- What a crash or a hang reports --------------------------------------------

inline char g_current_case[512];

inline void write_current_case(const char* what) {
  // Only async-signal-safe calls here.
  const char* parts[] = {"\nhostile model test: ", what, " in case ", g_current_case, "\n"};
  for (const char* p : parts) {
    ssize_t ignored = write(2, p, strlen(p));
    (void)ignored;
  }
}

inline void on_fatal_signal(int sig) {
  write_current_case(sig == SIGALRM   ? "hang"
                     : sig == SIGSEGV ? "SIGSEGV"
                     : sig == SIGBUS  ? "SIGBUS"
                     : sig == SIGFPE  ? "SIGFPE"
                     : sig == SIGILL  ? "SIGILL"
                                      : "SIGABRT");
  signal(SIGABRT, SIG_DFL);
  abort();
}

// For a test's duration: crashes and hangs name the case, and the address
// space is capped. Restored after, for the tests that share the binary.
class Guards {
 public:
  Guards() {
    for (int sig : kSignals) saved_.push_back(signal(sig, on_fatal_signal));
    // AddressSanitizer's shadow memory takes terabytes of address space: no
    // cap there (run with ASAN_OPTIONS=allocator_may_return_null=1 and
    // max_allocation_size_mb=4096 instead).
#if !defined(__SANITIZE_ADDRESS__)
    if (getrlimit(RLIMIT_AS, &saved_limit_) == 0 && saved_limit_.rlim_cur > kMemoryLimit) {
      rlimit capped = saved_limit_;
      capped.rlim_cur = kMemoryLimit;
      capped_ = setrlimit(RLIMIT_AS, &capped) == 0;
    }
#endif
  }
  ~Guards() {
    alarm(0);
    if (capped_) setrlimit(RLIMIT_AS, &saved_limit_);
    for (size_t i = 0; i < saved_.size(); ++i) signal(kSignals[i], saved_[i]);
  }
  Guards(const Guards&) = delete;
  Guards& operator=(const Guards&) = delete;

 private:
  static constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM};
  std::vector<sighandler_t> saved_;
  rlimit saved_limit_{};
  bool capped_ = false;
};

struct SweepCase {
  std::string name;
  std::string bytes;
  std::map<std::string, ir::Tensor> inputs;
  bool folds = false;             // every input a constant: the reference kernel runs it while the model loads
  bool hostile_constant = false;  // a constant input holds a hostile value: a model of its own
};

struct Tally {
  int64_t cases = 0, ran = 0, refused = 0, bad = 0;
};

// Runs cases on one configuration ("reference", "cpu" or "cpu:portable") as
// the runtime would: loaded as Model::load does (shape inference with
// folding), then specialized, compiled and run as Model::run does. A kiln
// error is a clean refusal. Consecutive cases of one model (hostile values of
// its graph inputs) share one compile, as runs of one model do.
class Runner {
 public:
  explicit Runner(const std::string& config) : config_(config) {
    const size_t colon = config.find(':');
    backend_ = kiln::backends::make_backend(config.substr(0, colon), 2);
    fallback_ = backend_->fallback();
    if (colon != std::string::npos) options_.kernels = config.substr(colon + 1);
  }

  void run(const SweepCase& c) {
    // What folds at load runs the same reference kernels on every backend.
    if (c.folds && config_ != "reference") return;
    // Constant sizes and axes reach the same lowering and checks on the
    // portable kernels as on the native ones, and there each model's compile
    // links their library: hostile values in graph inputs (one compile) only.
    if (c.hostile_constant && options_.kernels == "portable") return;
    ++tally.cases;
    std::string error;
    if (attempt(c, &error))
      ++tally.ran;
    else if (error.empty())
      ++tally.bad;
    else
      ++tally.refused;
  }

  // Runs `c`: its outputs, or nullopt and the kiln error that refused it in
  // `error`. Anything else (another exception, an internal error) fails the
  // test and leaves `error` empty.
  std::optional<std::vector<ir::Tensor>> attempt(const SweepCase& c, std::string* error) {
    snprintf(g_current_case, sizeof g_current_case, "%s on %s", c.name.c_str(), config_.c_str());
    alarm(kCaseSeconds);
    std::optional<std::vector<ir::Tensor>> outputs;
    try {
      if (c.bytes != compiled_bytes_) compile(c);
      outputs = executable_->run(c.inputs);
    } catch (const kiln::ir::Error& e) {
      // A tensor that the capped address space cannot hold is refused as on a
      // machine without the memory; any other internal error is a bug.
      const bool out_of_memory = std::string(e.what()).find("out of memory allocating") != std::string::npos;
      if (e.kind() == kiln::ir::ErrorKind::Internal && !out_of_memory)
        ADD_FAILURE() << c.name << " on " << config_ << ": internal error: " << e.what();
      else
        *error = e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << c.name << " on " << config_ << ": not a kiln error: " << e.what();
    }
    alarm(0);
    return outputs;
  }

  Tally tally;

 private:
  void compile(const SweepCase& c) {
    compiled_bytes_.clear();
    executable_.reset();
    kiln::ir::Model model = kiln::onnx_import::import_model_bytes(c.bytes.data(), c.bytes.size(), c.name);
    try {  // Model::load infers the outputs' shapes, and only warns if it cannot
      kiln::ir::infer_shapes(*model.graph, {}, kiln::ref::constant_evaluator());
    } catch (const kiln::ir::Error&) {
    }
    std::map<std::string, std::pair<ir::DType, ir::Dims>> shapes;
    for (const auto& [n, t] : c.inputs) shapes[n] = {t.dtype(), t.dims()};
    auto spec = kiln::ir::specialize(*model.graph, shapes, kiln::ref::constant_evaluator());
    auto graph = std::make_shared<kiln::ir::Graph>(*model.graph);
    kiln::passes::optimize_specialization(*graph, spec, kiln::ref::constant_evaluator());
    std::vector<const kiln::backends::Backend*> order = {backend_.get()};
    if (fallback_) order.push_back(fallback_.get());
    executable_ = kiln::backends::compile_partitioned(graph, spec, order, options_).executable;
    compiled_bytes_ = c.bytes;
  }

  std::string config_;
  std::unique_ptr<kiln::backends::Backend> backend_, fallback_;
  kiln::backends::CompileOptions options_;
  std::string compiled_bytes_;
  std::unique_ptr<kiln::backends::Executable> executable_;
};

// "cpu:portable" -> "cpu_portable", for test names.
inline std::string config_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  std::replace(s.begin(), s.end(), ':', '_');
  return s;
}

}  // namespace kiln::test
