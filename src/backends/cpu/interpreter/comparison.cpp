// Greater, Less, Equal and the rest over float32 and int64 tensors.
#include "backends/cpu/interpreter/families.hpp"

#include <algorithm>
#include <functional>

#include "backends/cpu/interpreter/kernel_common.hpp"

namespace kiln::cpu::interpreter {

using ir::DType;
using ir::Tensor;

// A comparison of float32 or int64 tensors of one shape, or of a tensor and
// a single value (a detector's score threshold over every anchor), in
// parallel chunks; the reference kernel works out a broadcast index for
// every element. Anything else goes to the reference kernel.
template <typename Cmp>
void comparison_kernel(ref::KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const bool same = a.dims() == b.dims(), a_one = a.numel() == 1 && a.rank() <= b.rank(),
             b_one = b.numel() == 1 && b.rank() <= a.rank();
  if (a.dtype() != b.dtype() || (a.dtype() != DType::Float32 && a.dtype() != DType::Int64) || !(same || a_one || b_one))
    return run_reference(ctx);
  Tensor out = Tensor::uninitialized(DType::Bool, same || b_one ? a.dims() : b.dims());
  auto run = [&](auto type) {
    using T = decltype(type);
    const T* x = a.data<T>();
    const T* y = b.data<T>();
    bool* o = out.data<bool>();
    const Cmp cmp;
    // Chunks of 64 Ki elements: a task per element range, not per element.
    constexpr int64_t kChunk = 1 << 16;
    const int64_t n = out.numel();
    on_budget((n + kChunk - 1) / kChunk, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin * kChunk, stop = std::min(n, end * kChunk); i < stop; ++i)
        o[i] = cmp(x[a_one && !same ? 0 : i], y[b_one && !same ? 0 : i]);
    });
  };
  if (a.dtype() == DType::Float32)
    run(float{});
  else
    run(int64_t{});
  ctx.set_output(0, std::move(out));
}

template void comparison_kernel<std::greater<>>(ref::KernelContext& ctx);
template void comparison_kernel<std::greater_equal<>>(ref::KernelContext& ctx);
template void comparison_kernel<std::less<>>(ref::KernelContext& ctx);
template void comparison_kernel<std::less_equal<>>(ref::KernelContext& ctx);
template void comparison_kernel<std::equal_to<>>(ref::KernelContext& ctx);

}  // namespace kiln::cpu::interpreter
