#pragma once
// The interpreter's own kernels, by the file that holds them; kernels.cpp
// puts them in the table in place of the reference kernels. Each handles its
// common case and hands everything else (other dtypes, odd attributes, bad
// inputs) to the reference kernel, which also names what is wrong.
#include "backends/reference/kernel_context.hpp"

namespace kiln::cpu::interpreter {

// products.cpp
void gemm_kernel(ref::KernelContext& ctx);
void matmul_kernel(ref::KernelContext& ctx);

// roi_align.cpp
void roi_align_kernel(ref::KernelContext& ctx);

// fill.cpp
void expand_kernel(ref::KernelContext& ctx);
void constant_of_shape_kernel(ref::KernelContext& ctx);

// pad.cpp
void pad_kernel(ref::KernelContext& ctx);

// scatter.cpp
void scatter_elements_kernel(ref::KernelContext& ctx);

// resize.cpp: Resize and Upsample
void resize_kernel(ref::KernelContext& ctx);

// comparison.cpp, for std::greater<>, greater_equal<>, less<>, less_equal<>
// and equal_to<>
template <typename Cmp>
void comparison_kernel(ref::KernelContext& ctx);

// nonzero.cpp
void nonzero_kernel(ref::KernelContext& ctx);

// topk.cpp
void topk_kernel(ref::KernelContext& ctx);

}  // namespace kiln::cpu::interpreter
