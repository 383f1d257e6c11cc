#pragma once
// Which of oneDNN's implementations a convolution keeps. oneDNN 2.6 prefers
// its brgemm kernels, which generate code for the shape when the primitive is
// made; for some shapes that takes far longer than running it, and a warm
// start pays it again in every process (a 1-D convolution over 4000 steps: 22
// ms to make, 0.35 ms to run; its older jit kernel: 1 ms to make). Where the
// output is wide and making the preferred primitive took long against its
// run, the compile also makes the next jit implementation, times both on the
// run's threads and keeps the faster; the cache entry records which one, so a
// warm start makes only that.
#include <cstddef>
#include <vector>

#include <dnnl.hpp>

#include "backends/backend.hpp"
#include "backends/cpu/program.hpp"

namespace kiln::cpu {

struct ThreadBudget;

// A step whose oneDNN primitive could take another implementation: its
// weights as the graph holds them, to reorder into that one's layout. The
// pointer must stay valid until choose_implementations() returns.
struct ImplementationTrial {
  size_t step = 0;
  dnnl::memory::desc user_weights;
  const void* weights = nullptr;
};

enum class TrialPolicy {
  Off,    // keep what oneDNN prefers
  Timed,  // try another where the preferred one is wide and took long to make; keep the faster
  Other,  // take another wherever one fits (for the tests: every such path runs)
};

// CompileOptions::implementation_trials, else KILN_IMPLEMENTATION_TRIALS:
// off, timed (the default) or other. Throws ir::Error(InvalidArgument) for
// any other value.
TrialPolicy trial_policy(const backends::CompileOptions& options);

// Decides each trial of `program` (whose primitives are made) by `policy`,
// timing on `budget`'s threads as a run does. Returns the steps that changed
// implementation.
int choose_implementations(Program& program, const std::vector<ImplementationTrial>& trials, ThreadBudget& budget,
                           TrialPolicy policy);

}  // namespace kiln::cpu
