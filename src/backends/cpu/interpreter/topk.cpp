// TopK of float32 rows, sorting only the k kept.
#include "backends/cpu/interpreter/families.hpp"

#include <algorithm>
#include <numeric>
#include <vector>

#include "backends/cpu/interpreter/kernel_common.hpp"

namespace kiln::cpu::interpreter {

using ir::Dims;
using ir::DType;
using ir::Tensor;

// TopK of float32 rows: the k best found with nth_element and only those
// sorted, where the reference kernel sorts the whole row (retinanet keeps
// 1000 of its scores). The same order as the reference: NaN above every
// number, equal values by lower index first.
void topk_kernel(ref::KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (ctx.opset() < 10 || x.dtype() != DType::Float32 || x.rank() == 0 || ctx.input(1).numel() != 1 ||
      ctx.attr_int("sorted", 1) != 1)
    return run_reference(ctx);
  const int64_t k = ctx.input(1).as_int64(0);
  int64_t axis = ctx.attr_int("axis", -1);
  if (axis < 0) axis += x.rank();
  if (axis < 0 || axis >= x.rank() || k < 0 || k > x.dim(int(axis))) return run_reference(ctx);  // names what is wrong
  const bool largest = ctx.attr_int("largest", 1) != 0;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.dim(int(d));
  for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.dim(int(d));
  const int64_t dim = x.dim(int(axis));
  Dims dims = x.dims();
  dims[size_t(axis)] = k;
  Tensor values = Tensor::uninitialized(DType::Float32, dims), indices = Tensor::uninitialized(DType::Int64, dims);
  const float* in = x.data<float>();
  float* vo = values.data<float>();
  int64_t* io = indices.data<int64_t>();
  on_budget(outer * inner, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(dim));
    std::vector<int64_t> order(static_cast<size_t>(dim));
    for (int64_t r = begin; r < end; ++r) {
      const int64_t o = r / inner, i = r % inner;
      for (int64_t j = 0; j < dim; ++j) row[size_t(j)] = in[(o * dim + j) * inner + i];
      std::iota(order.begin(), order.end(), int64_t(0));
      auto less = [](float a, float b) { return (a != a || b != b) ? (a == a && b != b) : a < b; };
      auto before = [&](int64_t a, int64_t b) {
        const float va = row[size_t(a)], vb = row[size_t(b)];
        if (largest ? less(vb, va) : less(va, vb)) return true;
        if (largest ? less(va, vb) : less(vb, va)) return false;
        return a < b;
      };
      if (k < dim) std::nth_element(order.begin(), order.begin() + k, order.end(), before);
      std::sort(order.begin(), order.begin() + k, before);
      for (int64_t j = 0; j < k; ++j) {
        vo[(o * k + j) * inner + i] = row[size_t(order[size_t(j)])];
        io[(o * k + j) * inner + i] = order[size_t(j)];
      }
    }
  });
  ctx.set_output(0, std::move(values));
  ctx.set_output(1, std::move(indices));
}

}  // namespace kiln::cpu::interpreter
