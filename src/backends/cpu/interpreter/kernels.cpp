// The interpreter's table: the reference kernels, with the faster kernels of
// this folder where a reference kernel would be slow on a detector's
// post-processing. tests/unit/interpreter_test.cpp holds each against the
// reference.
#include "backends/cpu/interpreter/kernels.hpp"

#include <functional>

#include "backends/cpu/interpreter/families.hpp"

namespace kiln::cpu {

thread_local ThreadBudget* t_budget = nullptr;

const ref::KernelRegistry& interpreter_kernels() {
  using namespace interpreter;
  static const ref::KernelRegistry kernels = [] {
    ref::KernelRegistry r = ref::KernelRegistry::instance();
    r.add("Gemm", &gemm_kernel);
    r.add("MatMul", &matmul_kernel);
    r.add("RoiAlign", &roi_align_kernel);
    r.add("Expand", &expand_kernel);
    r.add("ConstantOfShape", &constant_of_shape_kernel);
    r.add("ScatterElements", &scatter_elements_kernel);
    r.add("Resize", &resize_kernel);
    r.add("Pad", &pad_kernel);
    r.add("Upsample", &resize_kernel);
    r.add("Greater", &comparison_kernel<std::greater<>>);
    r.add("GreaterOrEqual", &comparison_kernel<std::greater_equal<>>);
    r.add("Less", &comparison_kernel<std::less<>>);
    r.add("LessOrEqual", &comparison_kernel<std::less_equal<>>);
    r.add("Equal", &comparison_kernel<std::equal_to<>>);
    r.add("NonZero", &nonzero_kernel);
    r.add("TopK", &topk_kernel);
    return r;
  }();
  return kernels;
}

}  // namespace kiln::cpu
