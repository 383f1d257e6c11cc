#pragma once
// What the interpreter's kernels share: the way back to the reference kernel
// and the loops on the budget's threads.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <cstddef>
#include <cstdint>

#include "backends/cpu/interpreter/kernels.hpp"
#include "backends/reference/kernel_registry.hpp"

namespace kiln::cpu::interpreter {

// The reference kernel of the node at hand, for the cases a kernel here leaves.
inline void run_reference(ref::KernelContext& ctx) { ref::KernelRegistry::instance().find(ctx.node().op_type)(ctx); }

// body(begin, end) over [0, n): split over the budget's threads (holding it,
// as a run does), or in one call without a budget or with one thread. A
// compiled run's step on these kernels is already inside its budget's hold:
// the loop goes straight to the arena.
template <typename Body>
void on_budget(int64_t n, const Body& body) {
  const ThreadBudget* held = ThreadBudget::held();
  const ThreadBudget* budget = t_budget ? t_budget : held;
  if (!budget || budget->threads == 1 || n <= 1) return body(0, n);
  auto loop = [&] {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, n), [&](const tbb::blocked_range<int64_t>& r) { body(r.begin(), r.end()); });
  };
  if (held == budget) return loop();
  t_budget->hold(loop);
}

// a[i] += w * x[i], for RoiAlign and Resize: cloned for AVX-512 and AVX2
// with FMA (this library is built for the baseline x86-64), the clone
// picked when the library loads. Not under ThreadSanitizer, as
// KILN_VECTOR_CLONES (vector_clones.hpp). Local to each file that uses it:
// GCC gives the resolver of an external clone default visibility, which
// libkiln would export.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_THREAD__)
#define KILN_ADD_SCALED_CLONES __attribute__((target_clones("arch=skylake-avx512", "arch=haswell", "default")))
#else
#define KILN_ADD_SCALED_CLONES
#endif
namespace {
KILN_ADD_SCALED_CLONES inline void add_scaled(float* __restrict a, const float* __restrict x, float w, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] += w * x[i];
}
}  // namespace
#undef KILN_ADD_SCALED_CLONES

// Fills `out` with copies of the `esize`-byte value (zero: a memset), for
// ConstantOfShape and Pad (fill.cpp).
void fill_with(ir::Tensor& out, const void* value, size_t esize);

}  // namespace kiln::cpu::interpreter
