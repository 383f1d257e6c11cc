#include "backends/cpu/step_profile.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>

namespace kiln::cpu {

StepProfile::StepProfile(size_t steps) {
  const char* p = std::getenv("KILN_PROFILE");
  if (!p || !*p || std::string(p) == "0") return;
  ms_.assign(steps, 0);
  all_ = std::string(p) == "all";
}

void StepProfile::begin_run() {
  if (runs_ == 1 && !first_run_dropped_) {
    std::fill(ms_.begin(), ms_.end(), 0.0);
    runs_ = 0;
    first_run_dropped_ = true;
  }
  runs_++;
}

void StepProfile::print(const std::string& title, const std::function<std::string(size_t)>& label) const {
  if (ms_.empty() || runs_ == 0) return;
  std::vector<size_t> order(ms_.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ms_[a] > ms_[b]; });
  const double total = std::accumulate(ms_.begin(), ms_.end(), 0.0);
  std::fprintf(stderr, "kiln profile: %s, %.3f ms per run over %lld runs%s; %s:\n", title.c_str(), total / double(runs_),
               static_cast<long long>(runs_), first_run_dropped_ ? " after the first" : "", all_ ? "every step" : "slowest steps");
  for (size_t i = 0; i < (all_ ? order.size() : std::min<size_t>(order.size(), 20)); ++i)
    std::fprintf(stderr, "  %8.3f ms  %5.1f%%  %s\n", ms_[order[i]] / double(runs_), total > 0 ? 100 * ms_[order[i]] / total : 0.0,
                 label(order[i]).c_str());
}

}  // namespace kiln::cpu
