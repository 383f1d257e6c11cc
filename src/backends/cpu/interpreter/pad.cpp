// Pad as row copies, in every mode.
#include "backends/cpu/interpreter/families.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backends/cpu/interpreter/kernel_common.hpp"
#include "backends/reference/ops/op_util.hpp"

namespace kiln::cpu::interpreter {

using ir::Dims;
using ir::DType;
using ir::Tensor;

namespace {

// x's dims with pads (begins, then ends) added, in 128 bits since pads may
// hold anything; false unless each pad is within +-2^62 and each size in
// [0, 2^62] (then coordinates shifted by a pad cannot overflow).
bool padded_dims(const Tensor& x, const int64_t* pads, Dims& out) {
  const int64_t rank = x.rank(), limit = int64_t(1) << 62;
  for (int64_t d = 0; d < rank; ++d) {
    const __int128 size = __int128(x.dim(int(d))) + pads[d] + pads[d + rank];
    for (const int64_t pad : {pads[d], pads[d + rank]})
      if (pad > limit || pad < -limit) return false;
    if (size < 0 || size > limit) return false;
    out[size_t(d)] = int64_t(size);
  }
  return true;
}

// Pad in edge, wrap or reflect mode: per axis, the input coordinate each
// output coordinate reads (ref::pad_source, as the reference kernel), then each output
// row in parallel, its stretch that is the input row as is in one copy.
// Style-transfer and super-resolution networks pad every convolution this way.
void pad_from_input(ref::KernelContext& ctx, const std::string& mode) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  const int64_t* pads = ctx.input(1).data<int64_t>();
  Dims out_dims(static_cast<size_t>(rank));
  if (!padded_dims(x, pads, out_dims) || std::find(x.dims().begin(), x.dims().end(), 0) != x.dims().end())
    return run_reference(ctx);  // names the problem
  // The output first: its size is checked before the tables below grow with it.
  Tensor out = Tensor::uninitialized(x.dtype(), out_dims);
  std::vector<std::vector<int64_t>> from(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d)
    for (int64_t o = 0; o < out_dims[size_t(d)]; ++o)
      from[size_t(d)].push_back(ref::pad_source(mode, o - pads[d], x.dim(int(d))));
  const size_t esize = ir::dtype_size(x.dtype());
  const int64_t width = out_dims.back(), rows = width ? out.numel() / width : 0, n_last = x.dim(-1);
  // Where the last axis reads the input row unshifted: one copy.
  const int64_t copy_lo = std::clamp<int64_t>(pads[rank - 1], 0, width),
                copy_hi = std::clamp<int64_t>(pads[rank - 1] + n_last, copy_lo, width);
  const std::vector<int64_t>& last = from.back();
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(out.raw());
  on_budget(rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t in_row = 0, stride = n_last;
      for (int64_t d = rank - 2, rest = r; d >= 0; --d) {
        in_row += from[size_t(d)][size_t(rest % out_dims[size_t(d)])] * stride;
        rest /= out_dims[size_t(d)];
        stride *= x.dim(int(d));
      }
      const char* s = src + in_row * int64_t(esize);
      char* o = dst + r * width * int64_t(esize);
      for (int64_t c = 0; c < copy_lo; ++c) std::memcpy(o + c * int64_t(esize), s + last[size_t(c)] * int64_t(esize), esize);
      if (copy_hi > copy_lo)
        std::memcpy(o + copy_lo * int64_t(esize), s + last[size_t(copy_lo)] * int64_t(esize), size_t(copy_hi - copy_lo) * esize);
      for (int64_t c = copy_hi; c < width; ++c) std::memcpy(o + c * int64_t(esize), s + last[size_t(c)] * int64_t(esize), esize);
    }
  });
  ctx.set_output(0, std::move(out));
}

}  // namespace

// Pad (opset 11 on, pads for every axis). With a constant: the output is
// filled with the value, then the input's overlap with it is copied in
// rows. Cropping pads are handled the same way.
void pad_kernel(ref::KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  const std::string mode = ctx.attr_string("mode", "constant");
  if (ctx.opset() < 11 || rank == 0 || ctx.has_input(3) || ctx.input(1).dtype() != DType::Int64 ||
      ctx.input(1).numel() != 2 * rank || (mode != "constant" && mode != "edge" && mode != "wrap" && mode != "reflect"))
    return run_reference(ctx);
  if (mode != "constant") return pad_from_input(ctx, mode);
  const bool has_value = ctx.has_input(2) && ctx.input(2).numel() > 0;
  if (has_value && ctx.input(2).dtype() != x.dtype()) return run_reference(ctx);  // names the type
  const int64_t* pads = ctx.input(1).data<int64_t>();
  Dims out_dims(static_cast<size_t>(rank));
  if (!padded_dims(x, pads, out_dims)) return run_reference(ctx);
  const size_t esize = ir::dtype_size(x.dtype());
  Tensor out = Tensor::uninitialized(x.dtype(), out_dims);
  const uint64_t zero = 0;
  fill_with(out, has_value ? ctx.input(2).raw() : &zero, esize);
  // Per axis, the input coordinates that land in the output.
  std::vector<int64_t> lo(static_cast<size_t>(rank)), hi(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d) {
    lo[size_t(d)] = std::max<int64_t>(0, -pads[d]);
    hi[size_t(d)] = std::min(x.dim(int(d)), out_dims[size_t(d)] - pads[d]);
    if (lo[size_t(d)] >= hi[size_t(d)]) return ctx.set_output(0, std::move(out));  // nothing of the input is kept
  }
  const std::vector<int64_t> in_stride = ref::strides_of(x.dims()), out_stride = ref::strides_of(out_dims);
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(out.raw());
  std::function<void(int64_t, int64_t, int64_t)> copy = [&](int64_t d, int64_t from, int64_t to) {
    const size_t a = size_t(d);
    if (d == rank - 1) {
      std::memcpy(dst + (to + lo[a] + pads[d]) * int64_t(esize), src + (from + lo[a]) * int64_t(esize),
                  size_t(hi[a] - lo[a]) * esize);
      return;
    }
    for (int64_t i = lo[a]; i < hi[a]; ++i) copy(d + 1, from + i * in_stride[a], to + (i + pads[d]) * out_stride[a]);
  };
  copy(0, 0, 0);
  ctx.set_output(0, std::move(out));
}

}  // namespace kiln::cpu::interpreter
