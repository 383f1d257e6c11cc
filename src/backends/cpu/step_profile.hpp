#pragma once
// KILN_PROFILE: each step's time in every run, printed as medians, slowest
// first, when the executable goes away. Medians, because a run that another
// process interrupts would move a mean by more than the differences being
// looked for. The first run is left out once a second one starts: it faults
// in memory and warms caches. Not thread-safe: callers serialise runs.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kiln::cpu {

class StepProfile {
 public:
  // Empty (enabled() false) unless KILN_PROFILE is set and not "0".
  explicit StepProfile(size_t steps);
  bool enabled() const { return !ms_.empty(); }
  void begin_run();
  void add(size_t step, double ms) { ms_[step].push_back(ms); }
  // To stderr: "kiln profile: <title>, ..." then the 20 slowest steps
  // (every step with KILN_PROFILE=all), each described by `label`.
  void print(const std::string& title, const std::function<std::string(size_t)>& label) const;

 private:
  std::vector<std::vector<double>> ms_;  // per step, one time per run
  int64_t runs_ = 0;
  bool first_run_dropped_ = false;
  bool all_ = false;
};

}  // namespace kiln::cpu
