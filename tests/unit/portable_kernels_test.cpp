// The portable kernel library (src/backends/cpu/portable) against naive
// double-precision loops written here. Every kernel runs twice: serially
// (threads = NULL) and through a parallel_for that splits the range into
// uneven chunks over several std::threads; the two results must be
// bit-identical. Scratch is exactly *_scratch_bytes, 64-byte aligned,
// between guard bytes that must survive.
//
// The host library is built for one vector configuration; the GEMM and
// convolution tests also call the internal *_with_config entry points
// (portable/testing.hpp) with every configuration a target can declare, so
// every micro-kernel variant runs here.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "backends/cpu/portable/kernels.h"
#include "backends/cpu/portable/testing.hpp"
#include "random_data.hpp"

namespace {

using kiln::pk::Config;
using kiln::test::random_values;

// --- threads -----------------------------------------------------------------

std::atomic<int64_t> g_parallel_calls{0};

// Uneven chunks (1, 2, 3, 4 units, repeating) dealt round-robin to three
// threads that run at the same time.
void uneven_parallel_for(void* /*host*/, int64_t n, kiln_pk_task_fn fn, void* task) {
  ++g_parallel_calls;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  const int64_t unit = std::max<int64_t>(1, n / 23);
  for (int64_t b = 0, s = 0; b < n; ++s) {
    const int64_t e = std::min(n, b + unit * (1 + s % 4));
    chunks.push_back({b, e});
    b = e;
  }
  constexpr size_t kThreads = 3;
  std::vector<std::thread> threads;
  for (size_t t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (size_t c = t; c < chunks.size(); c += kThreads) fn(task, chunks[c].first, chunks[c].second);
    });
  for (auto& t : threads) t.join();
}

const kiln_pk_threads kThreaded{&uneven_parallel_for, nullptr};
// A host that declines to split: the kernels must treat it as serial.
const kiln_pk_threads kNullFor{nullptr, nullptr};

// --- scratch -----------------------------------------------------------------

class Scratch {
 public:
  static constexpr size_t kGuard = 128;
  explicit Scratch(size_t bytes) : bytes_(bytes) {
    const size_t total = kGuard + (bytes + 63) / 64 * 64 + kGuard;
    base_ = static_cast<unsigned char*>(std::aligned_alloc(64, total));
    total_ = total;
    std::memset(base_, kPattern, total);
    // Garbage (NaN bit patterns) in the usable part: a kernel must not rely
    // on zeroed scratch.
    std::memset(base_ + kGuard, 0xff, bytes);
  }
  ~Scratch() { std::free(base_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() { return base_ + kGuard; }
  // True when no byte outside [get(), get() + bytes) changed.
  bool guards_intact() const {
    for (size_t i = 0; i < kGuard; ++i)
      if (base_[i] != kPattern) return false;
    for (size_t i = kGuard + bytes_; i < total_; ++i)
      if (base_[i] != kPattern) return false;
    return true;
  }

 private:
  static constexpr unsigned char kPattern = 0xa5;
  unsigned char* base_ = nullptr;
  size_t bytes_ = 0, total_ = 0;
};

// --- comparisons -------------------------------------------------------------

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Checks got[i] against ref[i] within tol[i]; NaN must match NaN. Reports
// the first few mismatches.
::testing::AssertionResult near_all(const std::vector<float>& got, const std::vector<double>& ref,
                                    const std::vector<double>& tol) {
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << "size " << got.size() << " vs " << ref.size();
  std::ostringstream bad;
  int count = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], r = ref[i];
    bool ok;
    if (std::isnan(r))
      ok = std::isnan(g);
    else if (std::isinf(r))
      ok = g == r;
    else
      ok = std::fabs(g - r) <= tol[i];
    if (!ok && count++ < 5) bad << "\n  [" << i << "] got " << g << ", expected " << r << " (tolerance " << tol[i] << ")";
  }
  if (count) return ::testing::AssertionFailure() << count << " of " << got.size() << " values differ:" << bad.str();
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult near_all(const std::vector<float>& got, const std::vector<double>& ref, double rel, double abs) {
  std::vector<double> tol(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) tol[i] = rel * std::fabs(ref[i]) + abs;
  return near_all(got, ref, tol);
}

// Every vector configuration a code generator can declare.
const Config kConfigs[] = {{16, 16}, {16, 32}, {32, 16}, {32, 32}, {64, 16}, {64, 32}};

std::string config_name(const Config* c) {
  if (!c) return "host";
  return std::to_string(c->vector_bytes) + "B/" + std::to_string(c->vector_registers) + "regs";
}

// --- activations -------------------------------------------------------------

struct Act {
  int32_t kind;
  float alpha, beta;
};
const Act kActivations[] = {{KILN_PK_ACT_NONE, 0, 0},
                            {KILN_PK_ACT_RELU, 0, 0},
                            {KILN_PK_ACT_CLIP, -0.5f, 0.75f},
                            {KILN_PK_ACT_LEAKY_RELU, 0.1f, 0},
                            {KILN_PK_ACT_SIGMOID, 0, 0},
                            {KILN_PK_ACT_TANH, 0, 0},
                            {KILN_PK_ACT_HARD_SIGMOID, 0.2f, 0.5f},
                            {KILN_PK_ACT_HARD_SWISH, 0, 0},
                            {KILN_PK_ACT_SILU, 0, 0},
                            {KILN_PK_ACT_GELU_ERF, 0, 0}};

double act_ref(double x, const Act& a) {
  switch (a.kind) {
    case KILN_PK_ACT_RELU: return std::max(x, 0.0);
    case KILN_PK_ACT_CLIP: return std::min(std::max(x, double(a.alpha)), double(a.beta));
    case KILN_PK_ACT_LEAKY_RELU: return x >= 0 ? x : a.alpha * x;
    case KILN_PK_ACT_SIGMOID: return 1 / (1 + std::exp(-x));
    case KILN_PK_ACT_TANH: return std::tanh(x);
    case KILN_PK_ACT_HARD_SIGMOID: return std::max(0.0, std::min(1.0, a.alpha * x + a.beta));
    case KILN_PK_ACT_HARD_SWISH: return x * std::max(0.0, std::min(1.0, x / 6 + 0.5));
    case KILN_PK_ACT_SILU: return x / (1 + std::exp(-x));
    case KILN_PK_ACT_GELU_ERF: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    default: return x;
  }
}

// Tolerance after the activation for a value known within `pre` before it:
// all of these are Lipschitz with constant <= 1.2 here; the transcendental
// ones add a few ulp of their own.
double act_tolerance(double pre, double value) { return 1.2 * pre + 4e-7 * std::fabs(value) + 1e-7; }

// --- GEMM --------------------------------------------------------------------

enum BiasMode { kNoBias, kRowBias, kColBias, kFullBias, kScalarBias, kTransposedBias };

struct GemmCase {
  int64_t batch, m, n, k;
  bool trans_a = false, trans_b = false;
  bool batch_a = true, batch_b = true;  // false: batch stride 0
  BiasMode bias = kNoBias;
  bool residual = false, alias = false;
  Act act = {KILN_PK_ACT_NONE, 0, 0};
  float alpha = 1.0f, beta = 1.0f;
  int64_t pad = 0;    // extra leading-dimension elements
  int64_t c_gap = 0;  // extra elements between C batches
};

std::string describe(const GemmCase& g) {
  std::ostringstream os;
  os << "batch " << g.batch << " m " << g.m << " n " << g.n << " k " << g.k << " ta " << g.trans_a << " tb " << g.trans_b
     << " batch_a " << g.batch_a << " batch_b " << g.batch_b << " bias " << g.bias << " residual " << g.residual << " alias "
     << g.alias << " act " << g.act.kind << " alpha " << g.alpha << " beta " << g.beta << " pad " << g.pad << " c_gap "
     << g.c_gap;
  return os.str();
}

const float kSentinel = -12345.0f;

void check_gemm(const GemmCase& g, const Config* cfg, unsigned seed) {
  SCOPED_TRACE(describe(g) + " config " + config_name(cfg));
  const int64_t lda = (g.trans_a ? g.m : g.k) + g.pad, ldb = (g.trans_b ? g.k : g.n) + g.pad, ldc = g.n + g.pad;
  const int64_t a_size = (g.trans_a ? g.k : g.m) * lda, b_size = (g.trans_b ? g.n : g.k) * ldb;
  const int64_t stride_a = g.batch_a ? a_size : 0, stride_b = g.batch_b ? b_size : 0;
  const int64_t stride_c = g.m * ldc + g.c_gap;
  const std::vector<float> a = random_values(size_t(std::max<int64_t>(1, stride_a * g.batch + (g.batch_a ? 0 : a_size))), seed);
  const std::vector<float> b =
      random_values(size_t(std::max<int64_t>(1, stride_b * g.batch + (g.batch_b ? 0 : b_size))), seed + 1);
  const size_t c_total = size_t(stride_c * g.batch);
  const std::vector<float> residual = random_values(c_total, seed + 2);
  std::vector<float> bias;
  int64_t bias_rs = 0, bias_cs = 0;
  switch (g.bias) {
    case kNoBias: break;
    case kRowBias: bias = random_values(size_t(g.m), seed + 3), bias_rs = 1; break;
    case kColBias: bias = random_values(size_t(g.n), seed + 3), bias_cs = 1; break;
    case kFullBias: bias = random_values(size_t(g.m * g.n), seed + 3), bias_rs = g.n, bias_cs = 1; break;
    case kScalarBias: bias = random_values(1, seed + 3); break;
    case kTransposedBias: bias = random_values(size_t(g.m * g.n), seed + 3), bias_rs = 1, bias_cs = g.m; break;
  }

  auto A = [&](int64_t q, int64_t i, int64_t p) { return double(a[q * stride_a + (g.trans_a ? p * lda + i : i * lda + p)]); };
  auto B = [&](int64_t q, int64_t p, int64_t j) { return double(b[q * stride_b + (g.trans_b ? j * ldb + p : p * ldb + j)]); };
  // Reference, with a tolerance per element from the magnitudes involved.
  std::vector<double> ref(c_total), tol(c_total);
  std::vector<float> expect_untouched(c_total);
  for (size_t i = 0; i < c_total; ++i) {
    ref[i] = g.alias ? residual[i] : kSentinel;
    tol[i] = 0;
  }
  for (int64_t q = 0; q < g.batch; ++q)
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        double s = 0, mag = 0;
        for (int64_t p = 0; p < g.k; ++p) {
          const double t = A(q, i, p) * B(q, p, j);
          s += t;
          mag += std::fabs(t);
        }
        double v = g.alpha * s, vmag = std::fabs(g.alpha) * mag;
        if (!bias.empty()) {
          const double bv = double(g.beta) * bias[i * bias_rs + j * bias_cs];
          v += bv;
          vmag += std::fabs(bv);
        }
        const size_t at = size_t(q * stride_c + i * ldc + j);
        if (g.residual || g.alias) {
          v += residual[at];
          vmag += std::fabs(residual[at]);
        }
        ref[at] = act_ref(v, g.act);
        tol[at] = act_tolerance(1e-5 * vmag + 1e-6, ref[at]);
      }

