// Google Benchmark suite over ONNX model files: steady-state latency at batch
// 1 and 8, the cost of load + first run (which includes specialization), and
// the first run alone with what the compile reports about itself.
//
//   build/bench/kiln_model_benchmarks [--models DIR] [--backend NAME] [benchmark flags]
//
// DIR defaults to $KILN_BENCH_MODELS or bench/models (bench/build_zoo.py
// writes it). Symbolic dimensions other than the batch take --dim-default.
#include <benchmark/benchmark.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>

#include "kiln/kiln.hpp"
#include "random_inputs.hpp"

namespace fs = std::filesystem;

namespace {

struct Config {
  std::string models_dir;
  std::string backend = "cpu";  // the runtime's default; --backend reference for the interpreter
  int threads = 0;
  int64_t dim_default = 128;  // e.g. the encoder's sequence length
};
Config config;

// Random inputs for the declared shapes: a symbolic first dim takes
// `batch`, other symbolic dims dim_default.
kiln_bench::Inputs make_inputs(const kiln::Model& model, int64_t batch) {
  return kiln_bench::random_inputs(model, [&](size_t d) { return d == 0 ? batch : config.dim_default; });
}

kiln::Runtime make_runtime() {
  kiln::RuntimeOptions opts;
  opts.backend = config.backend;
  opts.threads = config.threads;
  opts.log_level = kiln::LogLevel::Error;
  return kiln::Runtime(opts);
}

void latency(benchmark::State& state, std::string path, int64_t batch) {
  try {
    kiln::Runtime runtime = make_runtime();
    kiln::Model model = kiln::Model::load(runtime, path);
    auto inputs = make_inputs(model, batch);
    model.run(inputs);  // specialize outside the timed loop
    for (auto _ : state) benchmark::DoNotOptimize(model.run(inputs));
    state.SetItemsProcessed(state.iterations() * batch);
  } catch (const kiln::Error& e) {
    state.SkipWithError(e.what());
  }
}

// oneDNN keeps created primitives in a process-wide cache, so from the second
// iteration on every convolution would be a cache hit that a new process never
// gets. Shrinking the capacity to zero evicts everything; restoring it leaves
// the cache as empty as at startup (identical layers within one model still
// share, as they would in a new process).
void empty_onednn_cache() {
  const int capacity = dnnl::get_primitive_cache_capacity();
  dnnl::set_primitive_cache_capacity(0);
  dnnl::set_primitive_cache_capacity(capacity);
}

void first_run(benchmark::State& state, std::string path) {
  try {
    for (auto _ : state) {
      state.PauseTiming();
      empty_onednn_cache();
      state.ResumeTiming();
      kiln::Runtime runtime = make_runtime();
      kiln::Model model = kiln::Model::load(runtime, path);
      benchmark::DoNotOptimize(model.run(make_inputs(model, 1)));
    }
  } catch (const kiln::Error& e) {
    state.SkipWithError(e.what());
  }
}

// The first run of a new shape on a freshly loaded model: specialization
// (graph passes, lowering, code generation, oneDNN primitive creation) plus
// one execution. Loading stays outside the timed region so the time is what a
// server pays when it meets a new shape; compile_ms is the specialization
// alone, as the runtime measured it.
void compile(benchmark::State& state, std::string path, int64_t batch) {
  try {
    double compile_ms = 0;
    kiln::SpecializationStats last;
    // What the last iteration made is destroyed with the timer paused, at the
    // top of the next one: teardown is not part of the compile.
    std::optional<kiln::Runtime> runtime;
    std::optional<kiln::Model> model;
    std::vector<std::pair<std::string, kiln::Tensor>> inputs;
    std::vector<kiln::Tensor> outputs;
    auto record = [&] {
      const auto specs = model->specializations();
      if (specs.size() != 1)
        throw kiln::Error(kiln::ErrorCode::Internal,
                          "expected one specialization after the first run, got " + std::to_string(specs.size()));
      last = specs[0];
      compile_ms += last.compile_ms;
    };
    for (auto _ : state) {
      state.PauseTiming();
      if (model) record();
      outputs.clear();
      model.reset();
      runtime.reset();
      empty_onednn_cache();
      runtime.emplace(make_runtime());
      model.emplace(kiln::Model::load(*runtime, path));
      inputs = make_inputs(*model, batch);
      state.ResumeTiming();
      outputs = model->run(inputs);
    }
    if (model) record();
    constexpr double MiB = 1024.0 * 1024.0;
    state.counters["compile_ms"] = compile_ms / double(state.iterations());
    state.counters["compiled_nodes"] = double(last.compiled_nodes);
    state.counters["fallback_nodes"] = double(last.fallback_nodes);
    state.counters["arena_MiB"] = double(last.arena_bytes) / MiB;
    state.counters["intermediates_MiB"] = double(last.intermediate_bytes) / MiB;
    state.SetLabel(last.backend);
  } catch (const kiln::Error& e) {
    state.SkipWithError(e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* env = std::getenv("KILN_BENCH_MODELS");
  config.models_dir = env ? env : "bench/models";
  // Our flags first; the rest goes to Google Benchmark.
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    auto value = [&](const char* flag) -> const char* {
      return std::strcmp(argv[i], flag) == 0 && i + 1 < argc ? argv[++i] : nullptr;
    };
    if (const char* v = value("--models"))
      config.models_dir = v;
    else if (const char* v = value("--backend"))
      config.backend = v;
    else if (const char* v = value("--threads"))
      config.threads = std::atoi(v);
    else if (const char* v = value("--dim-default"))
      config.dim_default = std::atoll(v);
    else
      rest.push_back(argv[i]);
  }
  std::vector<fs::path> models;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(config.models_dir, ec))
    if (e.path().extension() == ".onnx") models.push_back(e.path());
  if (models.empty()) {
    std::cerr << "error: no .onnx files in '" << config.models_dir
              << "'; run /usr/bin/python3 bench/build_zoo.py or pass --models DIR\n";
    return 1;
  }
  std::sort(models.begin(), models.end());
  for (const auto& m : models) {
    const std::string name = m.stem().string();
    for (int64_t batch : {1, 8})
      benchmark::RegisterBenchmark(("latency/" + name + "/batch:" + std::to_string(batch)).c_str(), latency, m.string(), batch)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    benchmark::RegisterBenchmark(("compile/" + name + "/batch:1").c_str(), compile, m.string(), int64_t(1))
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("first_run/" + name).c_str(), first_run, m.string())
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->Iterations(3);
  }
  int rest_argc = int(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
