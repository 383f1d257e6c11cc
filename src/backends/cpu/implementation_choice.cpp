#include "backends/cpu/implementation_choice.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>

#include "backends/cpu/onednn_kernel.hpp"
#include "backends/cpu/thread_budget.hpp"
#include "runtime/ir/environment.hpp"
#include "runtime/ir/error.hpp"
#include "runtime/ir/huge_pages.hpp"

namespace kiln::cpu {

TrialPolicy trial_policy(const backends::CompileOptions& options) {
  const std::string v = options.implementation_trials ? *options.implementation_trials : env::implementation_trials();
  if (v == "off") return TrialPolicy::Off;
  if (v == "timed") return TrialPolicy::Timed;
  if (v == "other") return TrialPolicy::Other;
  ir::fail(ir::ErrorKind::InvalidArgument, "implementation_trials '" + v + "': expected off, timed or other");
}

namespace {

using md = dnnl::memory::desc;

// The same step on oneDNN's next jit implementation of the operation, made
// and with its weights reordered; null if there is none, or if it would read
// or write any buffer in another layout than `current` (the memory plan and
// the neighbouring steps are fixed by now) or need a larger scratchpad.
// Never the gemm-based ones: oneDNN generates its GEMM kernels on their
// first run in a process (tens of milliseconds), and the reference ones.
std::unique_ptr<OneDnnKernel> other_implementation(const OneDnnKernel& current, const ImplementationTrial& trial) {
  const dnnl::primitive_desc_base& pd = current.descriptor();
  if (pd.get_kind() != dnnl::primitive::kind::convolution && pd.get_kind() != dnnl::primitive::kind::deconvolution)
    return nullptr;
  const void* op_desc = nullptr;
  const_dnnl_primitive_attr_t attr = nullptr;
  dnnl::error::wrap_c_api(dnnl_primitive_desc_query(pd.get(), dnnl_query_op_d, 0, &op_desc), "query operation descriptor");
  dnnl::error::wrap_c_api(dnnl_primitive_desc_get_attr(pd.get(), &attr), "query attributes");
  // The operation as described left the activations' layouts to oneDNN
  // (`any`): the other implementation must take the ones chosen. (A
  // deconvolution's descriptor is a convolution's.)
  dnnl_convolution_desc_t fixed;
  std::memcpy(&fixed, op_desc, sizeof fixed);
  fixed.src_desc = pd.src_desc(0).data;
  fixed.dst_desc = pd.dst_desc(0).data;
  OneDnnImplementations all(&fixed, attr);
  do {
    const dnnl::primitive_desc_base other = all.descriptor();
    const std::string_view name = other.impl_info_str();
    if (name.rfind("jit", 0) != 0 || name == pd.impl_info_str()) continue;
    std::vector<std::pair<int, md>> runtime = current.runtime_args();
    // The arena holds the current one's scratchpad (if any): a smaller one fits in it.
    size_t scratch_room = 0;
    bool fits = true;
    for (auto& [id, desc] : runtime) {
      if (id == OneDnnKernel::kNotBound) continue;
      const md want = other.query_md(dnnl::query::exec_arg_md, id);
      if (id == DNNL_ARG_SCRATCHPAD) {
        scratch_room = desc.get_size();
        if (want.get_size() > 0) desc = want;
      } else if (want != desc) {
        fits = false;
      }
    }
    if (other.query_md(dnnl::query::scratchpad_md).get_size() > scratch_room) fits = false;
    std::unordered_map<int, dnnl::memory> constants;
    for (const auto& [id, memory] : current.constant_args()) {
      const md want = other.query_md(dnnl::query::exec_arg_md, id);
      if (id == DNNL_ARG_WEIGHTS) {
        dnnl::memory weights(want, cpu_engine());
        ir::advise_huge_pages(weights.get_data_handle(), want.get_size());
        constants[id] = weights;
      } else if (want == memory.get_desc()) {
        constants[id] = memory;
      } else {
        fits = false;
      }
    }
    if (!fits || !constants.count(DNNL_ARG_WEIGHTS)) continue;
    reorder_constant(trial.user_weights, trial.weights, constants[DNNL_ARG_WEIGHTS]);
    auto kernel = std::make_unique<OneDnnKernel>(other, std::move(runtime), std::move(constants), current.sum_from(), all.index(),
                                                 current.threads());
    kernel->create_primitive();
    return kernel;
  } while (all.next());
  return nullptr;
}

// Times kernels of one step, one run at a time on the budget's threads as a
// run does, over zeroed buffers of the step's layouts.
class Stopwatch {
 public:
  Stopwatch(const OneDnnKernel& step, ThreadBudget& budget) : budget_(budget) {
    for (const auto& [id, desc] : step.runtime_args()) {
      buffers_.emplace_back(desc, cpu_engine());
      std::memset(buffers_.back().get_data_handle(), 0, desc.get_size());
      args_.push_back(buffers_.back().get_data_handle());
    }
  }
  template <typename F>
  void hold(const F& f) {
    budget_.hold(f);
  }
  double once(const OneDnnKernel& k) {
    const auto start = std::chrono::steady_clock::now();
    k.run(args_.data());
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }

