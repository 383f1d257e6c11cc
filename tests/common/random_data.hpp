#pragma once
// Reproducible test data.
#include <random>
#include <vector>

namespace kiln::test {

// n floats uniform in [-1, 1), the same for the same seed.
inline std::vector<float> random_values(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

}  // namespace kiln::test
