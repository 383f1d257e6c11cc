// GFLOP/s of the portable GEMM and convolutions on the host CPU. Not part
// of the build or CI; compile by hand next to the kernel sources, e.g.
//   clang++-19 -std=c++20 -O3 -march=native -ffp-contract=fast -fno-math-errno \
//     -DKILN_BENCH_VECTOR_BYTES=64 -DKILN_BENCH_VECTOR_REGISTERS=32 -I src \
//     bench/portable_gemm_bench.cpp src/backends/cpu/portable/gemm.cpp \
//     src/backends/cpu/portable/conv.cpp -ltbb -o build/pk_gemm_bench
//   build/pk_gemm_bench [SECONDS [THREADS [FILTER]]]
// SECONDS per shape (best time kept, default 1); THREADS > 1 splits the
// kernels' loops over a TBB arena of that many threads, as the JIT does;
// FILTER keeps the shapes whose description contains it.
// The two constants stand in for what the code generator defines for its
// target (AVX-512: 64 / 32, AVX2: 32 / 16, NEON: 16 / 32).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "backends/cpu/portable/kernels.h"

#ifndef KILN_BENCH_VECTOR_BYTES
#define KILN_BENCH_VECTOR_BYTES 64
#endif
#ifndef KILN_BENCH_VECTOR_REGISTERS
#define KILN_BENCH_VECTOR_REGISTERS 32
#endif
extern "C" const int32_t kiln_pk_vector_bytes = KILN_BENCH_VECTOR_BYTES;
extern "C" const int32_t kiln_pk_vector_registers = KILN_BENCH_VECTOR_REGISTERS;

namespace {

// With a second argument N > 1, kernels split their loops over a TBB arena
// of N threads, as the JIT does.
void tbb_for(void*, int64_t n, kiln_pk_task_fn fn, void* task) {
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 1),
                    [&](const tbb::blocked_range<int64_t>& r) { fn(task, r.begin(), r.end()); });
}
const kiln_pk_threads tbb_threads{&tbb_for, nullptr};
const kiln_pk_threads* threads = nullptr;
const char* filter = "";  // third argument: only the lines whose description contains it

double bench(int64_t m, int64_t n, int64_t k, bool trans_b, double min_seconds) {
  std::vector<float> a(size_t(m * k)), b(size_t(k * n)), c(size_t(m * n));
  for (size_t i = 0; i < a.size(); ++i) a[i] = float((i * 7919) % 1000) / 1000.0f - 0.5f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float((i * 104729) % 1000) / 1000.0f - 0.5f;
  const size_t bytes = kiln_pk_gemm_scratch_bytes(1, m, n, k);
  void* scratch = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  auto run = [&] {
    kiln_pk_gemm(threads, 1, m, n, k, a.data(), k, 0, 0, b.data(), trans_b ? k : n, 0, trans_b, c.data(), n, 0, 1.0f, nullptr, 0,
                 0, 0.0f, nullptr, 0, 0.0f, 0.0f, scratch);
  };
  run();
  double best = 1e30;
  const auto start = std::chrono::steady_clock::now();
  int reps = 0;
  while (reps < 3 || std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < min_seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s < best) best = s;
    ++reps;
  }
  std::free(scratch);
  return 2.0 * double(m) * double(n) * double(k) / best * 1e-9;
}

// Convolutions (NCHW, one image, "same" padding, ReLU): the 1x1 ones as a
// plain product, the others through the packed im2col panels, depthwise
// ones (group == c == k) on the window engine.
double bench_conv(int64_t c, int64_t hw, int64_t k, int64_t ks, int64_t stride, int64_t group, double min_seconds) {
  const int64_t pad = ks / 2, ohw = (hw + 2 * pad - ks) / stride + 1;
  std::vector<float> x(size_t(c * hw * hw)), w(size_t(k * c / group * ks * ks)), y(size_t(k * ohw * ohw));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float((i * 7919) % 1000) / 1000.0f - 0.5f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = float((i * 104729) % 1000) / 1000.0f - 0.5f;
  const size_t bytes = kiln_pk_conv2d_scratch_bytes(1, c, hw, hw, k, ohw, ohw, ks, ks, stride, stride, 1, 1, group);
  void* scratch = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  auto run = [&] {
    kiln_pk_conv2d(threads, 1, c, hw, hw, k, ohw, ohw, ks, ks, stride, stride, pad, pad, 1, 1, group, x.data(), w.data(), nullptr,
                   nullptr, y.data(), KILN_PK_ACT_RELU, 0.0f, 0.0f, KILN_PK_SPLIT_ANY, scratch);
  };
  run();
  double best = 1e30;
  const auto start = std::chrono::steady_clock::now();
  int reps = 0;
  while (reps < 3 || std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < min_seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s < best) best = s;
    ++reps;
  }
  std::free(scratch);
  return 2.0 * double(k) * double(ohw * ohw) * double(c / group * ks * ks) / best * 1e-9;
}

}  // namespace

