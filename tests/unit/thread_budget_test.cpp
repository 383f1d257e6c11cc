// A Runtime's thread budget serving several calling threads: runs execute
// one at a time in arrival order, each on the same OpenMP team of the whole
// budget whichever thread calls, and a run that throws reaches its own
// caller only. Deterministic properties, no timings (ConcurrentRuns: the
// suite a ThreadSanitizer build runs).
#include <gtest/gtest.h>
#include <omp.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/omp_team.hpp"
#include "backends/cpu/thread_budget.hpp"

namespace {

using kiln::cpu::ThreadBudget;

pid_t tid() { return pid_t(::syscall(SYS_gettid)); }

int threads_in_process() {
  int n = 0;
  for ([[maybe_unused]] const auto& task : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

void wait_until(const std::function<bool()>& ready) {
  while (!ready()) std::this_thread::yield();
}

// The threads that execute a loop on the team, as a native program's loops
// and oneDNN's primitives do.
std::set<pid_t> team_of_a_run(ThreadBudget& budget) {
  std::mutex mutex;
  std::set<pid_t> seen;
  budget.hold([&] {
    auto record = [](void* task, int64_t, int64_t) {
      auto* s = static_cast<std::pair<std::mutex*, std::set<pid_t>*>*>(task);
      std::lock_guard<std::mutex> lock(*s->first);
      s->second->insert(tid());
    };
    std::pair<std::mutex*, std::set<pid_t>*> sink{&mutex, &seen};
    kiln::cpu::team_threads()->parallel_for(nullptr, 64, record, &sink);
  });
  return seen;
}

// Budgets of one thread run on their callers, larger ones on their runner.
class ConcurrentRuns : public ::testing::TestWithParam<int> {};

}  // namespace

INSTANTIATE_TEST_SUITE_P(Budgets, ConcurrentRuns, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& p) { return p.param == 1 ? "OneThread" : "TwoThreads"; });

// A thread that finishes a run and asks again at once goes behind the runs
// that were already waiting (with a plain mutex it came first).
TEST_P(ConcurrentRuns, QueuedRunsExecuteInArrivalOrder) {
  ThreadBudget budget(GetParam());
  for (int round = 0; round < 5; ++round) {
    std::mutex mutex;
    std::vector<std::string> order;
    auto record = [&](const std::string& name) {
      std::lock_guard<std::mutex> lock(mutex);
      order.push_back(name);
    };
    std::atomic<bool> first_running{false}, release{false};
    std::thread a([&] {
      budget.hold([&] {
        first_running = true;
        wait_until([&] { return release.load(); });
        record("a1");
      });
      budget.hold([&] { record("a2"); });
    });
    wait_until([&] { return first_running.load(); });
    std::vector<std::thread> others;
    for (const std::string name : {"b", "c", "d"}) {
      const int before = budget.queued();
      others.emplace_back([&, name] { budget.hold([&] { record(name); }); });
      wait_until([&] { return budget.queued() == before + 1; });
    }
    release = true;
    a.join();
    for (auto& t : others) t.join();
    EXPECT_EQ(order, (std::vector<std::string>{"a1", "b", "c", "d", "a2"})) << "round " << round;
  }
}

// libgomp gives every thread that starts a parallel region a team of its
// own, and once the teams' threads outnumber the CPUs every one of them
// sleeps in its waits almost at once: a model warmed on one thread and
// served from another ran 4.5x slower. Whoever calls, a run executes on the
// same team of the whole budget, and a new calling thread starts no team.
TEST(ConcurrentRuns, RunsFromAnyThreadShareOneTeamOfTheWholeBudget) {
  ThreadBudget budget(2);
  const std::set<pid_t> warmed = team_of_a_run(budget);
  EXPECT_EQ(warmed.size(), 2u);
  EXPECT_EQ(warmed.count(tid()), 0u) << "the run executed on its calling thread";
  const int before = threads_in_process();
  std::thread([&] {
    for (int i = 0; i < 3; ++i) EXPECT_EQ(team_of_a_run(budget), warmed) << "run " << i << " from another thread";
    EXPECT_LE(threads_in_process(), before + 1) << "the calling thread started threads of its own";
  }).join();
  EXPECT_EQ(team_of_a_run(budget), warmed);
}

// A team with as many threads as the process has CPUs has one CPU each
// (omp_team.hpp says why), the runner's among them; smaller teams are not
// pinned.
TEST(ConcurrentRuns, ATeamAsLargeAsTheCpusHasACpuEach) {
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  const int cpus = CPU_COUNT(&allowed);
  if (cpus < 2) GTEST_SKIP() << "one CPU";
  for (int n : {cpus, cpus - 1}) {
    SCOPED_TRACE(std::to_string(n) + " threads");
    ThreadBudget budget(n);
    std::mutex mutex;
    std::vector<cpu_set_t> masks;
    budget.hold([&] {
      auto record = [](void* task, int64_t, int64_t) {
        auto* s = static_cast<std::pair<std::mutex*, std::vector<cpu_set_t>*>*>(task);
        cpu_set_t mask;
        sched_getaffinity(0, sizeof mask, &mask);
        std::lock_guard<std::mutex> lock(*s->first);
        s->second->push_back(mask);
      };
      std::pair<std::mutex*, std::vector<cpu_set_t>*> sink{&mutex, &masks};
      kiln::cpu::team_threads()->parallel_for(nullptr, n, record, &sink);
    });
    ASSERT_EQ(masks.size(), size_t(n));
    cpu_set_t all;
    CPU_ZERO(&all);
    for (auto& m : masks) {
      if (n == cpus)
        EXPECT_EQ(CPU_COUNT(&m), 1);
      else
        EXPECT_TRUE(CPU_EQUAL(&m, &allowed));
      CPU_OR(&all, &all, &m);
    }
    if (n == cpus) EXPECT_TRUE(CPU_EQUAL(&all, &allowed)) << "two threads of the team on one CPU";
  }
}

// With one thread there is no team to keep: a run executes on its caller,
// and the caller whose turn it is also runs the jobs that arrived while its
// own ran (not one more), so that the next run does not wait for its
// caller to wake up.
TEST(ConcurrentRuns, AOneThreadBudgetRunsOnItsCallers) {
  ThreadBudget budget(1);
  const int before = threads_in_process();
  EXPECT_EQ(team_of_a_run(budget), std::set<pid_t>{tid()});
  std::mutex mutex;
  std::map<std::string, pid_t> ran_on;
  auto record = [&](const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex);
    ran_on[name] = tid();
  };
  std::atomic<bool> a_running{false}, release_a{false}, b_running{false}, release_b{false};
  std::map<std::string, pid_t> callers = {{"a", 0}, {"b", 0}, {"c", 0}, {"d", 0}};  // each written by its thread
  std::thread a([&] {
    callers.at("a") = tid();
    budget.hold([&] {
      a_running = true;
      wait_until([&] { return release_a.load(); });
      record("a");
    });
  });
  wait_until([&] { return a_running.load(); });
  std::vector<std::thread> others;
  auto call = [&](const std::string& name, std::function<void()> body) {
    const int queued = budget.queued();
    pid_t* caller = &callers.at(name);
    others.emplace_back([&, name, body, caller] {
      *caller = tid();
      budget.hold(body);
    });
    wait_until([&] { return budget.queued() == queued + 1; });
  };
  call("b", [&] {
    b_running = true;
    wait_until([&] { return release_b.load(); });
    record("b");
  });
  call("c", [&] { record("c"); });
  release_a = true;
  wait_until([&] { return b_running.load(); });
  call("d", [&] { record("d"); });
  release_b = true;
  a.join();
  for (auto& t : others) t.join();
  EXPECT_EQ(ran_on["a"], callers.at("a"));
  EXPECT_EQ(ran_on["b"], callers.at("a"));
  EXPECT_EQ(ran_on["c"], callers.at("a"));
  EXPECT_EQ(ran_on["d"], callers.at("d")) << "the turn went on after the jobs that waited while a ran";
  EXPECT_LE(threads_in_process(), before);
}