  auto run = [&](const kiln_pk_threads* threads) {
    std::vector<float> c(c_total, kSentinel);
    if (g.alias) c = residual;
    const float* res = g.alias ? c.data() : g.residual ? residual.data() : nullptr;
    Scratch scratch(kiln_pk_gemm_scratch_bytes(g.batch, g.m, g.n, g.k));
    const float* bias_p = bias.empty() ? nullptr : bias.data();
    if (cfg)
      kiln::pk::gemm_with_config(*cfg, threads, g.batch, g.m, g.n, g.k, a.data(), lda, stride_a, g.trans_a, b.data(), ldb,
                                 stride_b, g.trans_b, c.data(), ldc, stride_c, g.alpha, bias_p, bias_rs, bias_cs, g.beta, res,
                                 g.act.kind, g.act.alpha, g.act.beta, scratch.get());
    else
      kiln_pk_gemm(threads, g.batch, g.m, g.n, g.k, a.data(), lda, stride_a, g.trans_a, b.data(), ldb, stride_b, g.trans_b,
                   c.data(), ldc, stride_c, g.alpha, bias_p, bias_rs, bias_cs, g.beta, res, g.act.kind, g.act.alpha, g.act.beta,
                   scratch.get());
    EXPECT_TRUE(scratch.guards_intact()) << "scratch overrun";
    return c;
  };
  const std::vector<float> serial = run(nullptr);
  EXPECT_TRUE(near_all(serial, ref, tol));
  EXPECT_TRUE(same_bits(serial, run(&kThreaded))) << "threaded result differs from serial";
}

// The shapes every configuration runs: edges of every tile shape, the
// small-product path (m or n <= 4), several k panels, row and column chunks.
std::vector<GemmCase> gemm_shapes() {
  std::vector<GemmCase> cases;
  const int64_t dims[][3] = {{1, 1, 1},   {1, 17, 5},   {3, 1, 9},    {2, 3, 1},   {4, 37, 13},  {5, 4, 7},
                             {7, 2, 30},  {8, 48, 16},  {9, 49, 31},  {13, 97, 3}, {16, 33, 64}, {17, 5, 11},
                             {29, 61, 1}, {31, 17, 53}, {64, 64, 64}, {6, 100, 9}, {12, 24, 8},  {23, 47, 97}};
  for (const auto& d : dims)
    for (int t = 0; t < 4; ++t) {
      GemmCase g{1, d[0], d[1], d[2]};
      g.trans_a = t & 1;
      g.trans_b = t & 2;
      cases.push_back(g);
    }
  // More than one k panel (kKC = 384), with every epilogue phase.
  GemmCase deep{1, 19, 45, 800};
  deep.bias = kRowBias;
  deep.residual = true;
  deep.act = {KILN_PK_ACT_RELU, 0, 0};
  cases.push_back(deep);
  deep.alias = true;
  deep.trans_b = true;
  cases.push_back(deep);
  // More rows than one chunk (kMC = 448) and more columns than one (kNC = 3072).
  GemmCase tall{1, 470, 21, 37};
  tall.bias = kColBias;
  cases.push_back(tall);
  GemmCase wide{1, 10, 3100, 20};
  wide.trans_a = true;
  wide.residual = true;
  cases.push_back(wide);
  // Few rows and a B deeper than kDirectBDepth, read in place over two
  // column chunks.
  GemmCase few_rows_deep{1, 20, 3100, 100};
  few_rows_deep.bias = kRowBias;
  few_rows_deep.residual = true;
  few_rows_deep.act = {KILN_PK_ACT_CLIP, 0.0f, 6.0f};
  cases.push_back(few_rows_deep);
  GemmCase wide_small{1, 3, 3100, 9};  // small path, many column blocks
  wide_small.bias = kFullBias;
  cases.push_back(wide_small);
  GemmCase wide_deep{2, 6, 3100, 390};
  wide_deep.batch_a = false;
  wide_deep.alias = true;
  cases.push_back(wide_deep);
  return cases;
}

TEST(PortableGemm, ShapesAndTransposes) {
  unsigned seed = 100;
  for (const GemmCase& g : gemm_shapes()) check_gemm(g, nullptr, seed++);
}

TEST(PortableGemm, EveryVariant) {
  unsigned seed = 200;
  for (const Config& cfg : kConfigs)
    for (const GemmCase& g : gemm_shapes()) check_gemm(g, &cfg, seed++);
}

TEST(PortableGemm, Epilogues) {
  unsigned seed = 300;
  for (const Config* cfg : {(const Config*)nullptr, &kConfigs[1], &kConfigs[5]})
    for (const Act& act : kActivations)
      for (BiasMode bias : {kNoBias, kRowBias, kColBias, kFullBias, kScalarBias, kTransposedBias})
        for (int64_t m : {3, 11}) {  // the small path and the packed one
          GemmCase g{1, m, 19, 7};
          g.act = act;
          g.bias = bias;
          g.residual = bias % 2 == 0;
          g.alpha = 0.75f;
          g.beta = bias == kScalarBias ? -2.0f : 0.5f;
          check_gemm(g, cfg, seed++);
          // The same with columns and rows swapped in size: the small path on
          // the transposed product.
          std::swap(g.m, g.n);
          if (g.bias == kRowBias || g.bias == kColBias) g.bias = g.bias == kRowBias ? kColBias : kRowBias;
          check_gemm(g, cfg, seed++);
        }
}

TEST(PortableGemm, ResidualAliasesOutput) {
  unsigned seed = 400;
  for (const Config* cfg : {(const Config*)nullptr, &kConfigs[0], &kConfigs[5]})
    for (int64_t k : {1, 5, 400, 1000})
      for (int64_t m : {2, 21}) {
        GemmCase g{2, m, 35, k};
        g.alias = true;
        g.bias = kColBias;
        g.act = {KILN_PK_ACT_LEAKY_RELU, 0.1f, 0};
        g.trans_a = k % 2 == 0;
        check_gemm(g, cfg, seed++);
      }
}

TEST(PortableGemm, Batches) {
  unsigned seed = 500;
  for (const Config* cfg : {(const Config*)nullptr, &kConfigs[3], &kConfigs[5]})
    for (bool batch_a : {true, false})
      for (bool batch_b : {true, false})
        for (int64_t c_gap : {0, 5})
          for (BiasMode bias : {kNoBias, kColBias, kRowBias})
            for (int64_t m : {1, 9}) {
              // batch_b == false, dense A and C, no row bias: folded into one
              // taller product; the other combinations are not.
              GemmCase g{3, m, 13, 10};
              g.batch_a = batch_a;
              g.batch_b = batch_b;
              g.c_gap = c_gap;
              g.bias = bias;
              g.residual = true;
              g.pad = c_gap ? 3 : 0;
              check_gemm(g, cfg, seed++);
            }
}

TEST(PortableGemm, ManySmallProducts) {
  // Small products of a batch run side by side, in groups, each with its own
  // part of the scratch; the results must not depend on that.
  unsigned seed = 550;
  for (const Config* cfg : {(const Config*)nullptr, &kConfigs[2], &kConfigs[5]}) {
    GemmCase attention{12, 64, 64, 32};  // Q K^T of 12 heads
    attention.trans_b = true;
    attention.alpha = 0.125f;
    check_gemm(attention, cfg, seed++);
    GemmCase many{37, 7, 9, 5};
    many.bias = kRowBias;
    many.residual = true;
    many.act = {KILN_PK_ACT_TANH, 0, 0};
    check_gemm(many, cfg, seed++);
    GemmCase big_items{3, 110, 100, 120};  // over the small-product size: split inside each
    big_items.batch_a = false;
    check_gemm(big_items, cfg, seed++);
  }
  EXPECT_GE(kiln_pk_gemm_scratch_bytes(37, 7, 9, 5), 16 * kiln_pk_gemm_scratch_bytes(1, 7, 9, 5));
}

TEST(PortableGemm, DegenerateSizes) {
  // k == 0: only the epilogue; m or n == 0: nothing written.
  unsigned seed = 600;
  for (const Config* cfg : {(const Config*)nullptr, &kConfigs[5]}) {
    GemmCase g{2, 5, 6, 0};
    g.bias = kRowBias;
    g.residual = true;
    g.act = {KILN_PK_ACT_SIGMOID, 0, 0};
    check_gemm(g, cfg, seed++);
    check_gemm(GemmCase{1, 0, 6, 3}, cfg, seed++);
    check_gemm(GemmCase{1, 4, 0, 3}, cfg, seed++);
    check_gemm(GemmCase{0, 4, 5, 3}, cfg, seed++);
  }
  EXPECT_EQ(kiln_pk_gemm_scratch_bytes(1, 0, 5, 5), 0u);
}

TEST(PortableGemm, RandomCases) {
  std::mt19937 rng(800);
  auto pick = [&](int64_t lo, int64_t hi) { return lo + int64_t(rng() % uint32_t(hi - lo + 1)); };
  for (int i = 0; i < 400; ++i) {
    GemmCase g{pick(1, 3), pick(1, 70), pick(1, 70), pick(1, 70)};
    g.trans_a = rng() & 1;
    g.trans_b = rng() & 1;
    g.batch_a = rng() % 4 != 0;
    g.batch_b = rng() % 4 != 0;
    g.bias = BiasMode(pick(0, 5));
    g.residual = rng() & 1;
    g.alias = !g.residual && rng() % 3 == 0;
    g.act = kActivations[pick(0, 9)];
    g.alpha = rng() & 1 ? 1.0f : -0.625f;
    g.beta = rng() & 1 ? 1.0f : 2.5f;
    g.pad = pick(0, 3);
    g.c_gap = pick(0, 1) * pick(1, 4);
    const int64_t which = pick(0, 6);
    check_gemm(g, which == 6 ? nullptr : &kConfigs[which], 10000 + unsigned(i));
  }
}

