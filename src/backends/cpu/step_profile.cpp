#include "backends/cpu/step_profile.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>

#include "runtime/ir/environment.hpp"

namespace kiln::cpu {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

}  // namespace

StepProfile::StepProfile(size_t steps) {
  const std::string p = env::profile();
  if (p.empty() || p == "0") return;
  ms_.assign(steps, {});
  all_ = p == "all";
}

void StepProfile::begin_run() {
  if (runs_ == 1 && !first_run_dropped_) {
    for (auto& times : ms_) times.clear();
    runs_ = 0;
    first_run_dropped_ = true;
  }
  runs_++;
}

void StepProfile::print(const std::string& title, const std::function<std::string(size_t)>& label) const {
  if (ms_.empty() || runs_ == 0) return;
  std::vector<double> step_ms(ms_.size());
  for (size_t s = 0; s < ms_.size(); ++s) step_ms[s] = median(ms_[s]);
  // A run's total is the sum of what its steps took; a step that failed
  // leaves that run's later steps untimed, so runs are counted by the first step.
  std::vector<double> run_ms(ms_.front().size(), 0.0);
  for (const auto& times : ms_)
    for (size_t r = 0; r < std::min(times.size(), run_ms.size()); ++r) run_ms[r] += times[r];
  const double total = std::accumulate(step_ms.begin(), step_ms.end(), 0.0);
  std::vector<size_t> order(ms_.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return step_ms[a] > step_ms[b]; });
  std::fprintf(stderr, "kiln profile: %s, median %.3f ms per run over %lld runs%s; %s, each its median:\n", title.c_str(),
               median(run_ms), static_cast<long long>(runs_), first_run_dropped_ ? " after the first" : "",
               all_ ? "every step" : "slowest steps");
  for (size_t i = 0; i < (all_ ? order.size() : std::min<size_t>(order.size(), 20)); ++i)
    std::fprintf(stderr, "  %8.3f ms  %5.1f%%  %s\n", step_ms[order[i]], total > 0 ? 100 * step_ms[order[i]] / total : 0.0,
                 label(order[i]).c_str());
}

}  // namespace kiln::cpu
