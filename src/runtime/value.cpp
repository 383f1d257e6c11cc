// kiln::Value: a tensor, a sequence of tensors or an optional, for
// Model::run_values.
#include "runtime/ir/value.hpp"
#include "kiln/kiln.hpp"

namespace kiln {

namespace {

[[noreturn]] void wrong_kind(const char* wanted, ValueKind got) {
  throw Error(ErrorCode::InvalidArgument,
              std::string("Value: not ") + wanted + ", it is " + ir::value_kind_phrase(ir::ValueKind(int32_t(got))));
}

}  // namespace

const char* value_kind_name(ValueKind k) { return ir::value_kind_name(ir::ValueKind(int32_t(k))); }

Value Value::sequence(std::vector<Tensor> tensors) {
  Value v;
  v.kind_ = ValueKind::Sequence;
  v.tensors_ = std::move(tensors);
  return v;
}

Value Value::optional(Value element) {
  if (element.kind_ == ValueKind::Optional)
    throw Error(ErrorCode::InvalidArgument, "Value::optional: an optional holds a tensor or a sequence, not an optional");
  Value v;
  v.kind_ = ValueKind::Optional;
  v.element_kind_ = element.kind_;
  v.element_ = std::make_shared<const Value>(std::move(element));
  return v;
}

Value Value::empty_optional(ValueKind element_kind) {
  if (element_kind == ValueKind::Optional)
    throw Error(ErrorCode::InvalidArgument, "Value::empty_optional: an optional holds a tensor or a sequence");
  Value v;
  v.kind_ = ValueKind::Optional;
  v.element_kind_ = element_kind;
  return v;
}

const Tensor& Value::tensor() const {
  if (kind_ != ValueKind::Tensor) wrong_kind("a tensor", kind_);
  return tensor_;
}

const std::vector<Tensor>& Value::tensors() const {
  if (kind_ != ValueKind::Sequence) wrong_kind("a sequence", kind_);
  return tensors_;
}

bool Value::has_element() const {
  if (kind_ != ValueKind::Optional) wrong_kind("an optional", kind_);
  return element_ != nullptr;
}

const Value& Value::element() const {
  if (!has_element()) throw Error(ErrorCode::InvalidArgument, "Value::element: the optional is empty");
  return *element_;
}

ValueKind Value::element_kind() const {
  if (kind_ != ValueKind::Optional) wrong_kind("an optional", kind_);
  return element_kind_;
}

}  // namespace kiln
