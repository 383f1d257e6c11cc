#pragma once
// What the quantized lowerings (quantized.cpp, quantize_linear.cpp) share:
// an operand's scale and zero point, oneDNN's run-time zero points and
// output scales, and the step of a primitive from one buffer to the node's
// output.
#include <optional>
#include <unordered_map>

#include "backends/cpu/lower/context.hpp"

namespace kiln::cpu::lowering {

// The scale and zero point of one quantized operand, per tensor: scales
// positive and finite, the zero point of the operand's own type.
struct Quantization {
  float scale = 1;
  int32_t zero_point = 0;
};

std::optional<Quantization> per_tensor(Context& cx, const ir::Node& n, size_t scale, size_t zero_point, DType type);

bool is_8bit(DType t);

// A zero point bound to the primitive at run time (oneDNN 2.6's int8
// kernels take no other), from a constant of the program.
void zero_point_arg(Context& cx, std::unordered_map<int, dnnl::memory>& constants, dnnl::primitive_attr& attr, int arg,
                    int32_t value);
void output_scales_arg(Context& cx, std::unordered_map<int, dnnl::memory>& constants, dnnl::primitive_attr& attr, float value);

// `m` with elements of `type`, laid out as it is (a dense layout of the
// same dims: plain, channels last).
std::optional<md> retyped(const md& m, dt type);

// The step of a primitive reading `src` and writing the node's output
// (DNNL_ARG_FROM and DNNL_ARG_TO of a reorder are these too).
void emit(Context& cx, const ir::Node& n, const dnnl::primitive_desc_base& pd, int src, const md& src_md,
          std::unordered_map<int, dnnl::memory> constants, const md& dst_md);

}  // namespace kiln::cpu::lowering