TEST(PortableGemm, SplitsWork) {
  // A product big enough to be worth several tasks goes through parallel_for.
  const int64_t before = g_parallel_calls;
  check_gemm(GemmCase{1, 96, 200, 64}, nullptr, 700);
  EXPECT_GT(g_parallel_calls - before, 0);
}

TEST(PortableGemm, ScratchIsAPureFunctionOfTheShape) {
  EXPECT_EQ(kiln_pk_gemm_scratch_bytes(4, 64, 3136, 576), kiln_pk_gemm_scratch_bytes(4, 64, 3136, 576));
  EXPECT_GT(kiln_pk_gemm_scratch_bytes(1, 64, 3136, 576), 0u);
  // Bounded by the blocking, not the product: packed panels only.
  EXPECT_LT(kiln_pk_gemm_scratch_bytes(1, 4096, 4096, 4096), size_t(16) << 20);
}

// --- convolution -------------------------------------------------------------

struct ConvCase {
  int64_t n, c, h, w, k, kh, kw;
  int64_t sh = 1, sw = 1, pt = 0, pl = 0, pb = 0, pr = 0, dh = 1, dw = 1, group = 1;
  bool bias = true, residual = false, alias = false;
  Act act = {KILN_PK_ACT_NONE, 0, 0};
  int64_t oh() const { return (h + pt + pb - dh * (kh - 1) - 1) / sh + 1; }
  int64_t ow() const { return (w + pl + pr - dw * (kw - 1) - 1) / sw + 1; }
};

std::string describe(const ConvCase& c) {
  std::ostringstream os;
  os << "n " << c.n << " c " << c.c << " h " << c.h << " w " << c.w << " k " << c.k << " kernel " << c.kh << "x" << c.kw
     << " stride " << c.sh << "," << c.sw << " pads " << c.pt << "," << c.pl << "," << c.pb << "," << c.pr << " dilation " << c.dh
     << "," << c.dw << " group " << c.group << " bias " << c.bias << " residual " << c.residual << " alias " << c.alias << " act "
     << c.act.kind;
  return os.str();
}

void check_conv(const ConvCase& cc, const Config* cfg, unsigned seed) {
  SCOPED_TRACE(describe(cc) + " config " + config_name(cfg));
  const int64_t oh = cc.oh(), ow = cc.ow(), cg = cc.c / cc.group, kg = cc.k / cc.group;
  ASSERT_GT(oh, 0);
  ASSERT_GT(ow, 0);
  const std::vector<float> x = random_values(size_t(cc.n * cc.c * cc.h * cc.w), seed);
  const std::vector<float> wt = random_values(size_t(cc.k * cg * cc.kh * cc.kw), seed + 1);
  const std::vector<float> bias = random_values(size_t(cc.k), seed + 2);
  const size_t y_size = size_t(cc.n * cc.k * oh * ow);
  const std::vector<float> residual = random_values(y_size, seed + 3);
  std::vector<double> ref(y_size), tol(y_size);
  for (int64_t b = 0; b < cc.n; ++b)
    for (int64_t o = 0; o < cc.k; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double s = cc.bias ? bias[o] : 0.0, mag = std::fabs(s);
          const int64_t g = o / kg;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t r = 0; r < cc.kh; ++r)
              for (int64_t t = 0; t < cc.kw; ++t) {
                const int64_t yy = i * cc.sh - cc.pt + r * cc.dh, xx = j * cc.sw - cc.pl + t * cc.dw;
                if (yy < 0 || yy >= cc.h || xx < 0 || xx >= cc.w) continue;
                const double v =
                    double(x[((b * cc.c + g * cg + ci) * cc.h + yy) * cc.w + xx]) * wt[((o * cg + ci) * cc.kh + r) * cc.kw + t];
                s += v;
                mag += std::fabs(v);
              }
          const size_t at = size_t(((b * cc.k + o) * oh + i) * ow + j);
          if (cc.residual || cc.alias) {
            s += residual[at];
            mag += std::fabs(residual[at]);
          }
          ref[at] = act_ref(s, cc.act);
          tol[at] = act_tolerance(1e-5 * mag + 1e-6, ref[at]);
        }
  auto run = [&](const kiln_pk_threads* threads, int32_t split = KILN_PK_SPLIT_ANY) {
    std::vector<float> y(y_size, kSentinel);
    if (cc.alias) y = residual;
    const float* res = cc.alias ? y.data() : cc.residual ? residual.data() : nullptr;
    Scratch scratch(
        kiln_pk_conv2d_scratch_bytes(cc.n, cc.c, cc.h, cc.w, cc.k, oh, ow, cc.kh, cc.kw, cc.sh, cc.sw, cc.dh, cc.dw, cc.group));
    const float* b = cc.bias ? bias.data() : nullptr;
    if (cfg)
      kiln::pk::conv2d_with_config(*cfg, threads, cc.n, cc.c, cc.h, cc.w, cc.k, oh, ow, cc.kh, cc.kw, cc.sh, cc.sw, cc.pt, cc.pl,
                                   cc.dh, cc.dw, cc.group, x.data(), wt.data(), b, res, y.data(), cc.act.kind, cc.act.alpha,
                                   cc.act.beta, split, scratch.get());
    else
      kiln_pk_conv2d(threads, cc.n, cc.c, cc.h, cc.w, cc.k, oh, ow, cc.kh, cc.kw, cc.sh, cc.sw, cc.pt, cc.pl, cc.dh, cc.dw,
                     cc.group, x.data(), wt.data(), b, res, y.data(), cc.act.kind, cc.act.alpha, cc.act.beta, split,
                     scratch.get());
    EXPECT_TRUE(scratch.guards_intact()) << "scratch overrun";
    return y;
  };
  const std::vector<float> serial = run(nullptr);
  EXPECT_TRUE(near_all(serial, ref, tol));
  EXPECT_TRUE(same_bits(serial, run(&kThreaded))) << "threaded result differs from serial";
  EXPECT_TRUE(same_bits(serial, run(&kThreaded, KILN_PK_SPLIT_CHANNELS))) << "split by channels changes the result";
  EXPECT_TRUE(same_bits(serial, run(&kNullFor))) << "a NULL parallel_for is not serial";
}

