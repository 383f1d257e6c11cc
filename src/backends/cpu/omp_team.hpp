#pragma once
// The calling thread's OpenMP team, started before the first oneDNN call
// that needs it.
//
// libgomp starts a thread's team in its first parallel region, and the
// creating thread spins until the new threads have started. Measured here
// (2-vCPU KVM guest): a new thread often starts on its creator's CPU, behind
// that spin, and the two then share one CPU for 2-20 ms while the other stays
// idle. A small model's first run took 10-20 ms instead of 0.2 ms. So each
// new team thread moves itself once to another CPU of its affinity mask,
// then restores the mask: a placement, not a pinning; and the team is
// started with one thread more than asked for, which shortens the creator's
// spin (0.4-17 ms, median 1.8, became 0.5-0.8 ms). The cpu backend starts
// a thread's team on its first run (before, at Runtime creation, the idle
// team's spinning slowed the compile that followed).
#include "backends/cpu/portable/kernels.h"

namespace kiln::cpu {

// Makes sure the calling thread has an OpenMP team of `threads` threads.
// Costs a thread-local comparison once it has.
void prepare_omp_team(int threads);

// Pins each thread of the calling thread's team (of `threads`, started) to
// a CPU of its own, the calling thread to the one it is on, when the team
// has as many threads as the CPUs it may use; otherwise does nothing. A
// team's threads wait for each other spinning, and the scheduler balances
// counts of runnable threads, not teams: with two other busy processes on 2
// vCPUs it kept a runner and its team thread on one CPU (the other two on
// the other), each region then waiting for a 4 ms tick: lenet ran 11 runs a
// second (650-960 pinned), mobilenet_v2 2 (29-35 pinned); with nothing else
// running, pinned and unpinned ran alike.
void pin_omp_team(int threads);

// A parallel_for on the calling thread's OpenMP team (as many threads as
// its OpenMP thread count), for the loops of programs whose other steps are
// oneDNN primitives. Once a region ends, libgomp's team threads spin for a
// while before they sleep: a loop on TBB right after a primitive had its
// worker share a CPU with that spin, and ran about 2x slower (a Softsign over
// 800k values: 0.32 ms on TBB, 0.145 on the team).
const kiln_pk_threads* team_threads();

}  // namespace kiln::cpu
