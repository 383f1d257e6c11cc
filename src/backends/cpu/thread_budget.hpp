#pragma once
// One Runtime's threads, shared by everything the cpu backend runs (see
// cpu_backend.cpp for the rules): a TBB arena of N slots for generated loops,
// N OpenMP threads for oneDNN, and one run at a time.
#include <omp.h>
#include <tbb/task_arena.h>

#include <mutex>

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
  std::mutex running;  // held while a run (or an interpreter's oneDNN call) uses the threads
};

}  // namespace kiln::cpu