std::vector<ConvCase> conv_shapes() {
  std::vector<ConvCase> v;
  auto add = [&](ConvCase c) { v.push_back(c); };
  // 1x1 stride 1: the plain product (kg <= 4 takes the small path).
  add({2, 16, 7, 9, 24, 1, 1});
  add({1, 5, 3, 11, 3, 1, 1});
  add({1, 3, 1, 1, 10, 1, 1});
  // 1x1 with a stride or pads: im2col.
  {
    ConvCase c{1, 8, 9, 9, 12, 1, 1};
    c.sh = c.sw = 2;
    add(c);
  }
  {
    ConvCase c{1, 4, 5, 6, 6, 1, 1};
    c.pt = c.pl = c.pb = c.pr = 1;
    add(c);
  }
  // 3x3, same padding, odd sizes, several images.
  {
    ConvCase c{2, 7, 11, 13, 10, 3, 3};
    c.pt = c.pl = c.pb = c.pr = 1;
    add(c);
  }
  // Strided, asymmetric pads, rectangular kernel.
  {
    ConvCase c{1, 3, 17, 15, 9, 5, 3};
    c.sh = 2;
    c.sw = 3;
    c.pt = 2;
    c.pl = 0;
    c.pb = 1;
    c.pr = 2;
    add(c);
  }
  // Dilated.
  {
    ConvCase c{1, 4, 12, 12, 5, 3, 3};
    c.dh = 2;
    c.dw = 3;
    c.pt = 2;
    c.pl = 3;
    c.pb = 2;
    c.pr = 3;
    add(c);
  }
  // Grouped (several input channels per group) and many outputs per group.
  {
    ConvCase c{2, 8, 6, 7, 12, 3, 3};
    c.group = 4;
    c.pt = c.pl = c.pb = c.pr = 1;
    add(c);
  }
  {
    ConvCase c{1, 6, 5, 5, 6, 1, 1};
    c.group = 3;
    add(c);
  }
  {
    ConvCase c{1, 2, 5, 8, 20, 3, 3};
    c.group = 2;
    add(c);
  }  // cg == 1, 10 outputs per group: a product
  // Depthwise, with multiplier 1 and 2, strides, pads, dilation, wide rows
  // that take the vector path.
  {
    ConvCase c{2, 5, 9, 40, 5, 3, 3};
    c.group = 5;
    c.pt = c.pl = c.pb = c.pr = 1;
    add(c);
  }
  {
    ConvCase c{1, 3, 8, 37, 6, 3, 3};
    c.group = 3;
    c.sh = c.sw = 2;
    c.pt = c.pl = 1;
    c.pr = 1;
    add(c);
  }
  {
    ConvCase c{1, 4, 10, 50, 4, 5, 5};
    c.group = 4;
    c.dh = 2;
    c.dw = 2;
    c.pt = c.pl = c.pb = c.pr = 4;
    add(c);
  }
  {
    ConvCase c{1, 2, 6, 70, 2, 3, 7};
    c.group = 2;
    c.sw = 3;
    c.pl = 3;
    c.pr = 2;
    add(c);
  }
  {
    ConvCase c{1, 1, 3, 3, 2, 3, 3};
    c.group = 1;
    add(c);
  }  // one channel, two outputs: direct
  // Depthwise with stride 1 and the output as large as the input (the flat
  // kernel): several bands of rows, a 5x5 window, pads on one side only, a
  // plane smaller than one vector, multiplier 2, and rows too wide for it.
  {
    ConvCase c{1, 3, 30, 100, 3, 3, 3};
    c.group = 3;
    c.pt = c.pl = c.pb = c.pr = 1;
    add(c);
  }
  {
    ConvCase c{2, 4, 13, 11, 4, 5, 5};
    c.group = 4;
    c.pt = c.pl = c.pb = c.pr = 2;
    add(c);
  }
  {
    ConvCase c{1, 2, 9, 7, 2, 3, 3};
    c.group = 2;
    c.pt = 0;
    c.pb = 2;
    c.pl = 2;
    c.pr = 0;
    add(c);
  }
  {
    ConvCase c{1, 3, 1, 1, 3, 3, 3};
    c.group = 3;
    c.pt = c.pl = c.pb = c.pr = 1;
    add(c);
  }
  {
    ConvCase c{1, 3, 7, 7, 6, 3, 3};
    c.group = 3;
    c.pt = c.pl = c.pb = c.pr = 1;
    add(c);
  }
  {
    ConvCase c{1, 2, 3, 130, 2, 3, 3};
    c.group = 2;
    c.pt = c.pl = c.pb = c.pr = 1;
    add(c);
  }
  // Its stride-2 form (input split by row and column parity): even and odd
  // sizes, several bands, pads on one side, a 5x5 window, multiplier 2.
  {
    ConvCase c{1, 3, 40, 112, 3, 3, 3};
    c.group = 3;
    c.sh = c.sw = 2;
    c.pt = c.pl = c.pb = c.pr = 1;
    add(c);
  }
  {
    ConvCase c{2, 2, 15, 13, 4, 3, 3};
    c.group = 2;
    c.sh = c.sw = 2;
    c.pt = c.pl = c.pb = c.pr = 1;
    add(c);
  }
  {
    ConvCase c{1, 2, 9, 10, 2, 3, 3};
    c.group = 2;
    c.sh = c.sw = 2;
    c.pt = 0;
    c.pl = 2;
    c.pb = 2;
    c.pr = 0;
    add(c);
  }
  {
    ConvCase c{1, 3, 17, 17, 3, 5, 5};
    c.group = 3;
    c.sh = c.sw = 2;
    c.pt = c.pl = c.pb = c.pr = 2;
    add(c);
  }
  // Depthwise rows wider than the kernel's stack buffer: column segments
  // (with dilation, the ring holds more rows; with stride 2, vectors read
  // one float past their last tap).
  {
    ConvCase c{1, 2, 4, 1500, 2, 3, 3};
    c.group = 2;
    c.pt = c.pl = c.pb = c.pr = 1;
    add(c);
  }
  {
    ConvCase c{1, 2, 9, 1400, 4, 3, 3};
    c.group = 2;
    c.dh = 2;
    c.pt = c.pb = 2;
    c.pl = c.pr = 1;
    add(c);
  }
  {
    ConvCase c{1, 2, 5, 1701, 2, 3, 3};
    c.group = 2;
    c.sh = c.sw = 2;
    c.pl = c.pr = 1;
    add(c);
  }
  // A kernel too tall for the depthwise kernel: a product per group.
  {
    ConvCase c{1, 2, 20, 9, 2, 17, 3};
    c.group = 2;
    c.pl = 1;
    add(c);
  }
  // 1-D (h = kh = 1), plain and depthwise.
  {
    ConvCase c{2, 6, 1, 50, 8, 1, 5};
    c.pl = 2;
    c.pr = 2;
    add(c);
  }
  {
    ConvCase c{1, 4, 1, 33, 4, 1, 3};
    c.group = 4;
    c.sw = 2;
    c.pl = 1;
    add(c);
  }
  // Kernel as big as the padded input: one output.
  {
    ConvCase c{1, 3, 4, 4, 5, 4, 4};
    add(c);
  }
  // Enough depth for two k panels and a long row of outputs.
  {
    ConvCase c{1, 48, 10, 10, 9, 3, 3};
    c.pt = c.pl = c.pb = c.pr = 1;
    add(c);
  }
  // A projection: 1x1, more input channels than kDirectBDepth, few outputs
  // (B read in place).
  {
    ConvCase c{1, 150, 7, 9, 21, 1, 1};
    c.residual = true;
    add(c);
  }
  // A late layer's shape (B packed whole): a 7x7 plane (a full sliver and
  // one column left, every tile width), three k panels, rows that end in a
  // short tile, the output as its own residual.
  {
    ConvCase c{1, 100, 7, 7, 19, 3, 3};
    c.pt = c.pl = c.pb = c.pr = 1;
    c.alias = true;
    add(c);
  }
  // More output positions than one column chunk (kNC = 3072): a stem's
  // shallow im2col (27 rows, each sliver packed by the task that uses it)
  // and a deeper one (72 rows, packed a column chunk at a time).
  {
    ConvCase c{1, 3, 60, 60, 8, 3, 3};
    c.pt = c.pl = c.pb = c.pr = 1;
    add(c);
  }
  {
    ConvCase c{1, 8, 60, 60, 5, 3, 3};
    c.pt = c.pl = c.pb = c.pr = 1;
    add(c);
  }
  {
    ConvCase c{1, 3, 57, 61, 11, 3, 3};
    c.sh = c.sw = 2;
    c.pt = c.pl = 1;
    add(c);
  }  // stride 2, odd sizes
  return v;
}

TEST(PortableConv, Shapes) {
  unsigned seed = 1000;
  for (ConvCase c : conv_shapes()) {
    check_conv(c, nullptr, seed++);
    c.bias = !c.bias;
    c.residual = true;
    c.act = {KILN_PK_ACT_RELU, 0, 0};
    check_conv(c, nullptr, seed++);
  }
}

TEST(PortableConv, EveryVariant) {
  unsigned seed = 1100;
  for (const Config& cfg : kConfigs)
    for (const ConvCase& c : conv_shapes()) check_conv(c, &cfg, seed++);
}

TEST(PortableConv, RandomCases) {
  std::mt19937 rng(1300);
  auto pick = [&](int64_t lo, int64_t hi) { return lo + int64_t(rng() % uint32_t(hi - lo + 1)); };
  int done = 0;
  for (int i = 0; done < 250; ++i) {
    const bool depthwise = rng() % 3 == 0;
    const int64_t group = depthwise ? pick(1, 6) : pick(1, 3);
    const int64_t cg = depthwise ? 1 : pick(1, 5), kg = depthwise ? pick(1, 2) : pick(1, 6);
    ConvCase c{pick(1, 2), cg * group, pick(1, 12), pick(1, 24), kg * group, pick(1, 4), pick(1, 4)};
    c.group = group;
    c.sh = pick(1, 3);
    c.sw = pick(1, 3);
    c.dh = pick(1, 2);
    c.dw = pick(1, 2);
    c.pt = pick(0, 2), c.pb = pick(0, 2), c.pl = pick(0, 2), c.pr = pick(0, 2);
    // Pads smaller than the (dilated) kernel, as ONNX requires.
    if (c.pt >= c.dh * (c.kh - 1) + 1 || c.pb >= c.dh * (c.kh - 1) + 1 || c.pl >= c.dw * (c.kw - 1) + 1 ||
        c.pr >= c.dw * (c.kw - 1) + 1 || c.oh() < 1 || c.ow() < 1)
      continue;
    c.bias = rng() & 1;
    c.residual = rng() & 1;
    c.alias = !c.residual && rng() & 1;
    c.act = kActivations[pick(0, 9)];
    const int64_t which = pick(0, 6);
    check_conv(c, which == 6 ? nullptr : &kConfigs[which], 20000 + unsigned(i));
    ++done;
  }
}

TEST(PortableConv, Epilogues) {
  unsigned seed = 1200;
  for (const Act& act : kActivations)
    for (int group : {1, 4}) {  // product and depthwise
      ConvCase c{1, 4, 6, 21, 4, 3, 3};
      c.group = group;
      c.pt = c.pl = c.pb = c.pr = 1;
      c.act = act;
      c.alias = true;
      check_conv(c, nullptr, seed++);
      check_conv(c, &kConfigs[5], seed++);
    }
}

TEST(PortableConv, ScratchIgnoresPadsAndDepthwiseNeedsNone) {
  EXPECT_EQ(kiln_pk_conv2d_scratch_bytes(1, 32, 56, 56, 32, 56, 56, 3, 3, 1, 1, 1, 1, 32), 0u);
  EXPECT_GT(kiln_pk_conv2d_scratch_bytes(1, 64, 56, 56, 64, 56, 56, 3, 3, 1, 1, 1, 1, 1), 0u);
}

// --- pooling -----------------------------------------------------------------

struct PoolCase {
  int64_t planes, h, w, kh, kw;
  int64_t sh = 1, sw = 1, pt = 0, pl = 0, pb = 0, pr = 0, dh = 1, dw = 1;
  int64_t oh() const { return (h + pt + pb - dh * (kh - 1) - 1) / sh + 1; }
  int64_t ow() const { return (w + pl + pr - dw * (kw - 1) - 1) / sw + 1; }
};

std::vector<PoolCase> pool_shapes() {
  std::vector<PoolCase> v;
  v.push_back({3, 8, 8, 2, 2, 2, 2});
  v.push_back({2, 9, 37, 3, 3, 1, 1, 1, 1, 1, 1});
  v.push_back({5, 11, 13, 3, 3, 2, 2, 1, 1, 1, 1});  // resnet stem
  v.push_back({1, 7, 50, 3, 5, 2, 3, 1, 2, 0, 2});
  v.push_back({2, 1, 45, 1, 4, 1, 1, 0, 2, 0, 1});    // 1-D
  v.push_back({1, 5, 5, 5, 5});                       // one window
  v.push_back({40, 4, 4, 2, 2, 1, 1, 1, 1, 1, 1});    // many small planes
  v.push_back({1, 3, 3000, 3, 3, 1, 1, 1, 1, 1, 1});  // rows wider than the window buffer: segments
  v.push_back({1, 4, 3001, 3, 3, 2, 2, 1, 1, 0, 1});  // the same with stride 2
  v.push_back({2, 20, 6, 17, 2, 1, 1, 0, 0});         // too tall for the window engine
  return v;
}

void run_pool_twice(const std::function<void(const kiln_pk_threads*, std::vector<float>&)>& fn, size_t size,
                    std::vector<float>& serial) {
  serial.assign(size, kSentinel);
  fn(nullptr, serial);
  std::vector<float> threaded(size, kSentinel);
  fn(&kThreaded, threaded);
  EXPECT_TRUE(same_bits(serial, threaded)) << "threaded result differs from serial";
}

