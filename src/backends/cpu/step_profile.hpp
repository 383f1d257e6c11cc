#pragma once
// KILN_PROFILE: each step's time summed over runs and printed, slowest
// first, when the executable goes away. The first run is left out once a
// second one starts: it faults in memory and warms caches, and averaged in it
// would hide the steady state. Not thread-safe: callers serialise runs.
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
  void add(size_t step, double ms) { ms_[step] += ms; }
  // To stderr: "kiln profile: <title>, ..." then the 20 slowest steps
  // (every step with KILN_PROFILE=all), each described by `label`.
  void print(const std::string& title, const std::function<std::string(size_t)>& label) const;

 private:
  std::vector<double> ms_;
  int64_t runs_ = 0;
  bool first_run_dropped_ = false;
  bool all_ = false;
};

}  // namespace kiln::cpu
