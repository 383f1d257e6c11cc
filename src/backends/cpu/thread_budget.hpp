#pragma once
// One Runtime's threads, shared by everything the cpu backend runs (see
// cpu_backend.cpp for the rules): a TBB arena of N slots for generated loops,
// N OpenMP threads for oneDNN, and one run at a time.
#include <omp.h>
#include <tbb/task_arena.h>

#include <mutex>

#include "backends/cpu/omp_team.hpp"

namespace kiln::cpu {

// Sets the calling thread's OpenMP thread count for a scope.
class OmpThreads {
 public:
  explicit OmpThreads(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~OmpThreads() { omp_set_num_threads(saved_); }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int saved_;
};

struct ThreadBudget {
  explicit ThreadBudget(int n) : threads(n), arena(n) {}
  int threads;
  tbb::task_arena arena;
  std::mutex running;  // held while a run (or an interpreter's kernel) uses the threads

  // Runs `f` as a run does: one at a time, TBB loops on the arena's N slots,
  // oneDNN on the calling thread's OpenMP team of N.
  template <typename F>
  void hold(const F& f) {
    std::lock_guard<std::mutex> lock(running);
    arena.execute([&] {
      OmpThreads omp(threads);
      prepare_omp_team(threads);
      struct Restore {
        const ThreadBudget* outer;
        ~Restore() { held_ = outer; }
      } restore{held_};
      held_ = this;
      f();
    });
  }
  // The budget whose hold() this thread is inside (null if none): a kernel
  // called from a run may use its arena's threads directly.
  static const ThreadBudget* held() { return held_; }

 private:
  static inline thread_local const ThreadBudget* held_ = nullptr;
};

}  // namespace kiln::cpu