TEST(PortablePool, MaxPool) {
  unsigned seed = 2000;
  std::vector<PoolCase> cases = pool_shapes();
  {
    PoolCase c{2, 12, 40, 3, 3, 1, 2, 2, 2, 2, 2, 2, 2};
    cases.push_back(c);
  }  // dilated
  for (const PoolCase& pc : cases) {
    const int64_t oh = pc.oh(), ow = pc.ow();
    SCOPED_TRACE(testing::Message() << "planes " << pc.planes << " " << pc.h << "x" << pc.w << " kernel " << pc.kh << "x" << pc.kw
                                    << " out " << oh << "x" << ow);
    std::vector<float> x = random_values(size_t(pc.planes * pc.h * pc.w), seed++);
    x[x.size() / 2] = std::numeric_limits<float>::quiet_NaN();
    std::vector<double> ref(size_t(pc.planes * oh * ow));
    for (int64_t p = 0; p < pc.planes; ++p)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double m = -INFINITY;
          for (int64_t r = 0; r < pc.kh; ++r)
            for (int64_t t = 0; t < pc.kw; ++t) {
              const int64_t yy = i * pc.sh - pc.pt + r * pc.dh, xx = j * pc.sw - pc.pl + t * pc.dw;
              if (yy < 0 || yy >= pc.h || xx < 0 || xx >= pc.w) continue;
              const double v = x[(p * pc.h + yy) * pc.w + xx];
              if (std::isnan(v) || std::isnan(m))
                m = NAN;
              else
                m = std::max(m, v);
            }
          ref[(p * oh + i) * ow + j] = m;
        }
    std::vector<float> y;
    run_pool_twice(
        [&](const kiln_pk_threads* t, std::vector<float>& out) {
          kiln_pk_max_pool2d(t, pc.planes, pc.h, pc.w, oh, ow, pc.kh, pc.kw, pc.sh, pc.sw, pc.pt, pc.pl, pc.dh, pc.dw, x.data(),
                             out.data());
        },
        ref.size(), y);
    EXPECT_TRUE(near_all(y, ref, 0, 0));
  }
}

TEST(PortablePool, AveragePool) {
  unsigned seed = 2100;
  for (const PoolCase& pc : pool_shapes())
    for (int include_pad : {0, 1}) {
      const int64_t oh = pc.oh(), ow = pc.ow();
      SCOPED_TRACE(testing::Message() << "planes " << pc.planes << " " << pc.h << "x" << pc.w << " kernel " << pc.kh << "x"
                                      << pc.kw << " include_pad " << include_pad);
      const std::vector<float> x = random_values(size_t(pc.planes * pc.h * pc.w), seed++);
      std::vector<double> ref(size_t(pc.planes * oh * ow));
      for (int64_t p = 0; p < pc.planes; ++p)
        for (int64_t i = 0; i < oh; ++i)
          for (int64_t j = 0; j < ow; ++j) {
            double s = 0;
            int64_t count = 0;
            for (int64_t r = 0; r < pc.kh; ++r)
              for (int64_t t = 0; t < pc.kw; ++t) {
                const int64_t yy = i * pc.sh - pc.pt + r, xx = j * pc.sw - pc.pl + t;
                if (yy < 0 || yy >= pc.h || xx < 0 || xx >= pc.w) continue;
                s += x[(p * pc.h + yy) * pc.w + xx];
                ++count;
              }
            ref[(p * oh + i) * ow + j] = s / double(include_pad ? pc.kh * pc.kw : count);
          }
      std::vector<float> y;
      run_pool_twice(
          [&](const kiln_pk_threads* t, std::vector<float>& out) {
            kiln_pk_avg_pool2d(t, pc.planes, pc.h, pc.w, oh, ow, pc.kh, pc.kw, pc.sh, pc.sw, pc.pt, pc.pl, include_pad, x.data(),
                               out.data());
          },
          ref.size(), y);
      EXPECT_TRUE(near_all(y, ref, 1e-5, 1e-6));
    }
}

TEST(PortablePool, GlobalPool) {
  unsigned seed = 2200;
  for (int64_t planes : {1, 3, 200})
    for (int64_t size : {1, 7, 16, 49, 64, 100, 1031})
      for (int is_max : {0, 1}) {
        SCOPED_TRACE(testing::Message() << "planes " << planes << " size " << size << " max " << is_max);
        std::vector<float> x = random_values(size_t(planes * size), seed++);
        if (is_max && size > 1) x[size_t(size / 2)] = std::numeric_limits<float>::quiet_NaN();
        std::vector<double> ref(static_cast<size_t>(planes));
        for (int64_t p = 0; p < planes; ++p) {
          double acc = is_max ? -INFINITY : 0.0;
          for (int64_t i = 0; i < size; ++i) {
            const double v = x[p * size + i];
            if (!is_max)
              acc += v;
            else if (std::isnan(v) || std::isnan(acc))
              acc = NAN;
            else
              acc = std::max(acc, v);
          }
          ref[p] = is_max ? acc : acc / double(size);
        }
        std::vector<float> y;
        run_pool_twice([&](const kiln_pk_threads* t,
                           std::vector<float>& out) { kiln_pk_global_pool(t, planes, size, is_max, x.data(), out.data()); },
                       ref.size(), y);
        EXPECT_TRUE(near_all(y, ref, 1e-5, 1e-6));
      }
}

// --- reductions, softmax, layer norm ------------------------------------------

double reduce_ref(int op, const std::vector<double>& v) {
  const double inf = INFINITY;
  double acc = 0;
  switch (op) {
    case KILN_PK_REDUCE_MAX:
    case KILN_PK_REDUCE_MIN:
      acc = op == KILN_PK_REDUCE_MAX ? -inf : inf;
      for (double x : v) {
        if (std::isnan(x)) return x;
        acc = op == KILN_PK_REDUCE_MAX ? std::max(acc, x) : std::min(acc, x);
      }
      return acc;
    case KILN_PK_REDUCE_PROD:
      acc = 1;
      for (double x : v) acc *= x;
      return acc;
    case KILN_PK_REDUCE_LOG_SUM_EXP: {
      const double m = reduce_ref(KILN_PK_REDUCE_MAX, v);
      if (!std::isfinite(m)) return m;
      for (double x : v) acc += std::exp(x - m);
      return m + std::log(acc);
    }
    default:
      for (double x : v)
        acc += op == KILN_PK_REDUCE_L1 ? std::fabs(x) : op == KILN_PK_REDUCE_L2 || op == KILN_PK_REDUCE_SUM_SQUARE ? x * x : x;
      if (op == KILN_PK_REDUCE_L2) return std::sqrt(acc);
      if (op == KILN_PK_REDUCE_MEAN) return acc / double(v.size());
      return acc;
  }
}

TEST(PortableReduce, EveryOpAndLayout) {
  unsigned seed = 3000;
  const int64_t shapes[][3] = {{1, 1, 1},   {3, 7, 1},    {2, 100, 1}, {5, 1, 9},   {2, 6, 17}, {1, 33, 64},
                               {4, 3, 130}, {1, 1000, 1}, {7, 13, 5},  {300, 4, 1}, {2, 2, 500}};
  for (int op = KILN_PK_REDUCE_SUM; op <= KILN_PK_REDUCE_LOG_SUM_EXP; ++op)
    for (const auto& s : shapes) {
      const int64_t outer = s[0], len = s[1], inner = s[2];
      SCOPED_TRACE(testing::Message() << "op " << op << " outer " << outer << " len " << len << " inner " << inner);
      std::vector<float> x = random_values(size_t(outer * len * inner), seed++);
      if (op == KILN_PK_REDUCE_PROD)  // keep products of many terms in range
        for (float& v : x) v = 1.0f + 0.05f * v;
      if (op == KILN_PK_REDUCE_LOG_SUM_EXP)
        for (float& v : x) v *= 20.0f;
      std::vector<double> ref(size_t(outer * inner)), tol(ref.size());
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < inner; ++j) {
          std::vector<double> v;
          double mag = 0;
          for (int64_t l = 0; l < len; ++l) {
            v.push_back(x[(o * len + l) * inner + j]);
            mag += std::fabs(v.back()) * (op == KILN_PK_REDUCE_L2 || op == KILN_PK_REDUCE_SUM_SQUARE ? std::fabs(v.back()) : 1);
          }
          const double r = reduce_ref(op, v);
          ref[o * inner + j] = r;
          tol[o * inner + j] =
              1e-5 * (op == KILN_PK_REDUCE_SUM || op == KILN_PK_REDUCE_MEAN ? mag / (op == KILN_PK_REDUCE_MEAN ? len : 1)
                                                                            : std::fabs(r)) +
              2e-6 * std::fabs(r) + 1e-6;
        }
      std::vector<float> y;
      run_pool_twice([&](const kiln_pk_threads* t,
                         std::vector<float>& out) { kiln_pk_reduce(t, outer, len, inner, op, x.data(), out.data()); },
                     ref.size(), y);
      EXPECT_TRUE(near_all(y, ref, tol));
    }
}

TEST(PortableReduce, NaNsAndInfinities) {
  for (int op : {KILN_PK_REDUCE_MAX, KILN_PK_REDUCE_MIN, KILN_PK_REDUCE_LOG_SUM_EXP})
    for (int64_t inner : {1, 20}) {
      SCOPED_TRACE(testing::Message() << "op " << op << " inner " << inner);
      const int64_t len = 40;
      std::vector<float> x = random_values(size_t(2 * len * inner), 3100 + unsigned(op));
      x[size_t(5 * inner)] = std::numeric_limits<float>::quiet_NaN();         // outer 0
      x[size_t((len + 7) * inner)] = std::numeric_limits<float>::infinity();  // outer 1
      std::vector<double> ref(size_t(2 * inner));
      for (int64_t o = 0; o < 2; ++o)
        for (int64_t j = 0; j < inner; ++j) {
          std::vector<double> v;
          for (int64_t l = 0; l < len; ++l) v.push_back(x[(o * len + l) * inner + j]);
          ref[o * inner + j] = reduce_ref(op, v);
        }
      std::vector<float> y(ref.size());
      kiln_pk_reduce(nullptr, 2, len, inner, op, x.data(), y.data());
      EXPECT_TRUE(near_all(y, ref, 1e-5, 1e-6));
    }
}