void run_all(double seconds, int nthreads);

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 1.0;
  const int nthreads = argc > 2 ? std::atoi(argv[2]) : 1;
  if (argc > 3) filter = argv[3];
  if (nthreads > 1) threads = &tbb_threads;
  tbb::task_arena arena(nthreads);
  arena.execute([&] { run_all(seconds, nthreads); });
  return 0;
}

void run_all(double seconds, int nthreads) {
  struct Shape {
    int64_t m, n, k;
    bool trans_b;
    const char* what;
  } shapes[] = {
      {1024, 1024, 1024, false, "1024^3"},
      {1024, 1024, 1024, true, "1024^3, B transposed"},
      {64, 3136, 576, false, "resnet50 3x3 conv as gemm"},
      {256, 3136, 64, false, "resnet50 1x1 conv"},
      {512, 784, 128, false, "resnet50 1x1 conv"},
  };
  std::printf("vector bytes %d, registers %d, %d thread(s)\n", kiln_pk_vector_bytes, kiln_pk_vector_registers, nthreads);
  for (const Shape& s : shapes)
    if (std::strstr(s.what, filter))
      std::printf("%5lld x %5lld x %5lld  %-28s %7.1f GFLOP/s\n", (long long)s.m, (long long)s.n, (long long)s.k, s.what,
                  bench(s.m, s.n, s.k, s.trans_b, seconds));
  struct Conv {
    int64_t c, hw, k, ks, stride, group;
    const char* what;
  } convs[] = {
      {64, 56, 64, 3, 1, 1, "resnet50"},
      {64, 56, 256, 1, 1, 1, "resnet50"},
      {128, 28, 512, 1, 1, 1, "resnet50"},
      {512, 7, 512, 3, 1, 1, "resnet50 layer4"},
      {256, 14, 256, 3, 1, 1, "resnet50 layer3"},
      {128, 28, 128, 3, 1, 1, "resnet50 layer2"},
      {576, 14, 96, 1, 1, 1, "mobilenet_v2 14x14"},
      {192, 28, 32, 1, 1, 1, "mobilenet_v2 small m"},
      {384, 14, 64, 1, 1, 1, "mobilenet_v2 projection"},
      {192, 56, 64, 1, 1, 1, "projection 56x56"},
      {256, 56, 64, 1, 1, 1, "resnet50 layer1 conv1"},
      {256, 28, 128, 1, 1, 1, "rows 128"},
      {384, 14, 128, 1, 1, 1, "rows 128"},
      {160, 7, 960, 1, 1, 1, "mobilenet_v2 7x7"},
      {1024, 14, 2048, 1, 2, 1, "resnet50 downsample"},
      {2048, 7, 512, 1, 1, 1, "resnet50 layer4"},
      {3, 224, 64, 7, 2, 1, "resnet50 stem"},
      {3, 224, 32, 3, 2, 1, "mobilenet_v2 stem"},
      {16, 112, 96, 1, 1, 1, "mobilenet_v2, small k"},
      {24, 56, 144, 1, 1, 1, "mobilenet_v2, small k"},
      {144, 56, 24, 1, 1, 1, "mobilenet_v2, small m"},
      {32, 112, 32, 3, 1, 32, "mobilenet_v2 depthwise"},
      {96, 112, 96, 3, 2, 96, "mobilenet_v2 depthwise"},
      {144, 56, 144, 3, 1, 144, "mobilenet_v2 depthwise"},
      {192, 28, 192, 3, 1, 192, "mobilenet_v2 depthwise"},
      {576, 14, 576, 3, 1, 576, "mobilenet_v2 depthwise 14x14"},
      {960, 7, 960, 3, 1, 960, "mobilenet_v2 depthwise 7x7"},
      {240, 28, 240, 5, 1, 240, "efficientnet_b0 depthwise"},
      {1, 28, 6, 5, 1, 1, "lenet"},
      {6, 14, 16, 5, 1, 1, "lenet"},
  };
  for (const Conv& v : convs)
    if (std::strstr(v.what, filter))
      std::printf("conv %4lld -> %4lld, %lldx%lld/%lld on %3lldx%3lld group %4lld %-24s %7.1f GFLOP/s\n", (long long)v.c,
                  (long long)v.k, (long long)v.ks, (long long)v.ks, (long long)v.stride, (long long)v.hw, (long long)v.hw,
                  (long long)v.group, v.what, bench_conv(v.c, v.hw, v.k, v.ks, v.stride, v.group, seconds));
}
