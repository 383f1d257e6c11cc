#pragma once
// Helpers shared by the reference kernels that move tensor elements
// (tensor_*.cpp, gather_scatter_ops.cpp).
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/reference/kernel_context.hpp"

namespace kiln::ref {

class KernelRegistry;
// Defined in tensor_value_ops.cpp; called by register_tensor_ops.
void register_tensor_value_ops(KernelRegistry& r);

namespace tensor_detail {

// Arithmetic type for an element type: the 16-bit floats compute in float.
template <typename T>
using Compute = std::conditional_t<std::is_same_v<T, ir::Half> || std::is_same_v<T, ir::BFloat16>, float, T>;

std::string ints_to_string(const std::vector<int64_t>& v);
// Row-major multi-index <-> flat offset.
std::vector<int64_t> unravel(int64_t flat, const Dims& dims);
int64_t ravel(const std::vector<int64_t>& idx, const Dims& dims);
// Advances a row-major multi-index; false after the last one.
bool next_index(std::vector<int64_t>& idx, const Dims& dims);
// out[oi] = in[ii], byte-wise (both tensors have the same dtype).
void copy_elem(Tensor& out, int64_t oi, const Tensor& in, int64_t ii);
// Maps an index read from a tensor into [0, dim), accepting negatives; fails otherwise.
int64_t checked_index(const KernelContext& ctx, int64_t i, int64_t dim, const char* what);
// normalize_axis for ops that index a dimension: also rejects rank-0 inputs.
int64_t tensor_axis(const KernelContext& ctx, int64_t axis, int64_t rank);
// The single value of a one-element tensor input (scalar or shape [1]); fails otherwise.
int64_t scalar_int(const KernelContext& ctx, const Tensor& t, const char* what);
double scalar_double(const KernelContext& ctx, const Tensor& t, const char* what);
// Normalizes axes into [0, rank), failing on out-of-range or repeated ones.
std::vector<int64_t> normalize_axes(const KernelContext& ctx, const std::vector<int64_t>& axes, int64_t rank);
// An int list that is attribute `attr` before opset `input_since` and optional
// input `input` from then on; `present` (if given) says whether it was supplied.
std::vector<int64_t> ints_from_attr_or_input(const KernelContext& ctx, const std::string& attr, size_t input, int input_since,
                                             bool* present);

// Builds a tensor of `out_dims` by asking `src_of` for the flat input index of
// each output multi-index; a negative answer leaves the element to `fill`.
template <typename F>
Tensor remap(const Tensor& in, const Dims& out_dims, F src_of, const Tensor* fill = nullptr) {
  Tensor out(in.dtype(), out_dims);
  if (out.numel() == 0) return out;
  std::vector<int64_t> idx(out_dims.size(), 0);
  int64_t o = 0;
  do {
    int64_t s = src_of(idx);
    if (s >= 0)
      copy_elem(out, o, in, s);
    else if (fill)
      copy_elem(out, o, *fill, 0);
    ++o;
  } while (next_index(idx, out_dims));
  return out;
}

}  // namespace tensor_detail
}  // namespace kiln::ref