TEST(PortableSoftmax, RowsAndColumns) {
  unsigned seed = 4000;
  const int64_t shapes[][3] = {{1, 1, 1}, {1, 10, 1}, {3, 17, 1}, {2, 1000, 1}, {200, 7, 1},
                               {2, 5, 3}, {1, 9, 16}, {3, 4, 37}, {2, 64, 40},  {1, 3, 1000}};
  // An offset of 10000 is ONNX's test_logsoftmax_large_number: x - (m + log
  // sum) in float would round away most of log sum.
  for (float offset : {0.0f, 10000.0f})
    for (int is_log : {0, 1})
      for (const auto& s : shapes) {
        const int64_t outer = s[0], len = s[1], inner = s[2];
        SCOPED_TRACE(testing::Message() << "log " << is_log << " outer " << outer << " len " << len << " inner " << inner
                                        << " offset " << offset);
        std::vector<float> x = random_values(size_t(outer * len * inner), seed++);
        for (float& v : x) v = v * 30.0f + offset;  // exp over a wide range, overflow without the max
        std::vector<double> ref(x.size()), tol(x.size());
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t j = 0; j < inner; ++j) {
            double m = -INFINITY, sum = 0;
            for (int64_t l = 0; l < len; ++l) m = std::max(m, double(x[(o * len + l) * inner + j]));
            for (int64_t l = 0; l < len; ++l) sum += std::exp(x[(o * len + l) * inner + j] - m);
            for (int64_t l = 0; l < len; ++l) {
              const size_t at = size_t((o * len + l) * inner + j);
              ref[at] = is_log ? x[at] - m - std::log(sum) : std::exp(x[at] - m) / sum;
              tol[at] = 1e-5 * std::fabs(ref[at]) + 1e-6;
            }
          }
        std::vector<float> y;
        run_pool_twice([&](const kiln_pk_threads* t,
                           std::vector<float>& out) { kiln_pk_softmax(t, outer, len, inner, is_log, x.data(), out.data()); },
                       ref.size(), y);
        EXPECT_TRUE(near_all(y, ref, tol));
        // In place, as a lowering may ask.
        std::vector<float> in_place = x;
        kiln_pk_softmax(&kThreaded, outer, len, inner, is_log, in_place.data(), in_place.data());
        EXPECT_TRUE(same_bits(y, in_place)) << "in-place softmax differs";
      }
}

TEST(PortableLayerNorm, RowsAndOptionalParameters) {
  unsigned seed = 5000;
  const int64_t shapes[][2] = {{1, 1}, {1, 7}, {3, 16}, {5, 33}, {2, 768}, {300, 20}, {4, 1001}};
  for (const auto& s : shapes)
    for (int params = 0; params < 4; ++params) {
      const int64_t rows = s[0], cols = s[1];
      SCOPED_TRACE(testing::Message() << rows << " x " << cols << " params " << params);
      std::vector<float> x = random_values(size_t(rows * cols), seed++);
      for (float& v : x) v = 3.0f + 2.0f * v;  // a mean far from 0
      const std::vector<float> scale = random_values(size_t(cols), seed++), bias = random_values(size_t(cols), seed++);
      const float* sp = params & 1 ? scale.data() : nullptr;
      const float* bp = params & 2 ? bias.data() : nullptr;
      const float eps = 1e-5f;
      std::vector<double> ref(x.size());
      for (int64_t r = 0; r < rows; ++r) {
        double mean = 0, var = 0;
        for (int64_t c = 0; c < cols; ++c) mean += x[r * cols + c];
        mean /= double(cols);
        for (int64_t c = 0; c < cols; ++c) var += (x[r * cols + c] - mean) * (x[r * cols + c] - mean);
        var /= double(cols);
        for (int64_t c = 0; c < cols; ++c)
          ref[r * cols + c] = (x[r * cols + c] - mean) / std::sqrt(var + eps) * (sp ? sp[c] : 1.0) + (bp ? bp[c] : 0.0);
      }
      std::vector<float> y;
      run_pool_twice(
          [&](const kiln_pk_threads* t, std::vector<float>& out) {
            kiln_pk_layer_norm(t, rows, cols, eps, x.data(), sp, bp, out.data(), nullptr, nullptr);
          },
          ref.size(), y);
      EXPECT_TRUE(near_all(y, ref, 1e-4, 1e-5));
    }
}

// --- copies and gather --------------------------------------------------------

struct StridedCase {
  std::vector<int64_t> dims, strides;
  int64_t offset;
};

// Runs kiln_pk_strided_copy of `src` (bytes) with element size es and checks
// every element against the naive index formula.
void check_strided(const StridedCase& sc, int64_t es, const std::vector<unsigned char>& src) {
  std::ostringstream what;
  what << "dims";
  for (int64_t d : sc.dims) what << " " << d;
  what << " strides";
  for (int64_t s : sc.strides) what << " " << s;
  what << " offset " << sc.offset << " element " << es;
  SCOPED_TRACE(what.str());
  const int rank = int(sc.dims.size());
  int64_t count = 1;
  for (int64_t d : sc.dims) count *= d;
  std::vector<unsigned char> expect(size_t(count * es));
  std::vector<int64_t> idx(size_t(rank), 0);
  for (int64_t e = 0; e < count; ++e) {
    int64_t rem = e, off = sc.offset;
    for (int d = rank - 1; d >= 0; --d) {
      off += rem % sc.dims[size_t(d)] * sc.strides[size_t(d)];
      rem /= sc.dims[size_t(d)];
    }
    ASSERT_GE(off, 0);
    ASSERT_LE((off + 1) * es, int64_t(src.size()));
    std::memcpy(&expect[size_t(e * es)], &src[size_t(off * es)], size_t(es));
  }
  for (const kiln_pk_threads* t : {(const kiln_pk_threads*)nullptr, &kThreaded}) {
    std::vector<unsigned char> got(size_t(count * es) + 16, 0x5a);
    kiln_pk_strided_copy(t, rank, sc.dims.data(), sc.strides.data(), sc.offset, es, src.data(), got.data());
    EXPECT_EQ(0, std::memcmp(got.data(), expect.data(), expect.size())) << (t ? "threaded" : "serial");
    for (size_t i = expect.size(); i < got.size(); ++i) ASSERT_EQ(got[i], 0x5a) << "wrote past the end";
  }
}

std::vector<int64_t> dense_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size());
  int64_t acc = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    s[i] = acc;
    acc *= dims[i];
  }
  return s;
}

TEST(PortableCopy, StridedViews) {
  std::vector<unsigned char> src(1 << 20);
  std::mt19937 rng(6000);
  for (auto& b : src) b = static_cast<unsigned char>(rng());
  std::vector<StridedCase> cases;
  // Dense (one memcpy), rank 0, unit dims.
  cases.push_back({{4, 5, 6}, {30, 6, 1}, 0});
  cases.push_back({{}, {}, 7});
  cases.push_back({{1, 1, 1}, {5, 5, 5}, 3});
  // Transposes of 2, 3 and 4 dims (the last with odd, prime sizes).
  cases.push_back({{7, 5}, {1, 7}, 0});
  cases.push_back({{33, 47}, {1, 33}, 0});
  cases.push_back({{3, 19, 23}, {19 * 23, 1, 19}, 0});
  cases.push_back({{2, 3, 4, 5}, {60, 1, 15, 3}, 0});  // NCHW -> NHWC-like
  cases.push_back({{5, 4, 3, 2}, {1, 5, 20, 60}, 0});  // full reversal of axes
  cases.push_back({{17, 2, 31}, {2, 1, 34}, 0});
  // Slices with an offset, steps, and negative steps (reversal).
  cases.push_back({{3, 4}, {10, 1}, 12});
  cases.push_back({{5, 6}, {20, 3}, 4});
  cases.push_back({{10}, {-1}, 9});
  cases.push_back({{4, 6}, {-6, -1}, 23});
  cases.push_back({{3, 5, 7}, {35, -7, 1}, 28});
  cases.push_back({{6, 9}, {-1, 6}, 5});  // transposed and reversed
  // Broadcasts (Expand): stride 0, including innermost.
  cases.push_back({{4, 8}, {0, 1}, 0});
  cases.push_back({{5, 6}, {1, 0}, 0});
  cases.push_back({{2, 3, 4}, {0, 0, 0}, 11});
  // Rank 8.
  cases.push_back({{2, 1, 2, 3, 1, 2, 2, 3}, {}, 0});
  cases.back().strides = dense_strides(cases.back().dims);
  std::swap(cases.back().strides[0], cases.back().strides[7]);
  std::swap(cases.back().dims[0], cases.back().dims[7]);
  // Big enough to be split: a 2-D transpose and a row copy.
  cases.push_back({{300, 200}, {1, 300}, 0});
  cases.push_back({{500, 100}, {120, 1}, 3});
  for (const StridedCase& sc : cases)
    for (int64_t es : {1, 2, 4, 8, 3, 12}) {
      bool fits = true;
      int64_t hi = sc.offset;
      for (size_t d = 0; d < sc.dims.size(); ++d) hi += (sc.dims[d] - 1) * std::max<int64_t>(0, sc.strides[d]);
      if ((hi + 1) * es > int64_t(src.size())) fits = false;
      if (fits) check_strided(sc, es, src);
    }
}

TEST(PortableCopy, CopyRows) {
  std::vector<unsigned char> src(1 << 21);
  std::mt19937 rng(6100);
  for (auto& b : src) b = static_cast<unsigned char>(rng());
  struct Case {
    int64_t rows, row_bytes, src_stride, dst_stride;
  } cases[] = {{1, 1, 1, 1},         {1, 100, 100, 100}, {7, 12, 20, 12},
               {5, 3, 3, 8},         {1000, 4, 4, 4},    {1, 1 << 20, 1 << 20, 1 << 20},
               {300, 100, 1000, 260}};
  for (const Case& c : cases)
    for (const kiln_pk_threads* t : {(const kiln_pk_threads*)nullptr, &kThreaded}) {
      SCOPED_TRACE(testing::Message() << c.rows << " rows of " << c.row_bytes);
      const size_t dst_size = size_t((c.rows - 1) * c.dst_stride + c.row_bytes);
      std::vector<unsigned char> dst(dst_size + 8, 0x5a), expect(dst_size + 8, 0x5a);
      for (int64_t r = 0; r < c.rows; ++r)
        std::memcpy(&expect[size_t(r * c.dst_stride)], &src[size_t(r * c.src_stride)], size_t(c.row_bytes));
      kiln_pk_copy_rows(t, c.rows, c.row_bytes, src.data(), c.src_stride, dst.data(), c.dst_stride);
      EXPECT_EQ(dst, expect);
    }
}