 private:
  ThreadBudget& budget_;
  std::vector<dnnl::memory> buffers_;
  std::vector<void*> args_;
};

// About the least a convolution's run can take on `threads` threads, in ms:
// its multiply-adds at 100 GFLOP/s a thread (about what oneDNN reaches on
// resnet50 here), known without running it.
double least_run_ms(const OneDnnKernel& k, int threads) {
  const dnnl::primitive_desc_base& pd = k.descriptor();
  auto count = [](const dnnl::memory::dims& d, size_t from) {
    double n = 1;
    for (size_t i = from; i < d.size(); ++i) n *= double(d[i]);
    return n;
  };
  const dnnl::memory::dims src = pd.src_desc(0).dims(), dst = pd.dst_desc(0).dims();
  // Per output value of a convolution (per input value of a deconvolution),
  // every weight of its group.
  const double points = std::max(count(src, 2), count(dst, 2)) * double(dst[0]);
  return 2 * points * count(pd.weights_desc(0).dims(), 0) / (threads * 1e8);
}

// Whether `k` is worth a trial on `threads` threads. Making oneDNN's brgemm
// convolution takes time in proportion to the output's width (64 channels,
// kernel 3, 1-D: 1 ms at 32 steps, 2 at 256, 6 at 1000, 22 at 4000; 2-D at
// 1000 wide: 23 ms), and images up to 224 wide measured 1-2 ms. And the
// trial (making the other primitive, reordering its weights, about six
// runs) must cost less than making the current one again costs a warm start.
bool worth_a_trial(const OneDnnKernel& k, int threads) {
  return k.descriptor().dst_desc(0).dims().back() >= 256 && k.creation_ms() >= 5 * least_run_ms(k, threads);
}

// Whether `other` should replace `current`: the fastest of alternating runs
// of each, more rounds while the two are within 10% of each other and the
// rounds cost less than making the current one again does. Within 2% (below
// the noise of a run here) the one that is cheaper to make wins: a warm start
// makes it in every process.
bool other_wins(const OneDnnKernel& current, const OneDnnKernel& other, Stopwatch& watch) {
  double best[2] = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
  watch.hold([&] {
    watch.once(current);  // the first runs fault pages in
    watch.once(other);
    double spent = 0;
    for (int round = 0; round < 10; ++round) {
      for (int k = 0; k < 2; ++k) {
        const double ms = watch.once(k == 0 ? current : other);
        best[k] = std::min(best[k], ms);
        spent += ms;
      }
      const bool close = best[1] < 1.1 * best[0] && best[0] < 1.1 * best[1];
      if (!close || (round >= 1 && spent >= current.creation_ms())) break;
    }
  });
  const double slack = other.creation_ms() < current.creation_ms() ? 1.02 : 1.0;
  return best[1] <= slack * best[0];
}

}  // namespace

int choose_implementations(Program& program, const std::vector<ImplementationTrial>& trials, ThreadBudget& budget,
                           TrialPolicy policy) {
  if (policy == TrialPolicy::Off) return 0;
  int changed = 0;
  for (const ImplementationTrial& trial : trials) {
    Step& step = program.steps.at(trial.step);
    auto* current = dynamic_cast<OneDnnKernel*>(step.kernel.get());
    if (!current || (policy == TrialPolicy::Timed && !worth_a_trial(*current, budget.threads))) continue;
    std::unique_ptr<OneDnnKernel> other;
    try {
      other = other_implementation(*current, trial);
    } catch (const dnnl::error& e) {
      ir::fail(ir::ErrorKind::Internal, step.label + ": trying another oneDNN implementation failed: " + e.what());
    }
    if (!other) continue;
    if (policy == TrialPolicy::Timed) {
      Stopwatch watch(*current, budget);
      if (!other_wins(*current, *other, watch)) continue;
    }
    step.kernel = std::move(other);
    ++changed;
  }
  return changed;
}

}  // namespace kiln::cpu
