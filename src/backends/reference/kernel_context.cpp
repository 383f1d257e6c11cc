#include "backends/reference/kernel_context.hpp"

namespace kiln::ref {

using ir::ErrorKind;

KernelContext::KernelContext(const ir::Node& node, std::vector<const Tensor*> inputs, SubgraphRunner runner)
    : node_(node), inputs_(std::move(inputs)), outputs_(node.outputs.size()), runner_(std::move(runner)) {}

KernelContext KernelContext::with_values(const ir::Node& node, std::vector<const ir::Value*> inputs, SubgraphRunner runner) {
  KernelContext ctx(node, std::vector<const Tensor*>{}, std::move(runner));
  for (const ir::Value* v : inputs) ctx.inputs_.push_back(v && v->is_tensor() ? &v->tensor : nullptr);
  ctx.values_ = std::move(inputs);
  return ctx;
}

const Tensor& KernelContext::input(size_t i) const {
  if (!has_input(i)) fail("input " + std::to_string(i) + " is required but missing");
  if (!inputs_[i]) fail("input " + std::to_string(i) + " is " + values_[i]->describe() + ", expected a tensor");
  return *inputs_[i];
}

ir::Value KernelContext::input_value(size_t i) const {
  if (!has_input(i)) fail("input " + std::to_string(i) + " is required but missing");
  return i < values_.size() ? *values_[i] : ir::Value(*inputs_[i]);
}

void KernelContext::set_output(size_t i, Tensor t) {
  if (i >= outputs_.size()) {
    // Outputs past the model's list are optional outputs nobody asked for.
    return;
  }
  outputs_[i] = std::move(t);
}

void KernelContext::set_output_value(size_t i, ir::Value v) {
  if (v.is_tensor()) return set_output(i, std::move(v.tensor));
  if (i >= outputs_.size()) return;
  value_outputs_.resize(outputs_.size());
  value_outputs_[i] = std::move(v);
}

ir::Value KernelContext::take_output(size_t i) {
  if (i < value_outputs_.size() && !value_outputs_[i].is_tensor()) return std::move(value_outputs_[i]);
  return std::move(outputs_.at(i));
}

static const ir::Attribute* typed(const KernelContext& c, const std::string& name, ir::Attribute::Kind k) {
  const ir::Attribute* a = c.node().attr(name);
  if (a && a->kind != k)
    c.fail("attribute '" + name + "' should be of type " + ir::attribute_kind_name(k) + ", is " +
           ir::attribute_kind_name(a->kind));
  return a;
}

int64_t KernelContext::attr_int(const std::string& name, int64_t fallback) const {
  const auto* a = typed(*this, name, ir::Attribute::Kind::Int);
  return a ? a->i : fallback;
}

int64_t KernelContext::attr_int(const std::string& name) const {
  const auto* a = typed(*this, name, ir::Attribute::Kind::Int);
  if (!a) fail("required attribute '" + name + "' is missing");
  return a->i;
}

float KernelContext::attr_float(const std::string& name, float fallback) const {
  const auto* a = typed(*this, name, ir::Attribute::Kind::Float);
  return a ? a->f : fallback;
}

std::string KernelContext::attr_string(const std::string& name, const std::string& fallback) const {
  const auto* a = typed(*this, name, ir::Attribute::Kind::String);
  return a ? a->s : fallback;
}

std::vector<int64_t> KernelContext::attr_ints(const std::string& name, std::vector<int64_t> fallback) const {
  const auto* a = typed(*this, name, ir::Attribute::Kind::Ints);
  return a ? a->ints : fallback;
}

std::vector<float> KernelContext::attr_floats(const std::string& name, std::vector<float> fallback) const {
  const auto* a = typed(*this, name, ir::Attribute::Kind::Floats);
  return a ? a->floats : fallback;
}

std::vector<std::string> KernelContext::attr_strings(const std::string& name) const {
  const auto* a = typed(*this, name, ir::Attribute::Kind::Strings);
  return a ? a->strings : std::vector<std::string>{};
}

const Tensor* KernelContext::attr_tensor(const std::string& name) const {
  const auto* a = typed(*this, name, ir::Attribute::Kind::Tensor);
  return a ? &a->t : nullptr;
}

const ir::Graph& KernelContext::attr_graph(const std::string& name) const {
  const auto* a = typed(*this, name, ir::Attribute::Kind::Graph);
  if (!a || !a->g) fail("required graph attribute '" + name + "' is missing");
  return *a->g;
}

std::vector<ir::Value> KernelContext::run_subgraph(const ir::Graph& g, const std::vector<ir::Value>& inputs) const {
  if (!runner_) fail("subgraphs cannot run in this context");
  return runner_(g, inputs);
}

void KernelContext::fail(const std::string& message) const {
  ir::fail(ErrorKind::InvalidArgument, node_.describe() + ": " + message);
}

void KernelContext::unsupported(const std::string& message) const {
  ir::fail(ErrorKind::Unsupported, node_.describe() + ": " + message);
}

}  // namespace kiln::ref