TEST(PortableGather, IndicesAndErrors) {
  std::vector<unsigned char> data(4096);
  std::mt19937 rng(7000);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  for (int64_t inner : {1, 4, 8, 12})
    for (int is_64 : {0, 1})
      for (int64_t outer : {1, 3, 50}) {
        SCOPED_TRACE(testing::Message() << "inner " << inner << " 64-bit " << is_64 << " outer " << outer);
        const int64_t axis = 5;
        const std::vector<int64_t> idx = {0, 4, -1, -5, 2, 2, 3, -2};
        std::vector<int32_t> idx32(idx.begin(), idx.end());
        const void* ip = is_64 ? static_cast<const void*>(idx.data()) : static_cast<const void*>(idx32.data());
        const int64_t num = int64_t(idx.size());
        std::vector<unsigned char> expect(size_t(outer * num * inner));
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < num; ++i) {
            const int64_t at = idx[size_t(i)] < 0 ? idx[size_t(i)] + axis : idx[size_t(i)];
            std::memcpy(&expect[size_t((o * num + i) * inner)], &data[size_t((o * axis + at) * inner)], size_t(inner));
          }
        for (const kiln_pk_threads* t : {(const kiln_pk_threads*)nullptr, &kThreaded}) {
          std::vector<unsigned char> got(expect.size() + 4, 0x5a);
          EXPECT_EQ(0, kiln_pk_gather(t, outer, axis, inner, num, is_64, ip, data.data(), got.data()));
          EXPECT_EQ(0, std::memcmp(got.data(), expect.data(), expect.size()));
          for (size_t i = expect.size(); i < got.size(); ++i) ASSERT_EQ(got[i], 0x5a);
        }
        // Out of range on either side: 1 + the first bad position.
        for (int64_t bad : {int64_t(5), int64_t(-6), int64_t(1000)}) {
          std::vector<int64_t> b = idx;
          b[3] = bad;
          b[6] = bad;
          std::vector<int32_t> b32(b.begin(), b.end());
          const void* bp = is_64 ? static_cast<const void*>(b.data()) : static_cast<const void*>(b32.data());
          std::vector<unsigned char> got(expect.size());
          EXPECT_EQ(4, kiln_pk_gather(&kThreaded, outer, axis, inner, num, is_64, bp, data.data(), got.data()));
        }
      }
  // 64-bit indices beyond the int32 range are errors too, not wrapped.
  const int64_t huge[] = {1, int64_t(1) << 33};
  float d[4] = {1, 2, 3, 4}, out[2];
  EXPECT_EQ(2, kiln_pk_gather(nullptr, 1, 4, 4, 2, 1, huge, d, out));
}

// --- quantized models ----------------------------------------------------------

// Random 8-bit values of `type` (KILN_PK_UINT8 / _INT8) as bytes.
std::vector<uint8_t> random_8bit(size_t n, int32_t type, std::mt19937& rng) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(rng());
  (void)type;
  return v;
}
int32_t value_8bit(int32_t type, const std::vector<uint8_t>& v, size_t i) {
  return type == KILN_PK_INT8 ? int32_t(int8_t(v[i])) : int32_t(v[i]);
}
// What a requantized output holds, by the definition in kernels.h.
int32_t requantized(double sum, float scale, int32_t type, int32_t zero) {
  const double q = std::nearbyint(double(float(sum) * scale)) + zero;
  return int32_t(std::clamp(q, type == KILN_PK_INT8 ? -128.0 : 0.0, type == KILN_PK_INT8 ? 127.0 : 255.0));
}

struct QConvCase {
  ConvCase shape;
  int32_t x_type, y_type;  // y_type KILN_PK_INT32: the sums
  bool per_channel = true;
};

void check_qconv(const QConvCase& qc, const Config* cfg, unsigned seed) {
  const ConvCase& cc = qc.shape;
  SCOPED_TRACE(describe(cc) + " x " + std::to_string(qc.x_type) + " y " + std::to_string(qc.y_type) + " config " +
               config_name(cfg));
  std::mt19937 rng(seed);
  const int64_t oh = cc.oh(), ow = cc.ow(), cg = cc.c / cc.group, kg = cc.k / cc.group;
  const std::vector<uint8_t> x = random_8bit(size_t(cc.n * cc.c * cc.h * cc.w), qc.x_type, rng);
  std::vector<int8_t> wt(size_t(cc.k * cg * cc.kh * cc.kw));
  for (auto& v : wt) v = int8_t(rng());  // full range: -128 too
  std::vector<int32_t> bias(size_t(cc.k));
  for (auto& b : bias) b = int32_t(rng() % 20001) - 10000;
  std::vector<float> scales(qc.per_channel ? size_t(cc.k) : 1);
  for (auto& f : scales) f = 0.0001f + float(rng() % 1000) * 1e-6f;
  const uint8_t x_zero = uint8_t(rng()), y_zero = uint8_t(rng());
  const int32_t xz = value_8bit(qc.x_type, {x_zero}, 0),
                yz = value_8bit(qc.y_type == KILN_PK_INT8 ? KILN_PK_INT8 : KILN_PK_UINT8, {y_zero}, 0);
  const bool sums = qc.y_type == KILN_PK_INT32;
  const size_t y_size = size_t(cc.n * cc.k * oh * ow);
  std::vector<int32_t> want(y_size);
  for (int64_t b = 0; b < cc.n; ++b)
    for (int64_t o = 0; o < cc.k; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          int64_t s = cc.bias ? bias[size_t(o)] : 0;
          const int64_t g = o / kg;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t r = 0; r < cc.kh; ++r)
              for (int64_t t = 0; t < cc.kw; ++t) {
                const int64_t yy = i * cc.sh - cc.pt + r * cc.dh, xx = j * cc.sw - cc.pl + t * cc.dw;
                if (yy < 0 || yy >= cc.h || xx < 0 || xx >= cc.w) continue;
                const int64_t xv = value_8bit(qc.x_type, x, size_t(((b * cc.c + g * cg + ci) * cc.h + yy) * cc.w + xx)) - xz;
                s += xv * wt[size_t(((o * cg + ci) * cc.kh + r) * cc.kw + t)];
              }
          const size_t at = size_t(((b * cc.k + o) * oh + i) * ow + j);
          want[at] = sums ? int32_t(s) : requantized(double(s), scales[qc.per_channel ? size_t(o) : 0], qc.y_type, yz);
        }
  const size_t bytes = kiln_pk_qconv2d_scratch_bytes(cc.c, cc.k, oh, ow, cc.kh, cc.kw, cc.group);
  const size_t elem = sums ? 4 : 1;
  std::vector<std::vector<uint8_t>> results;
  for (const kiln_pk_threads* threads : {static_cast<const kiln_pk_threads*>(nullptr), &kThreaded}) {
    Scratch scratch(bytes);
    std::vector<uint8_t> y(y_size * elem, 0xee);
    kiln::pk::qconv2d_with_config(cfg ? *cfg : kiln::pk::target_config(), threads, cc.n, cc.c, cc.h, cc.w, cc.k, oh, ow, cc.kh,
                                  cc.kw, cc.sh, cc.sw, cc.pt, cc.pl, cc.dh, cc.dw, cc.group, qc.x_type, x.data(), &x_zero,
                                  wt.data(), cc.bias ? bias.data() : nullptr, sums ? nullptr : scales.data(),
                                  sums ? 0 : int64_t(scales.size()), qc.y_type, sums ? nullptr : &y_zero, y.data(),
                                  scratch.get());
    EXPECT_TRUE(scratch.guards_intact());
    results.push_back(y);
  }
  EXPECT_EQ(results[0], results[1]) << "threaded result differs from serial";
  int bad = 0;
  for (size_t i = 0; i < y_size; ++i) {
    int32_t got;
    if (sums)
      std::memcpy(&got, results[0].data() + i * 4, 4);
    else
      got = value_8bit(qc.y_type, results[0], i);
    if (got != want[i] && bad++ < 5) ADD_FAILURE() << "[" << i << "] got " << got << ", want " << want[i];
  }
}

TEST(PortableQuantized, ConvolutionShapesTypesAndVariants) {
  unsigned seed = 5000;
  std::vector<ConvCase> shapes = conv_shapes();
  {
    ConvCase c{2, 6, 9, 9, 6, 3, 3};  // depthwise, stride 2, padded
    c.group = 6;
    c.sh = c.sw = 2;
    c.pt = c.pl = c.pb = c.pr = 1;
    shapes.push_back(c);
  }
  {
    ConvCase c{1, 8, 5, 150, 16, 1, 1};  // 1x1 over more columns than a chunk
    shapes.push_back(c);
  }
  for (const ConvCase& c : shapes)
    for (int32_t y_type : {KILN_PK_UINT8, KILN_PK_INT8, KILN_PK_INT32}) {
      const int32_t x_type = (seed & 1) ? KILN_PK_INT8 : KILN_PK_UINT8;
      check_qconv({c, x_type, y_type, (seed & 2) != 0}, nullptr, seed);
      ++seed;
    }
  for (const Config& cfg : kConfigs)
    for (const ConvCase& c : shapes) check_qconv({c, KILN_PK_UINT8, KILN_PK_UINT8}, &cfg, seed++);
}

TEST(PortableQuantized, ConvolutionRandomCases) {
  std::mt19937 rng(5300);
  auto pick = [&](int64_t lo, int64_t hi) { return lo + int64_t(rng() % uint32_t(hi - lo + 1)); };
  for (int done = 0, i = 0; done < 150; ++i) {
    const bool depthwise = rng() % 3 == 0;
    const int64_t group = depthwise ? pick(1, 6) : pick(1, 3);
    const int64_t cg = depthwise ? 1 : pick(1, 9), kg = depthwise ? 1 : pick(1, 9);
    ConvCase c{pick(1, 2), cg * group, pick(1, 12), pick(1, 40), kg * group, pick(1, 4), pick(1, 4)};
    c.group = group;
    c.sh = pick(1, 3), c.sw = pick(1, 3), c.dh = pick(1, 2), c.dw = pick(1, 2);
    c.pt = pick(0, 2), c.pb = pick(0, 2), c.pl = pick(0, 2), c.pr = pick(0, 2);
    if (c.pt >= c.dh * (c.kh - 1) + 1 || c.pb >= c.dh * (c.kh - 1) + 1 || c.pl >= c.dw * (c.kw - 1) + 1 ||
        c.pr >= c.dw * (c.kw - 1) + 1 || c.oh() < 1 || c.ow() < 1)
      continue;
    c.bias = rng() & 1;
    const int64_t which = pick(0, 6);
    check_qconv({c, int32_t(pick(0, 1)), int32_t(pick(0, 2)), (rng() & 1) != 0}, which == 6 ? nullptr : &kConfigs[which],
                40000 + unsigned(i));
    ++done;
  }
}

