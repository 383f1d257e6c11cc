// Comparisons (Equal, Less, ...) and logic (And, Or, Xor) with broadcasting:
// a portable kernel call in every family. What a control-flow condition or
// a mask is computed with, so that an If on a sample rate compiles whole.
#include <map>

#include "backends/cpu/lower/context.hpp"
#include "backends/cpu/lower/families.hpp"
#include "backends/cpu/portable/kernels.h"

namespace kiln::cpu::lowering {

bool lower_comparison(Context& cx, const ir::Node& n) {
  static const std::map<std::string, int32_t, std::less<>> ops = {
      {"Equal", KILN_PK_COMPARE_EQUAL},
      {"Less", KILN_PK_COMPARE_LESS},
      {"LessOrEqual", KILN_PK_COMPARE_LESS_EQUAL},
      {"Greater", KILN_PK_COMPARE_GREATER},
      {"GreaterOrEqual", KILN_PK_COMPARE_GREATER_EQUAL},
      {"And", KILN_PK_COMPARE_AND},
      {"Or", KILN_PK_COMPARE_OR},
      {"Xor", KILN_PK_COMPARE_XOR},
  };
  const auto op = ops.find(n.op_type);
  if (op == ops.end() || n.inputs.size() != 2 || n.outputs.size() != 1 || n.inputs[0].empty() || n.inputs[1].empty())
    return false;
  const DType type = cx.dtype(n.inputs[0]);
  if (cx.dtype(n.inputs[1]) != type || cx.dtype(n.outputs[0]) != DType::Bool) return false;
  const bool logic = op->second >= KILN_PK_COMPARE_AND;
  int32_t element;
  if (type == DType::Bool && (logic || op->second == KILN_PK_COMPARE_EQUAL))
    element = KILN_PK_ELEMENT_U8;
  else if (logic)
    return false;
  else if (type == DType::Float32)
    element = KILN_PK_ELEMENT_F32;
  else if (type == DType::Int64)
    element = KILN_PK_ELEMENT_I64;
  else if (type == DType::Int32)
    element = KILN_PK_ELEMENT_I32;
  else
    return false;
  Dims out = cx.dims(n.outputs[0]);
  if (out.size() > KILN_PK_COMPARE_MAX_RANK) return false;
  if (out.empty()) out = {1};  // a scalar as one element: the kernel's arrays are never empty
  // Each operand's element strides over the output's dims, right-aligned,
  // 0 where it broadcasts.
  auto strides = [&](const std::string& name) {
    const Dims in = cx.dims(name);
    std::vector<int64_t> s(out.size(), 0);
    int64_t step = 1;
    for (size_t i = 0; i < in.size(); ++i) {
      const size_t d = out.size() - 1 - i, from = in.size() - 1 - i;
      s[d] = in[from] == 1 ? 0 : step;
      step *= in[from];
    }
    return s;
  };
  const int a = cx.plain(n.inputs[0]), b = cx.plain(n.inputs[1]);
  cx.compiled();
  cx.add_call(
      n.describe(), {a, b, cx.define_plain(n.outputs[0])}, {0, 0, 1},
      {"kiln_pk_compare",
       {Call::i32(op->second), Call::i32(element), Call::i64(int64_t(out.size())), Call::array(out),
        Call::array(strides(n.inputs[0])), Call::array(strides(n.inputs[1])), Call::buffer(0), Call::buffer(1), Call::buffer(2)},
       false});
  return true;
}

}  // namespace kiln::cpu::lowering
