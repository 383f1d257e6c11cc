#include "backends/cpu/omp_team.hpp"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <vector>

namespace kiln::cpu {

namespace {

thread_local int t_team_threads = 1;

// Team thread `member` (1..) moves to the member-th CPU after `creator_cpu`
// among those it may run on, then may run anywhere it could before.
void move_off(int creator_cpu, int member) {
  cpu_set_t allowed;
  if (creator_cpu < 0 || sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  std::vector<int> cpus;
  size_t creator = 0;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &allowed)) continue;
    if (c == creator_cpu) creator = cpus.size();
    cpus.push_back(c);
  }
  const int target = cpus.empty() ? creator_cpu : cpus[(creator + size_t(member)) % cpus.size()];
  if (target == creator_cpu) return;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(target, &one);
  if (sched_setaffinity(0, sizeof one, &one) == 0) sched_setaffinity(0, sizeof allowed, &allowed);
}

// Thread t of the team takes the t-th of as many contiguous runs of tasks,
// as oneDNN splits a primitive's work: a loop over a convolution's output
// then reads on each core what that core wrote.
void team_parallel_for(void* /*host*/, int64_t n, kiln_pk_task_fn fn, void* task) {
  const int64_t threads = std::min<int64_t>(n, omp_get_max_threads());
  if (threads <= 1) {
    if (n > 0) fn(task, 0, n);
    return;
  }
#pragma omp parallel num_threads(int(threads))
  {
    const int64_t t = omp_get_thread_num(), per = n / threads, rest = n % threads;
    const int64_t begin = t * per + std::min(t, rest);
    fn(task, begin, begin + per + (t < rest ? 1 : 0));
  }
}

}  // namespace

const kiln_pk_threads* team_threads() {
  static const kiln_pk_threads threads{&team_parallel_for, nullptr};
  return &threads;
}

void pin_omp_team(int threads) {
  cpu_set_t allowed;
  if (threads < 2 || sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) != threads) return;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  const auto here = std::find(cpus.begin(), cpus.end(), sched_getcpu());
  if (here != cpus.end()) std::rotate(cpus.begin(), here, cpus.end());
  // libgomp gives a team's thread t the same pool thread in every region.
#pragma omp parallel num_threads(threads)
  {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[size_t(omp_get_thread_num())], &one);
    sched_setaffinity(0, sizeof one, &one);
  }
}

void prepare_omp_team(int threads) {
  if (threads <= t_team_threads) return;
  const int creator_cpu = sched_getcpu();
  std::atomic<int> moved{0};
  // One thread more than asked for: with more team threads than CPUs,
  // libgomp's creator spins 1,000 rounds instead of 300,000 before it sleeps
  // while its new threads start, so one that starts on its CPU runs at once.
  // The extra thread exits when the first region of `threads` starts.
#pragma omp parallel num_threads(threads + 1)
  {
    if (omp_get_thread_num() == 0) {
      // Yields, not spins: a team thread may still be queued on this CPU.
      while (moved.load() < omp_get_num_threads() - 1) sched_yield();
    } else {
      move_off(creator_cpu, omp_get_thread_num());
      moved.fetch_add(1);
    }
  }
  t_team_threads = threads;
}

}  // namespace kiln::cpu
