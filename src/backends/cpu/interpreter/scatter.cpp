// ScatterElements without a reduction, moving elements by their size.
#include "backends/cpu/interpreter/families.hpp"

#include <vector>

#include "backends/cpu/interpreter/kernel_common.hpp"
#include "backends/reference/ops/op_util.hpp"

namespace kiln::cpu::interpreter {

using ir::DType;
using ir::Tensor;

namespace {

template <typename T>
void scatter_rows(const int64_t* index, const T* upd, T* out, int64_t rows, int64_t len, const std::vector<int64_t>& row_base,
                  int64_t axis_stride, bool last_axis) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = row_base[size_t(r)];
    for (int64_t j = 0; j < len; ++j) {
      const int64_t u = r * len + j;
      out[base + (last_axis ? index[u] : j + index[u] * axis_stride)] = upd[u];
    }
  }
}

}  // namespace

// ScatterElements that replaces (no reduction): the output starts as a copy
// of the data, then each row of updates goes to the place its indices say,
// in order, as the reference does.
void scatter_elements_kernel(ref::KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  const Tensor& upd = ctx.input(2);
  const int64_t rank = x.rank();
  int64_t axis = ctx.attr_int("axis", 0);
  if (axis < 0) axis += rank;
  if (ctx.attr_string("reduction", "none") != "none" || rank == 0 || axis < 0 || axis >= rank || ind.rank() != rank ||
      upd.dims() != ind.dims() || upd.dtype() != x.dtype() || (ind.dtype() != DType::Int64 && ind.dtype() != DType::Int32))
    return run_reference(ctx);
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis && ind.dim(int(d)) > x.dim(int(d))) return run_reference(ctx);
  // Indices checked before anything is written; read in place unless some
  // must be converted or made non-negative.
  const int64_t extent = x.dim(int(axis));
  std::vector<int64_t> converted;
  const int64_t* index = ind.dtype() == DType::Int64 ? ind.data<int64_t>() : nullptr;
  bool negative = false;
  for (int64_t u = 0; u < ind.numel() && index; ++u) {
    if (index[u] < -extent || index[u] >= extent) return run_reference(ctx);  // names the index
    negative |= index[u] < 0;
  }
  if (!index || negative) {
    converted = ind.to_int64_vector();
    for (int64_t& i : converted) {
      if (i < 0) i += extent;
      if (i < 0 || i >= extent) return run_reference(ctx);
    }
    index = converted.data();
  }
  Tensor out = x.clone();
  const int64_t len = ind.dim(-1), rows = len ? ind.numel() / len : 0;
  const std::vector<int64_t> stride = ref::strides_of(x.dims());
  // Where each row of updates starts in the output, but for the axis.
  std::vector<int64_t> row_base(static_cast<size_t>(rows)), at(static_cast<size_t>(rank), 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t base = 0;
    for (int64_t d = 0; d + 1 < rank; ++d)
      if (d != axis) base += at[size_t(d)] * stride[size_t(d)];
    row_base[size_t(r)] = base;
    for (int64_t d = rank - 2; d >= 0; --d) {
      if (++at[size_t(d)] < ind.dim(int(d))) break;
      at[size_t(d)] = 0;
    }
  }
  const bool last = axis == rank - 1;
  const int64_t axis_stride = stride[size_t(axis)];
  // Elements are moved as they are: only their size matters.
  auto scatter = [&](auto element) {
    using T = decltype(element);
    scatter_rows(index, static_cast<const T*>(upd.raw()), static_cast<T*>(out.raw()), rows, len, row_base, axis_stride, last);
  };
  switch (ir::dtype_size(x.dtype())) {
    case 1: scatter(uint8_t{}); break;
    case 2: scatter(uint16_t{}); break;
    case 4: scatter(uint32_t{}); break;
    case 8: scatter(uint64_t{}); break;
    default: return run_reference(ctx);
  }
  ctx.set_output(0, std::move(out));
}

}  // namespace kiln::cpu::interpreter
