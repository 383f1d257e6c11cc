#include "backends/cpu/lower/quantized_operands.hpp"

#include <cmath>

namespace kiln::cpu::lowering {

std::optional<Quantization> per_tensor(Context& cx, const ir::Node& n, size_t scale, size_t zero_point, DType type) {
  const ir::Tensor* s = scale < n.inputs.size() ? cx.constant(n.inputs[scale]) : nullptr;
  if (!s || s->dtype() != DType::Float32 || s->numel() != 1) return std::nullopt;
  Quantization q{s->data<float>()[0], 0};
  if (!(q.scale > 0) || !std::isfinite(q.scale)) return std::nullopt;
  if (zero_point < n.inputs.size() && !n.inputs[zero_point].empty()) {
    const ir::Tensor* z = cx.constant(n.inputs[zero_point]);
    if (!z || z->dtype() != type || z->numel() != 1) return std::nullopt;
    q.zero_point = int32_t(z->as_int64(0));
  } else if (type != DType::UInt8) {
    return std::nullopt;  // an omitted zero point makes the result uint8
  }
  return q;
}

bool is_8bit(DType t) { return t == DType::UInt8 || t == DType::Int8; }

// A zero point bound to the primitive at run time (oneDNN 2.6's int8
// kernels take no other), from a constant of the program.
void zero_point_arg(Context& cx, std::unordered_map<int, dnnl::memory>& constants, dnnl::primitive_attr& attr, int arg,
                    int32_t value) {
  if (value == 0) return;
  attr.set_zero_points(arg, 0, {DNNL_RUNTIME_S32_VAL});
  auto held = std::make_shared<const int32_t>(value);
  const md one({1}, dt::s32, dnnl::memory::format_tag::x);
  constants[DNNL_ARG_ATTR_ZERO_POINTS | arg] = cx.constant_memory(one, held.get(), one, held);
}

void output_scales_arg(Context& cx, std::unordered_map<int, dnnl::memory>& constants, dnnl::primitive_attr& attr, float value) {
  attr.set_output_scales(0, {DNNL_RUNTIME_F32_VAL});
  auto held = std::make_shared<const float>(value);
  const md one({1}, dt::f32, dnnl::memory::format_tag::x);
  constants[DNNL_ARG_ATTR_OUTPUT_SCALES] = cx.constant_memory(one, held.get(), one, held);
}

// `m` with elements of `type`, laid out as it is (a dense layout of the
// same dims: plain, channels last).
std::optional<md> retyped(const md& m, dt type) {
  dnnl_memory_desc_t d = m.data;
  if (d.format_kind != dnnl_blocked || d.format_desc.blocking.inner_nblks != 0 || d.extra.flags != 0 || d.offset0 != 0)
    return std::nullopt;
  for (int i = 0; i < d.ndims; ++i)
    if (d.padded_dims[i] != d.dims[i]) return std::nullopt;
  d.data_type = dnnl_data_type_t(type);
  return md(d);
}

// The step of a primitive reading `src` and writing the node's output
// (DNNL_ARG_FROM and DNNL_ARG_TO of a reorder are these too).
void emit(Context& cx, const ir::Node& n, const dnnl::primitive_desc_base& pd, int src, const md& src_md,
          std::unordered_map<int, dnnl::memory> constants, const md& dst_md) {
  const std::string& y = n.outputs[0];
  const int dst = cx.define(y, dst_md, is_plain(dst_md, cx.dims(y)));
  cx.compiled();
  cx.add_primitive(n.describe(), pd, {src, dst}, {0, 1}, {{DNNL_ARG_SRC, src_md}, {DNNL_ARG_DST, dst_md}}, std::move(constants));
}

}  // namespace kiln::cpu::lowering
