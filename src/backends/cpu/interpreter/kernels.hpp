#pragma once
// The kernel table the cpu backend's interpreter runs: the reference
// kernels, with faster ones for the operators of detectors' post-processing
// (products on oneDNN, RoiAlign, the scatters and copies around them).
#include "backends/cpu/thread_budget.hpp"
#include "backends/reference/kernel_registry.hpp"

namespace kiln::cpu {

const ref::KernelRegistry& interpreter_kernels();

// The budget whose threads the kernels may use, for the runs on this thread
// (kernels are plain functions): set by a scope around each run; none means
// one thread.
extern thread_local ThreadBudget* t_budget;

class BudgetScope {
 public:
  explicit BudgetScope(ThreadBudget* b) : saved_(t_budget) { t_budget = b; }
  ~BudgetScope() { t_budget = saved_; }
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  ThreadBudget* saved_;
};

}  // namespace kiln::cpu
