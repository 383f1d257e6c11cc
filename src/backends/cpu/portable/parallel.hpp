// Turns a lambda into the (kiln_pk_task_fn, void*) pair of kiln_pk_threads.
// Kernels pass units of work whose results never depend on which thread
// runs them, so any split the host chooses gives the same bits.
#ifndef KILN_PORTABLE_PARALLEL_HPP
#define KILN_PORTABLE_PARALLEL_HPP

#include "backends/cpu/portable/kernels.h"
#include "backends/cpu/portable/simd.hpp"

namespace kiln::pk {

template <class F>
void task_trampoline(void* task, int64_t begin, int64_t end) {
  (*static_cast<F*>(task))(begin, end);
}

// fn(begin, end) over [0, n), split by the host when there is one, in
// chunks of at least `grain` items: tiny loops stay serial (one chunk) and
// the host never sees more pieces than are worth a task.
template <class F>
KILN_PK_INLINE void parallel_for_grain(const kiln_pk_threads* threads, int64_t n, int64_t grain, F&& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const int64_t chunks = ceil_div(n, grain);
  if (chunks == 1 || !threads || !threads->parallel_for) {
    fn(int64_t(0), n);
    return;
  }
  auto chunked = [&](int64_t b, int64_t e) { fn(b * grain, min64(e * grain, n)); };
  threads->parallel_for(threads->host, chunks, &task_trampoline<decltype(chunked)>, (void*)&chunked);
}

// A grain in items for loops whose item costs about `item_cost` elementary
// operations: enough items per task to amortise a task switch.
KILN_PK_INLINE int64_t grain_for(int64_t item_cost) {
  const int64_t task_cost = 1 << 15;
  return item_cost >= task_cost ? 1 : task_cost / (item_cost > 0 ? item_cost : 1);
}

}  // namespace kiln::pk

#endif
