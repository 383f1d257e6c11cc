// Serving concurrent callers: one Runtime and one model, batch 1, called by
// several request threads at once; and a model warmed on the main thread
// and then served from another thread, against served from the main thread.
//
//   build/bench/kiln_serving_bench [--models DIR] [--model lenet,mobilenet_v2]
//       [--requesters 1,2,4] [--seconds 2] [--rounds 3] [--threads N]
//
// Every configuration runs once per round, in the same order, and each
// column is the median over the rounds (the machines we measure on are
// shared and noisy: compare within one invocation).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "kiln/kiln.hpp"
#include "random_inputs.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using kiln_bench::Inputs;

// Symbolic dims 1.
Inputs make_inputs(const kiln::Model& model) {
  return kiln_bench::random_inputs(model, [](size_t) { return int64_t(1); });
}

Clock::duration to_duration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1, size_t(p / 100 * double(sorted.size())))];
}

struct Latencies {
  double runs_per_s = 0, p50_ms = 0, p99_ms = 0, worst_ms = 0;
  double fewest_share = 0;  // the slowest requester's share of the runs, times the requesters (1: fair)
};

// `requesters` threads call run back to back for `seconds`.
Latencies serve(const kiln::Model& model, const Inputs& inputs, int requesters, double seconds) {
  std::vector<std::vector<double>> ms(static_cast<size_t>(requesters));
  std::vector<std::thread> threads;
  const Clock::time_point start = Clock::now(), until = start + to_duration(seconds);
  for (int r = 0; r < requesters; ++r)
    threads.emplace_back([&, r] {
      for (auto t = Clock::now(); t < until;) {
        model.run(inputs);
        const auto end = Clock::now();
        ms[size_t(r)].push_back(std::chrono::duration<double, std::milli>(end - t).count());
        t = end;
      }
    });
  for (auto& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  size_t fewest = SIZE_MAX;
  for (const auto& m : ms) {
    all.insert(all.end(), m.begin(), m.end());
    fewest = std::min(fewest, m.size());
  }
  std::sort(all.begin(), all.end());
  Latencies l;
  l.runs_per_s = double(all.size()) / elapsed;
  l.p50_ms = percentile(all, 50);
  l.p99_ms = percentile(all, 99);
  l.worst_ms = all.empty() ? 0 : all.back();
  l.fewest_share = all.empty() ? 0 : double(fewest) * requesters / double(all.size());
  return l;
}

// Runs per second of back-to-back runs on the calling thread.
double runs_per_second(const kiln::Model& model, const Inputs& inputs, double seconds) {
  int64_t n = 0;
  const Clock::time_point start = Clock::now(), until = start + to_duration(seconds);
  while (Clock::now() < until) {
    model.run(inputs);
    ++n;
  }
  return double(n) / std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<int> parse_ints(const std::string& list) {
  std::vector<int> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoi(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "Kiln serving benchmark: request threads on one Runtime, and a model served from another thread than the one that warmed "
      "it");
  const char* env = std::getenv("KILN_BENCH_MODELS");
  std::string models_dir = env ? env : "bench/models", names = "lenet,mobilenet_v2", requesters_list = "1,2,4";
  double seconds = 2;
  int rounds = 3, threads = 0;
  app.add_option("--models", models_dir, "directory of .onnx files ($KILN_BENCH_MODELS, else bench/models)");
  app.add_option("--model", names, "comma-separated model names in it");
  app.add_option("--requesters", requesters_list, "request thread counts");
  app.add_option("--seconds", seconds, "per configuration and round");
  app.add_option("--rounds", rounds, "each column is the median over the rounds");
  app.add_option("--threads", threads, "the Runtime's thread budget (0: every usable core)");
  CLI11_PARSE(app, argc, argv);
  const std::vector<int> requesters = parse_ints(requesters_list);

  std::stringstream list(names);
  for (std::string name; std::getline(list, name, ',');) {
    const std::string path = models_dir + "/" + name + ".onnx";
    if (!std::filesystem::exists(path)) {
      std::fprintf(stderr, "error: %s not found (bench/build_zoo.py writes the zoo)\n", path.c_str());
      return 1;
    }
    kiln::RuntimeOptions options;
    options.threads = threads;
    options.cache = false;
    options.log_level = kiln::LogLevel::Error;
    kiln::Runtime runtime(options);
    const kiln::Model model = kiln::Model::load(runtime, path);
    const Inputs inputs = make_inputs(model);
    model.run(inputs);  // warmed on the main thread: compiled, and its first run

    std::map<int, std::vector<Latencies>> served;
    std::vector<double> main_rate, worker_rate;
    for (int round = 0; round < rounds; ++round) {
      main_rate.push_back(runs_per_second(model, inputs, seconds));
      std::thread([&] { worker_rate.push_back(runs_per_second(model, inputs, seconds)); }).join();
      for (int r : requesters) served[r].push_back(serve(model, inputs, r, seconds));
    }
    std::printf("%s, %d threads, %d rounds of %.1f s (medians)\n", name.c_str(), runtime.threads(), rounds, seconds);
    const double m = median(main_rate), w = median(worker_rate);
    std::printf("  warmed on main: %.0f runs/s served from main, %.0f from another thread (%.2fx)\n", m, w, m / w);
    std::printf("  %10s %10s %9s %9s %9s %12s\n", "requesters", "runs/s", "p50 ms", "p99 ms", "worst ms", "fewest share");
    for (int r : requesters) {
      auto column = [&](double Latencies::* field) {
        std::vector<double> v;
        for (const auto& l : served[r]) v.push_back(l.*field);
        return median(v);
      };
      std::printf("  %10d %10.0f %9.3f %9.3f %9.3f %12.2f\n", r, column(&Latencies::runs_per_s), column(&Latencies::p50_ms),
                  column(&Latencies::p99_ms), column(&Latencies::worst_ms), column(&Latencies::fewest_share));
    }
  }
  return 0;
}
