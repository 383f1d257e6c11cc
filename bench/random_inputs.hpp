// Random inputs for a model's declared shapes, shared by the benchmarks:
// float32 uniform in [-1, 1], int64 uniform in 0..99 (valid as token ids and
// indices for the zoo's models), other types zero. The same seed gives the
// same inputs, so runs compare like with like.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kiln.hpp"

namespace kiln_bench {

using Inputs = std::vector<std::pair<std::string, kiln::Tensor>>;

// symbolic_dim(d) gives the size of a symbolic dim at position d.
inline Inputs random_inputs(const kiln::Model& model, const std::function<int64_t(size_t)>& symbolic_dim) {
  std::mt19937 rng(1);
  Inputs inputs;
  for (const auto& info : model.inputs()) {
    if (info.has_default) continue;
    kiln::Shape shape;
    for (size_t d = 0; d < info.shape.size(); ++d)
      shape.push_back(info.shape[d].is_fixed() ? info.shape[d].value : symbolic_dim(d));
    kiln::Tensor t(info.dtype, shape);
    if (info.dtype == kiln::DType::Float32) {
      std::uniform_real_distribution<float> u(-1, 1);
      for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = u(rng);
    } else if (info.dtype == kiln::DType::Int64) {
      std::uniform_int_distribution<int64_t> u(0, 99);
      for (int64_t i = 0; i < t.numel(); ++i) t.data_as<int64_t>()[i] = u(rng);
    }
    inputs.emplace_back(info.name, t);
  }
  return inputs;
}

}  // namespace kiln_bench
