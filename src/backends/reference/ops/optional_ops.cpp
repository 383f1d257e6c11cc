// Optionals: Optional, OptionalHasElement and OptionalGetElement.
#include <string>

#include "backends/reference/kernel_registry.hpp"

namespace kiln::ref {
namespace {

// An optional holding the input, or an empty one of the 'type' attribute.
void optional_kernel(KernelContext& ctx) {
  if (ctx.has_input(0)) return ctx.set_output_value(0, ir::Value::optional(ctx.input_value(0)));
  const ir::Attribute* type = ctx.node().attr("type");
  if (!type || type->kind != ir::Attribute::Kind::Type) ctx.fail("an Optional without input needs the attribute 'type'");
  if (type->type.kind == ir::ValueKind::Optional) ctx.unsupported("an optional of an optional is not supported");
  ctx.set_output_value(0, ir::Value::empty_optional(type->type.kind));
}

// Opset 18 takes a tensor or a sequence as well: they always hold an element.
void optional_has_element(KernelContext& ctx) {
  bool has = false;
  if (ctx.has_input(0)) {
    const ir::Value v = ctx.input_value(0);
    has = v.kind != ir::ValueKind::Optional || v.element;
  }
  ctx.set_output(0, Tensor::scalar<bool>(has));
}

void optional_get_element(KernelContext& ctx) {
  ir::Value v = ctx.input_value(0);
  if (v.kind != ir::ValueKind::Optional) return ctx.set_output_value(0, std::move(v));
  if (!v.element) ctx.fail("the optional is empty");
  ctx.set_output_value(0, *v.element);
}

}  // namespace

void register_optional_ops(KernelRegistry& r) {
  r.add("Optional", &optional_kernel);
  r.add("OptionalHasElement", &optional_has_element);
  r.add("OptionalGetElement", &optional_get_element);
}

}  // namespace kiln::ref
