// Expand and ConstantOfShape as block copies, and the fill that Pad shares.
#include "backends/cpu/interpreter/families.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "backends/cpu/interpreter/kernel_common.hpp"

namespace kiln::cpu::interpreter {

using ir::Dims;
using ir::DType;
using ir::Tensor;

namespace {

// Fills n blocks from the first one, doubling what is copied each time.
void replicate(char* dst, size_t block, int64_t n) {
  for (size_t done = 1; done < size_t(n);) {
    const size_t k = std::min(done, size_t(n) - done);
    std::memcpy(dst + done * block, dst, k * block);
    done += k;
  }
}

}  // namespace

void fill_with(Tensor& out, const void* value, size_t esize) {
  const char* v = static_cast<const char*>(value);
  if (out.numel() == 0) return;
  if (std::all_of(v, v + esize, [](char c) { return c == 0; })) return void(std::memset(out.raw(), 0, out.nbytes()));
  std::memcpy(out.raw(), v, esize);
  replicate(static_cast<char*>(out.raw()), esize, out.numel());
}

// Expand as whole-block copies: the trailing axes where the input is not
// broadcast are one memcpy, each broadcast axis a replication of the block
// already written.
void expand_kernel(ref::KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& shape = ctx.input(1);
  if (shape.dtype() != DType::Int64 || shape.rank() != 1) return run_reference(ctx);
  const std::vector<int64_t> want = shape.to_int64_vector();
  const size_t rank = std::max(size_t(x.rank()), want.size());
  Dims in(rank, 1), out(rank);
  for (size_t d = 0; d < rank; ++d) {
    if (d + x.rank() >= rank) in[d] = x.dim(int(d + x.rank() - rank));
    const int64_t w = d + want.size() >= rank ? want[d + want.size() - rank] : 1;
    if (w < 0 || (in[d] != w && in[d] != 1 && w != 1)) return run_reference(ctx);  // names the mismatch
    out[d] = in[d] == 1 ? w : in[d];
  }
  Tensor result = Tensor::uninitialized(x.dtype(), out);
  const size_t esize = ir::dtype_size(x.dtype());
  if (result.numel() == 0) return ctx.set_output(0, std::move(result));
  // Strides in bytes; `whole`: the first axis from which the input is copied as is.
  std::vector<size_t> in_stride(rank + 1, esize), out_stride(rank + 1, esize);
  size_t whole = rank;
  for (size_t d = rank; d-- > 0;) {
    in_stride[d] = in_stride[d + 1] * size_t(in[d]);
    out_stride[d] = out_stride[d + 1] * size_t(out[d]);
  }
  while (whole > 0 && in[whole - 1] == out[whole - 1]) --whole;
  std::function<void(size_t, const char*, char*)> fill = [&](size_t d, const char* src, char* dst) {
    if (d == whole) return void(std::memcpy(dst, src, out_stride[d]));
    if (in[d] == out[d]) {
      for (int64_t i = 0; i < out[d]; ++i) fill(d + 1, src + size_t(i) * in_stride[d + 1], dst + size_t(i) * out_stride[d + 1]);
    } else {
      fill(d + 1, src, dst);
      replicate(dst, out_stride[d + 1], out[d]);
    }
  };
  fill(0, static_cast<const char*>(x.raw()), static_cast<char*>(result.raw()));
  ctx.set_output(0, std::move(result));
}

// ConstantOfShape without a loop over elements.
void constant_of_shape_kernel(ref::KernelContext& ctx) {
  const Tensor& shape = ctx.input(0);
  const Tensor* value = ctx.attr_tensor("value");
  if (shape.dtype() != DType::Int64 || (value && value->numel() != 1)) return run_reference(ctx);
  const Dims dims = shape.to_int64_vector();
  if (std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d < 0; })) return run_reference(ctx);
  const DType dtype = value ? value->dtype() : DType::Float32;
  const float zero = 0;
  Tensor out = Tensor::uninitialized(dtype, dims);
  fill_with(out, value ? value->raw() : &zero, ir::dtype_size(dtype));
  ctx.set_output(0, std::move(out));
}

}  // namespace kiln::cpu::interpreter
