// NonZero in parallel chunks.
#include "backends/cpu/interpreter/families.hpp"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "backends/cpu/interpreter/kernel_common.hpp"

namespace kiln::cpu::interpreter {

using ir::Dims;
using ir::DType;
using ir::Tensor;

// NonZero of a bool, float32, int64 or int32 tensor in chunks: each chunk's
// count in parallel, then each chunk writes its coordinates from where the
// counts before it end, stepping its multi-index along (a division per
// element cost more than the scan: retinanet's scores are 8 million).
void nonzero_kernel(ref::KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.rank() == 0 ||
      (x.dtype() != DType::Bool && x.dtype() != DType::Float32 && x.dtype() != DType::Int64 && x.dtype() != DType::Int32))
    return run_reference(ctx);
  constexpr int64_t kChunk = 1 << 16;
  const int64_t n = x.numel(), chunks = (n + kChunk - 1) / kChunk, rank = x.rank();
  std::vector<int64_t> first(size_t(chunks) + 1, 0);
  Tensor out;
  ir::dispatch_dtype(x.dtype(), [&](auto type) {
    using T = decltype(type);
    if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, float> || std::is_same_v<T, int64_t> ||
                  std::is_same_v<T, int32_t>) {
      const T* v = x.data<T>();
      on_budget(chunks, [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) {
          int64_t hits = 0;
          for (int64_t i = c * kChunk, stop = std::min(n, i + kChunk); i < stop; ++i) hits += v[i] != T(0);
          first[size_t(c) + 1] = hits;
        }
      });
      for (int64_t c = 0; c < chunks; ++c) first[size_t(c) + 1] += first[size_t(c)];
      const int64_t total = first.back();
      out = Tensor::uninitialized(DType::Int64, {rank, total});
      int64_t* o = out.data<int64_t>();
      on_budget(chunks, [&](int64_t begin, int64_t end) {
        Dims at(size_t(rank), 0);
        for (int64_t c = begin; c < end; ++c) {
          int64_t flat = c * kChunk, j = first[size_t(c)];
          for (int64_t d = rank, rest = flat; d-- > 0;) at[size_t(d)] = rest % x.dim(int(d)), rest /= x.dim(int(d));
          for (const int64_t stop = std::min(n, flat + kChunk); flat < stop; ++flat) {
            if (v[flat] != T(0)) {
              for (int64_t d = 0; d < rank; ++d) o[d * total + j] = at[size_t(d)];
              ++j;
            }
            for (int64_t d = rank; d-- > 0;) {
              if (++at[size_t(d)] < x.dim(int(d))) break;
              at[size_t(d)] = 0;
            }
          }
        }
      });
    }
  });
  ctx.set_output(0, std::move(out));
}

}  // namespace kiln::cpu::interpreter
