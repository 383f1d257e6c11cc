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
#include "runtime/ir/error.hpp"
#include "runtime/ir/huge_pages.hpp"

namespace kiln::cpu {

TrialPolicy trial_policy() {
  static const TrialPolicy policy = [] {
    const char* e = std::getenv("KILN_IMPLEMENTATION_TRIALS");
    const std::string_view v = e ? e : "";
    if (v.empty() || v == "timed") return TrialPolicy::Timed;
    if (v == "off") return TrialPolicy::Off;
    if (v == "other") return TrialPolicy::Other;
    throw ir::Error(ir::ErrorKind::InvalidArgument,
                    "KILN_IMPLEMENTATION_TRIALS='" + std::string(v) + "': expected off, timed or other");
  }();
  return policy;
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
  if (pd.get_kind() != dnnl::primitive::kind::convolution && pd.get_kind() != dnnl::primitive::kind::deconvolution) return nullptr;
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
    bool fits = true;
    for (auto& [id, desc] : runtime) {
      if (id == OneDnnKernel::kNotBound) continue;
      const md want = other.query_md(dnnl::query::exec_arg_md, id);
      if (id == DNNL_ARG_SCRATCHPAD) {
        // The arena holds the current one's: a smaller one fits in it.
        if (want.get_size() > desc.get_size()) fits = false;
        else if (want.get_size() > 0) desc = want;
      } else if (want != desc) {
        fits = false;
      }
    }
    const md scratch = other.query_md(dnnl::query::scratchpad_md);
    const bool has_scratch = std::any_of(runtime.begin(), runtime.end(), [](const auto& r) { return r.first == DNNL_ARG_SCRATCHPAD; });
    if (scratch.get_size() > 0 && !has_scratch) fits = false;
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
    auto kernel = std::make_unique<OneDnnKernel>(other, std::move(runtime), std::move(constants), current.sum_from(), all.index());
    kernel->create_primitive();
    return kernel;
  } while (all.next());
  return nullptr;
}

// The fastest of a few runs of each kernel, taken in turns on the budget's
// threads over zeroed buffers of the step's layouts: {current, other} in ms.
std::pair<double, double> time_both(const OneDnnKernel& current, const OneDnnKernel& other, ThreadBudget& budget) {
  std::vector<dnnl::memory> buffers;
  std::vector<void*> args;
  for (const auto& [id, desc] : current.runtime_args()) {
    buffers.emplace_back(desc, cpu_engine());
    std::memset(buffers.back().get_data_handle(), 0, desc.get_size());
    args.push_back(buffers.back().get_data_handle());
  }
  using clock = std::chrono::steady_clock;
  auto once = [&](const OneDnnKernel& k) {
    const auto start = clock::now();
    k.run(args.data());
    return std::chrono::duration<double, std::milli>(clock::now() - start).count();
  };
  double best[2] = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
  auto measure = [&] {
    once(current);  // each first run faults pages in and warms the caches
    once(other);
    // Two rounds at least; more while they cost less than what making the
    // current one again costs (what choosing the other could save a warm start).
    double spent = 0;
    for (int round = 0; round < 10 && (round < 2 || spent < current.creation_ms()); ++round)
      for (int k = 0; k < 2; ++k) {
        const double ms = once(k == 0 ? current : other);
        best[k] = std::min(best[k], ms);
        spent += ms;
      }
  };
  if (ThreadBudget::held() == &budget) measure();  // already this thread's, as in a run
  else budget.hold(measure);
  return {best[0], best[1]};
}

}  // namespace

int choose_implementations(Program& program, const std::vector<ImplementationTrial>& trials, ThreadBudget& budget,
                           TrialPolicy policy) {
  if (policy == TrialPolicy::Off) return 0;
  int changed = 0;
  for (const ImplementationTrial& trial : trials) {
    Step& step = program.steps.at(trial.step);
    auto* current = dynamic_cast<OneDnnKernel*>(step.kernel.get());
    if (!current || (policy == TrialPolicy::Timed && current->creation_ms() < kTrialFromMs)) continue;
    std::unique_ptr<OneDnnKernel> other;
    try {
      other = other_implementation(*current, trial);
    } catch (const dnnl::error& e) {
      ir::fail(ir::ErrorKind::Internal, step.label + ": trying another oneDNN implementation failed: " + e.what());
    }
    if (!other) continue;
    if (policy == TrialPolicy::Timed) {
      // Within 2% (below the noise of a run here) the one that is cheaper to
      // make again wins: a warm start makes it in every process.
      const auto [current_ms, other_ms] = time_both(*current, *other, budget);
      const double slack = other->creation_ms() < current->creation_ms() ? 1.02 : 1.0;
      if (other_ms > slack * current_ms) continue;
    }
    step.kernel = std::move(other);
    ++changed;
  }
  return changed;
}

}  // namespace kiln::cpu