TEST_P(ConcurrentRuns, AThrowingRunReachesItsOwnCallerOnly) {
  ThreadBudget budget(GetParam());
  std::atomic<bool> first_running{false}, release{false};
  std::vector<std::string> caught(4);
  std::vector<std::thread> callers;
  callers.emplace_back([&] {
    budget.hold([&] {
      first_running = true;
      wait_until([&] { return release.load(); });
    });
  });
  wait_until([&] { return first_running.load(); });
  for (int t = 1; t < 4; ++t) {
    const int before = budget.queued();
    callers.emplace_back([&, t] {
      try {
        budget.hold([&] {
          if (t != 2) throw std::runtime_error("run " + std::to_string(t));
        });
        caught[size_t(t)] = "no error";
      } catch (const std::runtime_error& e) {
        caught[size_t(t)] = e.what();
      }
    });
    wait_until([&] { return budget.queued() == before + 1; });
  }
  release = true;
  for (auto& t : callers) t.join();
  EXPECT_EQ(caught, (std::vector<std::string>{"", "run 1", "no error", "run 3"}));
  int ran = 0;
  budget.hold([&] { ++ran; });
  EXPECT_EQ(ran, 1);
}

// A kernel that asks for the budget from inside a run (an interpreter
// kernel on the run's thread, an implementation trial during a compile
// inside a run) runs at once instead of waiting for itself.
TEST_P(ConcurrentRuns, ARunInsideARunExecutesAtOnce) {
  ThreadBudget budget(GetParam());
  int depth = 0;
  budget.hold([&] {
    EXPECT_EQ(ThreadBudget::held(), &budget);
    budget.hold([&] { budget.hold([&] { depth = 2; }); });
  });
  EXPECT_EQ(depth, 2);
  EXPECT_EQ(ThreadBudget::held(), nullptr);
  EXPECT_THROW(budget.hold([&] { budget.hold([] { throw std::runtime_error("inner"); }); }), std::runtime_error);
}

// A compile borrows the threads only while no run is running or waiting,
// and runs that arrive meanwhile wait for it.
TEST_P(ConcurrentRuns, ACompileBorrowsTheThreadsOnlyWhenNoRunNeedsThem) {
  ThreadBudget budget(GetParam());
  ASSERT_TRUE(budget.try_borrow());
  EXPECT_FALSE(budget.try_borrow());
  std::atomic<bool> ran{false};
  std::thread run([&] { budget.hold([&] { ran = true; }); });
  wait_until([&] { return budget.queued() == 1; });
  EXPECT_FALSE(ran.load());
  budget.give_back();
  run.join();
  EXPECT_TRUE(ran.load());

  std::atomic<bool> running{false}, release{false};
  std::thread busy([&] {
    budget.hold([&] {
      running = true;
      wait_until([&] { return release.load(); });
    });
  });
  wait_until([&] { return running.load(); });
  EXPECT_FALSE(budget.try_borrow());
  release = true;
  busy.join();
  EXPECT_TRUE(budget.try_borrow());
  budget.give_back();
}