TEST(PortableQuantized, MatMul) {
  unsigned seed = 5500;
  for (const Config* cfg : {static_cast<const Config*>(nullptr), &kConfigs[0], &kConfigs[3], &kConfigs[5]})
    for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {3, 7, 5}, {37, 130, 17}, {128, 24, 256}, {5, 300, 1}})
      for (int32_t a_type : {KILN_PK_UINT8, KILN_PK_INT8})
        for (int32_t y_type : {KILN_PK_UINT8, KILN_PK_INT8, KILN_PK_INT32}) {
          SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k) + " a " +
                       std::to_string(a_type) + " y " + std::to_string(y_type) + " config " + config_name(cfg));
          std::mt19937 rng(seed++);
          const std::vector<uint8_t> a = random_8bit(size_t(m * k), a_type, rng);
          std::vector<int8_t> b(size_t(k * n));
          for (auto& v : b) v = int8_t(rng());
          const bool per_column = rng() & 1, sums = y_type == KILN_PK_INT32;
          std::vector<float> scales(per_column ? size_t(n) : 1);
          for (auto& f : scales) f = 0.00005f + float(rng() % 1000) * 1e-6f;
          const uint8_t a_zero = uint8_t(rng()), y_zero = uint8_t(rng());
          const int32_t az = value_8bit(a_type, {a_zero}, 0),
                        yz = value_8bit(y_type == KILN_PK_INT8 ? KILN_PK_INT8 : KILN_PK_UINT8, {y_zero}, 0);
          std::vector<std::vector<uint8_t>> results;
          for (const kiln_pk_threads* threads : {static_cast<const kiln_pk_threads*>(nullptr), &kThreaded}) {
            Scratch scratch(kiln_pk_qmatmul_scratch_bytes(m, n, k));
            std::vector<uint8_t> y(size_t(m * n) * (sums ? 4 : 1), 0xee);
            kiln::pk::qmatmul_with_config(cfg ? *cfg : kiln::pk::target_config(), threads, m, n, k, a_type, a.data(), &a_zero,
                                          b.data(), sums ? nullptr : scales.data(), sums ? 0 : int64_t(scales.size()), y_type,
                                          sums ? nullptr : &y_zero, y.data(), scratch.get());
            EXPECT_TRUE(scratch.guards_intact());
            results.push_back(y);
          }
          EXPECT_EQ(results[0], results[1]) << "threaded result differs from serial";
          int bad = 0;
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              int64_t s = 0;
              for (int64_t p = 0; p < k; ++p) s += int64_t(value_8bit(a_type, a, size_t(i * k + p)) - az) * b[size_t(p * n + j)];
              const size_t at = size_t(i * n + j);
              int32_t got;
              if (sums)
                std::memcpy(&got, results[0].data() + at * 4, 4);
              else
                got = value_8bit(y_type, results[0], at);
              const int32_t want = sums ? int32_t(s) : requantized(double(s), scales[per_column ? size_t(j) : 0], y_type, yz);
              if (got != want && bad++ < 5) ADD_FAILURE() << "[" << i << ", " << j << "] got " << got << ", want " << want;
            }
        }
}

TEST(PortableQuantized, QuantizeDequantizeAndAdd) {
  std::mt19937 rng(5700);
  const int64_t outer = 3, channels = 5, inner = 4099;  // a block and a tail per row
  const size_t n = size_t(outer * channels * inner);
  std::vector<float> x(n), scale(channels);
  for (auto& v : x) v = float(int(rng() % 20001) - 10000) / 37.0f;
  x[7] = 2.5f, x[8] = -3.5f, x[9] = std::numeric_limits<float>::infinity();
  for (auto& s : scale) s = 0.05f + float(rng() % 100) * 0.01f;
  scale[0] = 1.0f;  // exact ties: 2.5 -> 2, -3.5 -> -4
  for (int32_t type : {KILN_PK_UINT8, KILN_PK_INT8}) {
    std::vector<uint8_t> zero(channels);
    for (auto& z : zero) z = uint8_t(type == KILN_PK_INT8 ? int8_t(rng() % 21) - 10 : int8_t(rng() % 50 + 100));
    std::vector<uint8_t> q(n), q1(n);
    kiln_pk_quantize(&kThreaded, outer, channels, inner, x.data(), scale.data(), zero.data(), type, q.data());
    kiln_pk_quantize(nullptr, outer, channels, inner, x.data(), scale.data(), zero.data(), type, q1.data());
    EXPECT_EQ(q, q1);
    std::vector<float> back(n);
    kiln_pk_dequantize(&kThreaded, outer, channels, inner, type, q.data(), scale.data(), zero.data(), back.data());
    int bad = 0;
    for (size_t i = 0; i < n; ++i) {
      const size_t c = i / size_t(inner) % size_t(channels);
      const int32_t z = value_8bit(type, zero, c);
      const double want = std::clamp(std::nearbyint(double(x[i] / scale[c])) + z, type == KILN_PK_INT8 ? -128.0 : 0.0,
                                     type == KILN_PK_INT8 ? 127.0 : 255.0);
      if (value_8bit(type, q, i) != int32_t(want) && bad++ < 5) ADD_FAILURE() << "quantize [" << i << "] of " << x[i];
      if (back[i] != float(double(int32_t(want) - z) * scale[c]) && bad++ < 5) ADD_FAILURE() << "dequantize [" << i << "]";
    }
  }
  // Cast of int32 to float: a dequantization without scale or zero point.
  const std::vector<int32_t> big{0, -7, 16777217, -2147483647 - 1, 2147483647};
  std::vector<float> f(big.size());
  kiln_pk_dequantize(nullptr, 1, 1, int64_t(big.size()), KILN_PK_INT32, big.data(), nullptr, nullptr, f.data());
  for (size_t i = 0; i < big.size(); ++i) EXPECT_EQ(f[i], float(big[i]));

  // DynamicQuantizeLinear: the range includes 0.
  std::vector<float> d(1000);
  for (auto& v : d) v = float(int(rng() % 2001) - 500) / 100.0f;
  std::vector<uint8_t> dq(d.size());
  float s = 0;
  uint8_t z = 0;
  kiln_pk_dynamic_quantize(&kThreaded, int64_t(d.size()), d.data(), dq.data(), &s, &z);
  const float lo = std::min(0.0f, *std::min_element(d.begin(), d.end())),
              hi = std::max(0.0f, *std::max_element(d.begin(), d.end()));
  EXPECT_EQ(s, (hi - lo) / 255.0f);
  EXPECT_EQ(z, uint8_t(std::clamp(std::nearbyint(double(0.0f - lo / s)), 0.0, 255.0)));
  for (size_t i = 0; i < d.size(); ++i)
    ASSERT_EQ(dq[i], uint8_t(std::clamp(std::nearbyint(double(d[i] / s)) + z, 0.0, 255.0))) << i;
  const std::vector<float> zeros(9, 0.0f);
  kiln_pk_dynamic_quantize(nullptr, 9, zeros.data(), dq.data(), &s, &z);
  EXPECT_EQ(s, 0.0f);
  EXPECT_EQ(z, 0);

  // QLinearAdd, in double as the reference.
  const size_t count = 10007;
  const std::vector<uint8_t> a = random_8bit(count, KILN_PK_UINT8, rng), b = random_8bit(count, KILN_PK_INT8, rng);
  const uint8_t za = 128, zb = uint8_t(int8_t(-3)), zy = uint8_t(int8_t(5));
  std::vector<uint8_t> y(count);
  const int64_t dims[] = {int64_t(count)}, strides[] = {1};
  kiln_pk_qadd(&kThreaded, 1, dims, strides, strides, KILN_PK_UINT8, a.data(), 0.02f, &za, KILN_PK_INT8, b.data(), 0.03f, &zb,
               0.05f, KILN_PK_INT8, &zy, y.data());
  for (size_t i = 0; i < count; ++i) {
    const double v = (double(0.02f) * (a[i] - 128.0) + double(0.03f) * (int8_t(b[i]) + 3.0)) / double(0.05f);
    ASSERT_EQ(int8_t(y[i]), int8_t(std::clamp(std::nearbyint(v) + 5, -128.0, 127.0))) << i;
  }
}

TEST(PortableQuantized, MaxPool) {
  std::mt19937 rng(5900);
  for (const PoolCase& c : pool_shapes())
    for (int32_t type : {KILN_PK_UINT8, KILN_PK_INT8}) {
      const std::vector<uint8_t> x = random_8bit(size_t(c.planes * c.h * c.w), type, rng);
      std::vector<uint8_t> y(size_t(c.planes * c.oh() * c.ow()));
      kiln_pk_max_pool2d_8bit(&kThreaded, c.planes, c.h, c.w, c.oh(), c.ow(), c.kh, c.kw, c.sh, c.sw, c.pt, c.pl, c.dh, c.dw,
                              type, x.data(), y.data());
      for (int64_t p = 0; p < c.planes; ++p)
        for (int64_t i = 0; i < c.oh(); ++i)
          for (int64_t j = 0; j < c.ow(); ++j) {
            int32_t m = type == KILN_PK_INT8 ? -128 : 0;
            for (int64_t r = 0; r < c.kh; ++r)
              for (int64_t t = 0; t < c.kw; ++t) {
                const int64_t yy = i * c.sh - c.pt + r * c.dh, xx = j * c.sw - c.pl + t * c.dw;
                if (yy >= 0 && yy < c.h && xx >= 0 && xx < c.w)
                  m = std::max(m, value_8bit(type, x, size_t((p * c.h + yy) * c.w + xx)));
              }
            ASSERT_EQ(value_8bit(type, y, size_t((p * c.oh() + i) * c.ow() + j)), m) << p << " " << i << " " << j;
          }
    }
}

}  // namespace
