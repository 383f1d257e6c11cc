#pragma once
// How each operator family lowers a node: true when it added the node's
// steps, false (having added none) when its reference kernel should run it.
// op_table.cpp says which of these each operator takes.
#include "runtime/ir/graph.hpp"

namespace kiln::cpu::lowering {

class Context;

// conv.cpp
bool lower_conv(Context& cx, const ir::Node& n);
bool lower_conv_transpose(Context& cx, const ir::Node& n);
bool portable_conv(Context& cx, const ir::Node& n);

// matmul.cpp
bool lower_gemm(Context& cx, const ir::Node& n);
bool lower_matmul(Context& cx, const ir::Node& n);
bool portable_gemm(Context& cx, const ir::Node& n);
bool portable_matmul(Context& cx, const ir::Node& n);

// pool_resize.cpp
bool lower_pool(Context& cx, const ir::Node& n);
bool lower_resize(Context& cx, const ir::Node& n);
bool portable_pool(Context& cx, const ir::Node& n);
bool portable_global_pool(Context& cx, const ir::Node& n);

// normalization.cpp
bool lower_softmax(Context& cx, const ir::Node& n);
bool lower_layer_norm(Context& cx, const ir::Node& n);
bool lower_batch_norm(Context& cx, const ir::Node& n);
bool lower_instance_norm(Context& cx, const ir::Node& n);
bool portable_softmax(Context& cx, const ir::Node& n);
bool portable_layer_norm(Context& cx, const ir::Node& n);

// reduce.cpp: float32 over constant axes.
bool lower_reduce(Context& cx, const ir::Node& n);
bool portable_reduce(Context& cx, const ir::Node& n);

// recurrent.cpp
bool lower_recurrent(Context& cx, const ir::Node& n);
bool portable_recurrent(Context& cx, const ir::Node& n);

// comparison.cpp: Equal, Less, ..., And, Or, Xor as a portable kernel call.
bool lower_comparison(Context& cx, const ir::Node& n);

// control_flow.cpp: If, Loop and Scan with compiled bodies (control_flow_kernel.hpp).
bool lower_control_flow(Context& cx, const ir::Node& n);

// data_movement.cpp
bool lower_alias(Context& cx, const ir::Node& n);
bool lower_transpose(Context& cx, const ir::Node& n);
bool lower_slice(Context& cx, const ir::Node& n);
bool lower_gather(Context& cx, const ir::Node& n);
bool lower_concat(Context& cx, const ir::Node& n);
bool portable_transpose(Context& cx, const ir::Node& n);
bool portable_slice(Context& cx, const ir::Node& n);
bool portable_concat(Context& cx, const ir::Node& n);
bool portable_gather(Context& cx, const ir::Node& n);
// GatherElements, a portable kernel call for both kernel families.
bool lower_gather_elements(Context& cx, const ir::Node& n);
// Split: strided copies, portable kernel calls for both kernel families.
bool lower_split(Context& cx, const ir::Node& n);

// quantized.cpp
bool lower_qlinear_conv(Context& cx, const ir::Node& n);
bool lower_conv_integer(Context& cx, const ir::Node& n);
bool lower_qlinear_matmul(Context& cx, const ir::Node& n);
bool lower_matmul_integer(Context& cx, const ir::Node& n);
bool lower_dynamic_quantize(Context& cx, const ir::Node& n);
bool lower_cast(Context& cx, const ir::Node& n);
// com.microsoft's QLinearAdd and QGemm.
bool lower_qlinear_add(Context& cx, const ir::Node& n);
bool lower_qgemm(Context& cx, const ir::Node& n);
// QuantizeLinear and DequantizeLinear.
bool lower_quantize(Context& cx, const ir::Node& n);

// quantized_portable.cpp: the same operators on the portable kernels.
bool portable_qlinear_conv(Context& cx, const ir::Node& n);
bool portable_conv_integer(Context& cx, const ir::Node& n);
bool portable_qlinear_matmul(Context& cx, const ir::Node& n);
bool portable_matmul_integer(Context& cx, const ir::Node& n);
bool portable_dynamic_quantize(Context& cx, const ir::Node& n);
// DynamicQuantizeLinear's checks and buffers (x, then y, its scale and zero
// point), for either kernel; false if it takes neither.
bool dynamic_quantize_args(Context& cx, const ir::Node& n, std::vector<int>& args);
bool portable_cast(Context& cx, const ir::Node& n);
bool portable_qlinear_add(Context& cx, const ir::Node& n);
bool portable_qgemm(Context& cx, const ir::Node& n);
bool portable_quantize(Context& cx, const ir::Node& n);

// arg_extreme.cpp: ArgMax, ArgMin and Hardmax, a portable kernel call for
// both kernel families.
bool lower_arg_extreme(Context& cx, const ir::Node& n);
bool lower_hardmax(Context& cx, const ir::Node& n);

// trilu.cpp: Trilu of any element type, a portable kernel call for both
// kernel families.
bool lower_trilu(Context& cx, const ir::Node& n);

// loss.cpp: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, a
// portable kernel call for both kernel families.
bool lower_loss(Context& cx, const ir::Node& n);

// elementwise.cpp: a loop, or a oneDNN binary between blocked operands.
bool lower_elementwise(Context& cx, const ir::Node& n);
// A loop only (what the portable kernels take).
bool lower_loop(Context& cx, const ir::Node& n);
// Cast: lower_cast (portable_cast), else a loop.
bool lower_cast_or_loop(Context& cx, const ir::Node& n);
bool portable_cast_or_loop(Context& cx, const ir::Node& n);

}  // namespace kiln::cpu::lowering
