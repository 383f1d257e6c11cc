#include "runtime/ir/value.hpp"

namespace kiln::ir {

const char* value_kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::Tensor: return "tensor";
    case ValueKind::Sequence: return "sequence";
    case ValueKind::Optional: return "optional";
  }
  return "?";
}

const char* value_kind_phrase(ValueKind k) {
  switch (k) {
    case ValueKind::Tensor: return "a tensor";
    case ValueKind::Sequence: return "a sequence";
    case ValueKind::Optional: return "an optional";
  }
  return "?";
}

Value Value::of_sequence(std::vector<Tensor> tensors) {
  Value v;
  v.kind = ValueKind::Sequence;
  v.sequence = std::move(tensors);
  return v;
}

Value Value::optional(Value element) {
  if (element.kind == ValueKind::Optional) fail(ErrorKind::Unsupported, "an optional of an optional is not supported");
  Value v;
  v.kind = ValueKind::Optional;
  v.element_kind = element.kind;
  v.element = std::make_shared<Value>(std::move(element));
  return v;
}

Value Value::empty_optional(ValueKind element_kind) {
  Value v;
  v.kind = ValueKind::Optional;
  v.element_kind = element_kind;
  return v;
}

std::string Value::describe() const {
  switch (kind) {
    case ValueKind::Tensor:
      return tensor.defined() ? std::string("a ") + dtype_name(tensor.dtype()) + " tensor of " + dims_to_string(tensor.dims())
                              : "no value";
    case ValueKind::Sequence: return "a sequence of " + std::to_string(sequence.size()) + " tensors";
    case ValueKind::Optional:
      return element ? "an optional holding " + element->describe()
                     : std::string("an empty optional (of a ") + value_kind_name(element_kind) + ")";
  }
  return "?";
}

}  // namespace kiln::ir
