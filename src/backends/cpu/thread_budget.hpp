#pragma once
// One Runtime's threads, shared by everything the cpu backend runs (see
// cpu_backend.cpp for the rules): a TBB arena of N slots for generated loops,
// N OpenMP threads for oneDNN, and runs executed one at a time, in the order
// they arrive: with N > 1 on one thread of the budget's own, the runner,
// which owns the OpenMP team; with N = 1 (no team) on the callers.
//
// Why one thread: libgomp gives each thread that starts a parallel region a
// team of its own, kept until that thread exits, and counts the threads of
// all teams. Once they outnumber the CPUs, every thread of every team spins
// 1,000 rounds instead of 300,000 before it sleeps in a wait, so a team's
// threads hand each other every region through futex sleeps and wake-ups.
// A service that warmed a model on its main thread and served it from a
// worker had two teams of 2 on 2 CPUs, for as long as the main thread
// lived: the worker and its team thread each slept about 9 times a lenet
// run (perf sched), and lenet ran 3.4x slower (12,600 against 3,900 runs a
// second; other processes kept off with SCHED_FIFO). Runs on the runner
// keep one team per Runtime, whoever calls. The hand-off costs the caller a
// futex wake-up per run: digits, 10 us a run, went from 101,000 to 64,000
// runs a second on its warming thread; lenet's runs took as long as before.
#include <omp.h>
#include <tbb/task_arena.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>

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

class ThreadBudget {
 public:
  explicit ThreadBudget(int n);
  // Runs what is queued, then ends the runner.
  ~ThreadBudget();
  ThreadBudget(const ThreadBudget&) = delete;
  ThreadBudget& operator=(const ThreadBudget&) = delete;

  const int threads;
  tbb::task_arena arena;

  // Runs `f` as a run: after every run that arrived before it, on the
  // runner (N > 1) or a calling thread (N = 1), with TBB loops on the
  // arena's N slots and oneDNN on the runner's OpenMP team of N. Returns
  // when `f` has returned, and throws what it threw. Called from inside a
  // run, `f` runs at once.
  template <typename F>
  void hold(const F& f) {
    if (held_ == this) return f();
    Job job([](const void* fn) { (*static_cast<const F*>(fn))(); }, &f);
    execute(job);
  }

  // A compile borrows the budget's threads while no run is queued or
  // running: true if it got them, and then runs wait until give_back().
  bool try_borrow();
  void give_back();

  // Runs that wait for their turn (not the one running).
  int queued() const;

  // The budget whose run this thread is executing (null if none): a kernel
  // called from a run may use its arena's threads directly.
  static const ThreadBudget* held() { return held_; }

 private:
  // A run waiting for its turn, on its caller's stack.
  struct Job {
    Job(void (*c)(const void*), const void* f) : call(c), fn(f) {}
    void (*call)(const void*);
    const void* fn;
    std::exception_ptr error;
    std::atomic<uint32_t> state{0};  // thread_budget.cpp
    bool turn = false;               // N = 1: signalled to run itself (and those after it), not done
    Job* next = nullptr;
  };
  void execute(Job& job);
  void run(Job& job);
  void run_in_turn(Job& job);
  Job* pop();
  static void signal(Job& job);
  static void await(Job& job);
  void wake_runner();
  Job* next_job();
  void serve();

  mutable std::mutex mutex_;  // guards everything up to wake_
  Job* head_ = nullptr;
  Job* tail_ = nullptr;
  int queued_ = 0;
  bool running_ = false;  // a run executes
  bool borrowed_ = false;
  bool stopping_ = false;
  // Bumped whenever the runner may have something to do; it sleeps on it.
  std::atomic<uint32_t> wake_{0};
  std::thread runner_;  // N > 1

  static inline thread_local const ThreadBudget* held_ = nullptr;
};

}  // namespace kiln::cpu
