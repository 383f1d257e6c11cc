// The calling thread's OpenMP team, started ahead of oneDNN's first call:
// it has the threads asked for, and the placement leaves no thread pinned.
#include <gtest/gtest.h>
#include <omp.h>
#include <sched.h>

#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include "backends/cpu/omp_team.hpp"

namespace {

// On a fresh thread (teams belong to the thread that starts them): after
// prepare_omp_team(n), a region of n threads runs with every thread allowed
// the CPUs its creator is allowed.
void check_team(int n) {
  cpu_set_t creator;
  ASSERT_EQ(sched_getaffinity(0, sizeof creator, &creator), 0);
  kiln::cpu::prepare_omp_team(n);
  kiln::cpu::prepare_omp_team(n);  // a second call finds the team made
  std::vector<cpu_set_t> masks(static_cast<size_t>(n));
  std::vector<int> seen(static_cast<size_t>(n), 0);
#pragma omp parallel num_threads(n)
  {
    const int me = omp_get_thread_num();
    seen[size_t(me)] = omp_get_num_threads();
    sched_getaffinity(0, sizeof(cpu_set_t), &masks[size_t(me)]);
  }
  for (int t = 0; t < n; ++t) {
    EXPECT_EQ(seen[size_t(t)], n) << "thread " << t;
    EXPECT_TRUE(CPU_EQUAL(&masks[size_t(t)], &creator)) << "thread " << t << " was left with another affinity mask";
  }
}

int threads_in_process() {
  int n = 0;
  for ([[maybe_unused]] const auto& task : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

}  // namespace

// The team starts with one thread more than asked for (see omp_team.hpp);
// that thread is gone once a region of the team's size has run.
TEST(OmpTeam, TheExtraStartingThreadExits) {
  std::thread([] {
    const int before = threads_in_process();
    check_team(2);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (threads_in_process() != before + 1 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(threads_in_process(), before + 1);
  }).join();
}

TEST(OmpTeam, StartsTheTeamAndLeavesEveryThreadsAffinityAsItWas) {
  std::thread([] { check_team(2); }).join();
}

TEST(OmpTeam, MoreThreadsThanCpusStillStart) {
  const int n = 2 * int(std::thread::hardware_concurrency()) + 1;
  std::thread([n] { check_team(n); }).join();
}

TEST(OmpTeam, OneThreadIsNoTeam) {
  std::thread([] { check_team(1); }).join();
}
