#include "backends/cpu/lower/op_table.hpp"

#include <map>
#include <string>

#include "backends/cpu/lower/context.hpp"
#include "backends/cpu/lower/families.hpp"

namespace kiln::cpu::lowering {

namespace {

using Op = Loop::Op;

constexpr OpLowering view(LowerFn lower) { return {StepKind::View, lower, lower}; }
constexpr OpLowering primitive(LowerFn native, LowerFn portable) { return {StepKind::Primitive, native, portable}; }
// An elementwise operator with `arity` inputs that a loop computes as `op`.
constexpr OpLowering loop(Op op, int arity) { return {StepKind::Loop, &lower_elementwise, &lower_loop, true, op, arity}; }
constexpr OpLowering libm_loop(Loop::LibmFunction f) {
  return {StepKind::Loop, &lower_elementwise, &lower_loop, true, Op::Libm, 1, f};
}

const std::map<std::string, OpLowering, std::less<>>& op_table() {
  static const std::map<std::string, OpLowering, std::less<>> table = [] {
    std::map<std::string, OpLowering, std::less<>> t = {
        // data_movement.cpp
        {"Identity", view(&lower_alias)},
        {"Reshape", view(&lower_alias)},
        {"Flatten", view(&lower_alias)},
        {"Squeeze", view(&lower_alias)},
        {"Unsqueeze", view(&lower_alias)},
        {"Transpose", primitive(&lower_transpose, &portable_transpose)},
        {"Concat", primitive(&lower_concat, &portable_concat)},
        {"Slice", primitive(&lower_slice, &portable_slice)},
        {"Gather", primitive(&lower_gather, &portable_gather)},
        {"GatherElements", primitive(&lower_gather_elements, &lower_gather_elements)},
        {"Split", primitive(&lower_split, &lower_split)},
        // comparison.cpp
        {"Equal", primitive(&lower_comparison, &lower_comparison)},
        {"Less", primitive(&lower_comparison, &lower_comparison)},
        {"LessOrEqual", primitive(&lower_comparison, &lower_comparison)},
        {"Greater", primitive(&lower_comparison, &lower_comparison)},
        {"GreaterOrEqual", primitive(&lower_comparison, &lower_comparison)},
        {"And", primitive(&lower_comparison, &lower_comparison)},
        {"Or", primitive(&lower_comparison, &lower_comparison)},
        {"Xor", primitive(&lower_comparison, &lower_comparison)},
        // control_flow.cpp
        {"If", primitive(&lower_control_flow, &lower_control_flow)},
        {"Loop", primitive(&lower_control_flow, &lower_control_flow)},
        {"Scan", primitive(&lower_control_flow, &lower_control_flow)},
        // conv.cpp
        {"Conv", primitive(&lower_conv, &portable_conv)},
        {"ConvTranspose", primitive(&lower_conv_transpose, nullptr)},
        // matmul.cpp
        {"Gemm", primitive(&lower_gemm, &portable_gemm)},
        {"MatMul", primitive(&lower_matmul, &portable_matmul)},
        // pool_resize.cpp
        {"MaxPool", primitive(&lower_pool, &portable_pool)},
        {"AveragePool", primitive(&lower_pool, &portable_pool)},
        {"GlobalAveragePool", primitive(&lower_pool, &portable_global_pool)},
        {"GlobalMaxPool", primitive(&lower_pool, &portable_global_pool)},
        // normalization.cpp
        {"Softmax", primitive(&lower_softmax, &portable_softmax)},
        {"LogSoftmax", primitive(&lower_softmax, &portable_softmax)},
        {"LayerNormalization", primitive(&lower_layer_norm, &portable_layer_norm)},
        {"BatchNormalization", primitive(&lower_batch_norm, nullptr)},
        {"InstanceNormalization", primitive(&lower_instance_norm, nullptr)},
        // reduce.cpp
        {"ReduceSum", primitive(&lower_reduce, &portable_reduce)},
        {"ReduceMean", primitive(&lower_reduce, &portable_reduce)},
        {"ReduceMax", primitive(&lower_reduce, &portable_reduce)},
        {"ReduceMin", primitive(&lower_reduce, &portable_reduce)},
        {"ReduceProd", primitive(&lower_reduce, &portable_reduce)},
        {"ReduceL1", primitive(&lower_reduce, &portable_reduce)},
        {"ReduceL2", primitive(&lower_reduce, &portable_reduce)},
        {"ReduceSumSquare", primitive(&lower_reduce, &portable_reduce)},
        {"ReduceLogSum", primitive(&lower_reduce, &portable_reduce)},
        {"ReduceLogSumExp", primitive(&lower_reduce, &portable_reduce)},
        // arg_extreme.cpp
        {"ArgMax", primitive(&lower_arg_extreme, &lower_arg_extreme)},
        {"ArgMin", primitive(&lower_arg_extreme, &lower_arg_extreme)},
        {"Hardmax", primitive(&lower_hardmax, &lower_hardmax)},
        // trilu.cpp
        {"Trilu", primitive(&lower_trilu, &lower_trilu)},
        // loss.cpp
        {"NegativeLogLikelihoodLoss", primitive(&lower_loss, &lower_loss)},
        {"SoftmaxCrossEntropyLoss", primitive(&lower_loss, &lower_loss)},
        // recurrent.cpp
        {"RNN", primitive(&lower_recurrent, &portable_recurrent)},
        {"GRU", primitive(&lower_recurrent, &portable_recurrent)},
        {"LSTM", primitive(&lower_recurrent, &portable_recurrent)},
        // quantized.cpp, quantized_portable.cpp
        {"QLinearConv", primitive(&lower_qlinear_conv, &portable_qlinear_conv)},
        {"ConvInteger", primitive(&lower_conv_integer, &portable_conv_integer)},
        {"QLinearMatMul", primitive(&lower_qlinear_matmul, &portable_qlinear_matmul)},
        {"QuantizeLinear", primitive(&lower_quantize, &portable_quantize)},
        {"DequantizeLinear", primitive(&lower_quantize, &portable_quantize)},
        {"DynamicQuantizeLinear", primitive(&lower_dynamic_quantize, &portable_dynamic_quantize)},
        {"MatMulInteger", primitive(&lower_matmul_integer, &portable_matmul_integer)},
        // elementwise.cpp
        {"Add", loop(Op::Add, 2)},
        {"Sub", loop(Op::Sub, 2)},
        {"Mul", loop(Op::Mul, 2)},
        {"Div", loop(Op::Div, 2)},
        {"Pow", loop(Op::Pow, 2)},
        {"Max", loop(Op::Max, 2)},
        {"Min", loop(Op::Min, 2)},
        {"PRelu", loop(Op::PRelu, 2)},
        {"Neg", loop(Op::Neg, 1)},
        {"Abs", loop(Op::Abs, 1)},
        {"Relu", loop(Op::Relu, 1)},
        {"LeakyRelu", loop(Op::LeakyRelu, 1)},
        {"Sigmoid", loop(Op::Sigmoid, 1)},
        {"Tanh", loop(Op::Tanh, 1)},
        {"Exp", loop(Op::Exp, 1)},
        {"Log", loop(Op::Log, 1)},
        {"Sqrt", loop(Op::Sqrt, 1)},
        {"Erf", loop(Op::Erf, 1)},
        {"Reciprocal", loop(Op::Reciprocal, 1)},
        {"Floor", loop(Op::Floor, 1)},
        {"Ceil", loop(Op::Ceil, 1)},
        {"Clip", loop(Op::Clip, 1)},  // its bounds are constants, not loop inputs
        {"HardSigmoid", loop(Op::HardSigmoid, 1)},
        {"HardSwish", loop(Op::HardSwish, 1)},
        {"Softplus", loop(Op::Softplus, 1)},
        {"Elu", loop(Op::Elu, 1)},
        {"Selu", loop(Op::Selu, 1)},
        {"Softsign", loop(Op::Softsign, 1)},
        // Max, Min, Sum and Mean take any number of inputs (elementwise.cpp).
        {"Sum", loop(Op::Add, 2)},
        {"Mean", loop(Op::Add, 2)},
        {"Where", loop(Op::Where, 3)},
        {"Mod", loop(Op::Mod, 2)},
        {"BitShift", loop(Op::BitShift, 2)},
        {"Not", loop(Op::Not, 1)},
        {"Sign", loop(Op::Sign, 1)},
        {"Round", loop(Op::Round, 1)},
        {"IsNaN", loop(Op::IsNaN, 1)},
        {"IsInf", loop(Op::IsInf, 1)},
        {"ThresholdedRelu", loop(Op::ThresholdedRelu, 1)},
        {"Shrink", loop(Op::Shrink, 1)},
        {"Celu", loop(Op::Celu, 1)},
        {"CastLike", loop(Op::Cast, 2)},  // reads its first input only
        {"Sin", libm_loop(Loop::LibmFunction::Sin)},
        {"Cos", libm_loop(Loop::LibmFunction::Cos)},
        {"Tan", libm_loop(Loop::LibmFunction::Tan)},
        {"Asin", libm_loop(Loop::LibmFunction::Asin)},
        {"Acos", libm_loop(Loop::LibmFunction::Acos)},
        {"Atan", libm_loop(Loop::LibmFunction::Atan)},
        {"Sinh", libm_loop(Loop::LibmFunction::Sinh)},
        {"Cosh", libm_loop(Loop::LibmFunction::Cosh)},
        {"Asinh", libm_loop(Loop::LibmFunction::Asinh)},
        {"Acosh", libm_loop(Loop::LibmFunction::Acosh)},
        {"Atanh", libm_loop(Loop::LibmFunction::Atanh)},
    };
    // An inference-mode Dropout reaches the lowering as an Identity (the
    // passes' no_ops_as_identity); one that trains runs its reference kernel.
    t["Dropout"] = view(nullptr);
    // Lowered where oneDNN's resampling computes what the reference kernel
    // does (pool_resize.cpp), but not claimed (see Backend::supports): the
    // other modes run their reference kernel in the program.
    t["Resize"] = t["Upsample"] = {StepKind::Primitive, &lower_resize, nullptr, false};
    // From 8-bit and 32-bit integers to float as a reorder or a portable
    // dequantization (quantized.cpp, quantized_portable.cpp), else a loop.
    t["Cast"] = {StepKind::Loop, &lower_cast_or_loop, &portable_cast_or_loop, true, Op::Cast, 1};
    return t;
  }();
  return table;
}

}  // namespace

// ONNX Runtime's contrib operators that the graph passes make (fuse_qdq).
const std::map<std::string, OpLowering, std::less<>>& contrib_table() {
  static const std::map<std::string, OpLowering, std::less<>> table = {
      {"QLinearAdd", primitive(&lower_qlinear_add, &portable_qlinear_add)},  // quantized.cpp, quantized_portable.cpp
      {"QGemm", primitive(&lower_qgemm, &portable_qgemm)},                   // quantized.cpp, quantized_portable.cpp
  };
  return table;
}

const OpLowering* find_op(const ir::Node& n) {
  const bool onnx = n.domain.empty() || n.domain == "ai.onnx";
  if (!onnx && n.domain != "com.microsoft") return nullptr;
  const auto& table = onnx ? op_table() : contrib_table();
  auto it = table.find(n.op_type);
  return it == table.end() ? nullptr : &it->second;
}

bool lower_node(Context& cx, const ir::Node& n) {
  const OpLowering* op = find_op(n);
  if (!op) return false;
  if (op->kind != StepKind::View && cx.touches_empty(n)) return false;
  const LowerFn lower = cx.portable ? op->portable : op->native;
  return lower && lower(cx, n);
}

}  // namespace kiln::cpu::lowering
