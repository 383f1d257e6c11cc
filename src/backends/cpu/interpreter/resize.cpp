// Resize and Upsample of float maps along their last two axes.
#include "backends/cpu/interpreter/families.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cpu/interpreter/kernel_common.hpp"
#include "backends/reference/resize_plan.hpp"

namespace kiln::cpu::interpreter {

using ir::DType;
using ir::Tensor;

namespace {

// One axis of a resize plan as flat arrays: output coordinate o takes the
// samples first[o] .. first[o + 1] - 1.
struct AxisTaps {
  std::vector<int64_t> first, index;
  std::vector<float> weight;
};

AxisTaps flatten(const std::vector<std::vector<ref::ResizeTap>>& taps) {
  AxisTaps a;
  a.first.push_back(0);
  for (const auto& list : taps) {
    for (const auto& t : list) {
      if (t.weight == 0) continue;
      a.index.push_back(t.index);
      a.weight.push_back(float(t.weight));
    }
    a.first.push_back(int64_t(a.index.size()));
  }
  return a;
}

// Whether the axis keeps its length and each output coordinate is its input
// coordinate (a linear filter at scale 1 lists a neighbour with weight 0
// too; a coordinate outside a crop lists none).
bool keeps_axis(const std::vector<std::vector<ref::ResizeTap>>& taps, int64_t length) {
  if (int64_t(taps.size()) != length) return false;
  for (size_t i = 0; i < taps.size(); ++i) {
    if (taps[i].empty()) return false;
    for (const auto& t : taps[i])
      if (t.weight != 0 && (t.index != int64_t(i) || t.weight != 1.0)) return false;
  }
  return true;
}

}  // namespace

// Resize and Upsample of float maps that change only their last two axes
// (images, feature maps): the reference's plan of taps, applied in float
// one axis after the other (along rows into a scratch plane, then down the
// columns), the planes in parallel on the budget's threads.
void resize_kernel(ref::KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() != DType::Float32 || x.rank() < 2 || x.numel() == 0) return run_reference(ctx);
  const ref::ResizePlan plan = ref::resize_plan(ctx);
  const int64_t rank = x.rank();
  for (int64_t d = 0; d + 2 < rank; ++d)
    if (!keeps_axis(plan.taps[size_t(d)], x.dim(d))) return run_reference(ctx);
  for (int64_t d = rank - 2; d < rank; ++d)
    for (const auto& list : plan.taps[size_t(d)])
      if (list.empty()) return run_reference(ctx);  // outside a crop: the extrapolation value
  const AxisTaps rows = flatten(plan.taps[size_t(rank - 2)]), cols = flatten(plan.taps[size_t(rank - 1)]);
  const int64_t H = x.dim(-2), W = x.dim(-1), OH = plan.out_dims[size_t(rank - 2)], OW = plan.out_dims[size_t(rank - 1)];
  const int64_t planes = x.numel() / (H * W);
  Tensor out = Tensor::uninitialized(DType::Float32, plan.out_dims);
  const float* in = x.data<float>();
  float* dst = out.data<float>();
  // Two passes, each in parallel over every row it makes (a detector's
  // input is 3 planes, which split badly over threads as whole planes):
  // along each input row some output row reads, into `across`, then down,
  // into the output. A single tap of weight 1 (nearest) is a copy.
  std::vector<char> needed(static_cast<size_t>(H), 0);
  for (int64_t i : rows.index) needed[size_t(i)] = 1;
  auto single = [](const AxisTaps& a, int64_t o) {
    return a.first[size_t(o + 1)] - a.first[size_t(o)] == 1 && a.weight[size_t(a.first[size_t(o)])] == 1.0f;
  };
  bool cols_copy = true;
  for (int64_t o = 0; o < OW && cols_copy; ++o) cols_copy = single(cols, o);
  std::vector<float> across(size_t(planes * H * OW));
  on_budget(planes * H, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      if (!needed[size_t(r % H)]) continue;
      const float* row = in + r * W;
      float* t = across.data() + r * OW;
      if (cols_copy) {
        for (int64_t o = 0; o < OW; ++o) t[o] = row[cols.index[size_t(o)]];
        continue;
      }
      for (int64_t o = 0; o < OW; ++o) {
        float acc = 0;
        for (int64_t k = cols.first[size_t(o)]; k < cols.first[size_t(o + 1)]; ++k)
          acc += cols.weight[size_t(k)] * row[cols.index[size_t(k)]];
        t[o] = acc;
      }
    }
  });
  on_budget(planes * OH, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t p = r / OH, o = r % OH;
      float* line = dst + r * OW;
      const float* plane = across.data() + p * H * OW;
      if (single(rows, o)) {
        std::memcpy(line, plane + rows.index[size_t(rows.first[size_t(o)])] * OW, size_t(OW) * sizeof(float));
        continue;
      }
      std::fill(line, line + OW, 0.0f);
      for (int64_t k = rows.first[size_t(o)]; k < rows.first[size_t(o + 1)]; ++k)
        add_scaled(line, plane + rows.index[size_t(k)] * OW, rows.weight[size_t(k)], OW);
    }
  });
  ctx.set_output(0, std::move(out));
}

}  // namespace kiln::cpu::interpreter
