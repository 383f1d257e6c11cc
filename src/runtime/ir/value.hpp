#pragma once
// What a value of a graph holds at run time: a tensor (nearly always), a
// sequence of tensors, or an optional that holds one of those or nothing.
// Copies share the tensors' storage, like Tensor's.
#include <memory>
#include <string>
#include <vector>

#include "runtime/ir/tensor.hpp"

namespace kiln::ir {

enum class ValueKind : uint8_t { Tensor, Sequence, Optional };
const char* value_kind_name(ValueKind k);    // "tensor", "sequence", "optional"
const char* value_kind_phrase(ValueKind k);  // "a tensor", "a sequence", "an optional"

struct Value {
  ValueKind kind = ValueKind::Tensor;
  Tensor tensor;                   // Tensor
  std::vector<Tensor> sequence;    // Sequence
  std::shared_ptr<Value> element;  // Optional: what it holds, null when empty
  // Optional: the kind it holds or would hold (Tensor or Sequence).
  ValueKind element_kind = ValueKind::Tensor;

  Value() = default;
  Value(Tensor t) : tensor(std::move(t)) {}  // NOLINT: a tensor is a value
  static Value of_sequence(std::vector<Tensor> tensors);
  static Value optional(Value element);
  static Value empty_optional(ValueKind element_kind);

  bool is_tensor() const { return kind == ValueKind::Tensor; }
  // Whether the value was set at all (an undefined tensor is not).
  bool defined() const { return kind != ValueKind::Tensor || tensor.defined(); }
  // "a float32 tensor of 2x3", "a sequence of 4 tensors", "an empty optional": for messages.
  std::string describe() const;
};

}  // namespace kiln::ir
