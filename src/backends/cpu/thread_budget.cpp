#include "backends/cpu/thread_budget.hpp"

#include <immintrin.h>
#include <pthread.h>

namespace kiln::cpu {

namespace {

// A job's state: waiting, then signalled by the thread that ran it (or, on
// a budget of one thread, gave it the turn). That thread has one more look
// at the job after the first store: the futex wake-up.
constexpr uint32_t kWaiting = 0, kSignalling = 1, kSignalled = 2;

}  // namespace

ThreadBudget::ThreadBudget(int n) : threads(n), arena(n), runner_(n > 1 ? std::thread([this] { serve(); }) : std::thread()) {}

ThreadBudget::~ThreadBudget() {
  if (!runner_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_runner();
  runner_.join();
}

void ThreadBudget::execute(Job& job) {
  const bool by_runner = runner_.joinable();
  bool now = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (by_runner || running_ || head_ || borrowed_) {
      (tail_ ? tail_->next : head_) = &job;
      tail_ = &job;
      ++queued_;
    } else {
      running_ = true;
      now = true;
    }
  }
  if (by_runner) wake_runner();
  if (!now) await(job);
  if (!by_runner && (now || job.turn)) run_in_turn(job);
  if (job.error) std::rethrow_exception(job.error);
}

// One thread: no OpenMP team to keep, so runs execute on their callers. The
// caller whose turn it is also runs the jobs that arrived meanwhile, then
// hands the turn to the next caller. Under load from other processes, where
// a wake-up took 4-8 ms, handing the turn on after every run made each run
// wait for its caller to wake (digits, two request threads: 2,500-47,000
// runs/s against 84,000-200,000 before), and a runner made every run wait
// for two (digits, one request thread: 90,000 -> 400 runs/s).
void ThreadBudget::run_in_turn(Job& job) {
  run(job);
  int batch;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    batch = queued_;
  }
  Job* next = nullptr;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!head_) {
        running_ = false;
        return;
      }
      next = pop();
      if (batch-- == 0) break;
    }
    run(*next);
    signal(*next);
  }
  next->turn = true;
  signal(*next);
}

void ThreadBudget::run(Job& job) {
  const ThreadBudget* outer = held_;
  held_ = this;
  try {
    arena.execute([&] {
      OmpThreads omp(threads);
      prepare_omp_team(threads);
      job.call(job.fn);
    });
  } catch (...) {
    job.error = std::current_exception();
  }
  held_ = outer;
}

ThreadBudget::Job* ThreadBudget::pop() {
  Job* job = head_;
  head_ = job->next;
  if (!head_) tail_ = nullptr;
  --queued_;
  return job;
}

void ThreadBudget::signal(Job& job) {
  job.state.store(kSignalling, std::memory_order_release);
  job.state.notify_one();
  job.state.store(kSignalled, std::memory_order_release);
}

// Neither the caller nor the runner spins before it sleeps (beyond the few
// rounds std::atomic::wait spins): while a run executes, its N threads have
// the CPUs. Spins of 20-100 us by the caller and 50-200 us by the runner
// made no difference outside the noise on lenet and digits (2 threads, 2
// vCPUs, other processes kept off by SCHED_FIFO), and on CPUs that other
// processes wanted too, the runner's spin made runs slower.
void ThreadBudget::await(Job& job) {
  while (job.state.load(std::memory_order_acquire) == kWaiting) job.state.wait(kWaiting, std::memory_order_acquire);
  while (job.state.load(std::memory_order_acquire) != kSignalled) _mm_pause();
}

void ThreadBudget::wake_runner() {
  wake_.fetch_add(1, std::memory_order_release);
  wake_.notify_one();
}

ThreadBudget::Job* ThreadBudget::next_job() {
  for (;;) {
    const uint32_t seen = wake_.load(std::memory_order_acquire);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (head_ && !borrowed_) {
        running_ = true;
        return pop();
      }
      if (stopping_) return nullptr;
    }
    wake_.wait(seen, std::memory_order_acquire);
  }
}

void ThreadBudget::serve() {
  // Named for top and perf; its OpenMP team's threads inherit the name.
  pthread_setname_np(pthread_self(), "kiln-runner");
  bool team_started = false;
  while (Job* job = next_job()) {
    // Started by the first run, not before (omp_team.hpp).
    if (!team_started) {
      team_started = true;
      OmpThreads omp(threads);
      prepare_omp_team(threads);
      pin_omp_team(threads);
    }
    run(*job);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      running_ = false;
    }
    signal(*job);
  }
}

bool ThreadBudget::try_borrow() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (borrowed_ || head_ || running_) return false;
  borrowed_ = true;
  return true;
}

void ThreadBudget::give_back() {
  Job* next = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    borrowed_ = false;
    if (!runner_.joinable() && head_) {
      running_ = true;
      next = pop();
    }
  }
  if (!runner_.joinable()) {
    if (next) {
      next->turn = true;
      signal(*next);
    }
  } else {
    wake_runner();
  }
}

int ThreadBudget::queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queued_;
}

}  // namespace kiln::cpu
