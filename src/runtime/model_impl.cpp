// A Model's inputs and outputs as the API shows them, and the checks of
// what callers pass against them.
#include <algorithm>

#include "backends/reference/reference_executor.hpp"
#include "runtime/ir/shape_inference.hpp"
#include "runtime/model_impl.hpp"
#include "runtime/onnx/onnx_importer.hpp"
#include "runtime/runtime_impl.hpp"

namespace kiln {

namespace {

const char* kind_phrase(ValueKind k) { return ir::value_kind_phrase(ir::ValueKind(int32_t(k))); }

TensorInfo to_info(const ir::ValueInfo& v, bool has_default) {
  TensorInfo info;
  info.name = v.name;
  info.dtype = ir::dtype_supported(v.dtype) || v.dtype == ir::DType::String ? DType(int32_t(v.dtype)) : DType::Float32;
  info.kind = ValueKind(int32_t(v.kind));
  info.element_kind = ValueKind(int32_t(v.element_kind));
  info.rank_known = v.shape.rank_known;
  info.has_default = has_default;
  for (const auto& d : v.shape.dims) info.shape.push_back(Dim{d.value.value_or(-1), d.symbol});
  return info;
}

}  // namespace

void Model::Impl::own_weights() {
  std::call_once(weights_once, [&] { onnx_import::own_weights(model); });
}

Model::Impl::Impl(const Runtime& rt, ir::Model m, const std::string& not_cached) : runtime(rt), model(std::move(m)) {
  if (!rt.impl_->store) {
    no_store_note = rt.impl_->cache_refused;
  } else if (!not_cached.empty()) {
    no_store = CacheOutcome::NotCached;
    no_store_note = not_cached;
  } else {
    store = rt.impl_->store;
  }
  const ir::Graph& g = *model.graph;
  for (const auto* v : g.required_inputs()) inputs.push_back(to_info(*v, false));
  for (const auto& v : g.inputs)
    if (g.initializers.count(v.name)) inputs.push_back(to_info(v, true));
  if (std::any_of(inputs.begin(), inputs.end(), [](const auto& in) { return in.has_default; })) own_weights();
  // Outputs declared without a (full) shape get the inferred one; most
  // models declare them all, and then loading infers nothing.
  auto declared_full = [](const ir::ValueInfo& v) {
    return v.shape.rank_known && v.dtype != ir::DType::Undefined &&
           std::all_of(v.shape.dims.begin(), v.shape.dims.end(),
                       [](const ir::Dim& d) { return d.is_known() || !d.symbol.empty(); });
  };
  std::map<std::string, ir::ValueInfo> inferred;
  if (!std::all_of(g.outputs.begin(), g.outputs.end(), declared_full)) {
    try {
      own_weights();
      inferred = ir::infer_shapes(g, {}, ref::constant_evaluator()).values;
    } catch (const ir::Error& e) {
      runtime.log(LogLevel::Warning, model.source_path + ": shape inference failed: " + e.what());
    }
  }
  for (const auto& v : g.outputs) {
    auto it = inferred.find(v.name);
    outputs.push_back(to_info(declared_full(v) || it == inferred.end() ? v : it->second, false));
  }
  for (const auto* list : {&inputs, &outputs})
    for (const auto& info : *list)
      if (info.kind != ValueKind::Tensor && tensors_only_refusal.empty())
        tensors_only_refusal = model_label(model) + ": " + std::string(list == &inputs ? "input '" : "output '") + info.name +
                               "' is " + kind_phrase(info.kind) + ": run this model with Model::run_values";
  auto unsupported = ref::unsupported_ops(g);
  if (!unsupported.empty()) {
    std::string list;
    for (const auto& op : unsupported) list += (list.empty() ? "" : ", ") + op;
    runtime.log(LogLevel::Warning, model.source_path + ": operators without a kernel: " + list + "; run() will fail");
  }
}

std::vector<std::pair<std::string, Tensor>> Model::Impl::placeholders(
    const std::vector<std::pair<std::string, Shape>>& shapes) const {
  static char placeholder;
  std::vector<std::pair<std::string, Tensor>> given;
  for (const auto& [name, shape] : shapes) {
    DType dtype = DType::Float32;
    for (const auto& i : inputs)
      if (i.name == name) dtype = i.dtype;
    given.push_back({name, Tensor::view(dtype, shape, &placeholder)});
  }
  return given;
}

std::map<std::string, ir::Tensor> Model::Impl::validate(const std::vector<std::pair<std::string, Tensor>>& given,
                                                        const std::map<std::string, ir::Value>& given_elsewhere) const {
  const std::string where = "model '" + model.source_path + "'";
  std::map<std::string, ir::Tensor> out;
  std::map<std::string, std::pair<int64_t, std::string>> symbols;  // symbol -> (value, input that set it)
  for (const auto& [name, t] : given) {
    const TensorInfo* info = nullptr;
    for (const auto& i : inputs)
      if (i.name == name) info = &i;
    if (!info) {
      std::string names;
      for (const auto& i : inputs) names += (names.empty() ? "'" : ", '") + i.name + "'";
      throw Error(ErrorCode::InvalidArgument, where + ": unknown input '" + name + "'; the model's inputs are " + names);
    }
    if (out.count(name) || given_elsewhere.count(name))
      throw Error(ErrorCode::InvalidArgument, where + ": input '" + name + "' is given twice");
    if (info->kind != ValueKind::Tensor)
      throw Error(ErrorCode::InvalidArgument, where + ": input '" + name + "' is " + kind_phrase(info->kind) +
                                                  ", was given a tensor" +
                                                  (given_elsewhere.empty() ? " (run this model with Model::run_values)" : ""));
    if (!t.defined()) throw Error(ErrorCode::InvalidArgument, where + ": input '" + name + "' is an empty Tensor (no data)");
    if (t.dtype() != info->dtype)
      throw Error(ErrorCode::InvalidArgument,
                  where + ": input '" + name + "' must be " + dtype_name(info->dtype) + ", got " + dtype_name(t.dtype()));
    if (info->rank_known) {
      auto mismatch = [&](const std::string& why) {
        throw Error(ErrorCode::InvalidArgument, where + ": input '" + name + "' must have shape " + info->shape_string() +
                                                    ", got " + shape_to_string(t.shape()) + " (" + why + ")");
      };
      if (t.shape().size() != info->shape.size())
        mismatch("rank " + std::to_string(t.shape().size()) + " instead of " + std::to_string(info->shape.size()));
      for (size_t d = 0; d < info->shape.size(); ++d) {
        const Dim& want = info->shape[d];
        int64_t got = t.shape()[d];
        if (want.is_fixed() && want.value != got)
          mismatch("dimension " + std::to_string(d) + " must be " + std::to_string(want.value));
        if (!want.is_fixed() && !want.symbol.empty()) {
          auto [it, fresh] = symbols.emplace(want.symbol, std::make_pair(got, name));
          if (!fresh && it->second.first != got)
            mismatch("dimension " + std::to_string(d) + " is '" + want.symbol + "', which input '" + it->second.second +
                     "' set to " + std::to_string(it->second.first));
        }
      }
    }
    out[name] = ir::Tensor::view(ir::DType(int32_t(t.dtype())), t.shape(), const_cast<void*>(t.data()), t.owner());
  }
  for (const auto& i : inputs)
    if (!i.has_default && !out.count(i.name) && !given_elsewhere.count(i.name))
      throw Error(ErrorCode::InvalidArgument, where + ": input '" + i.name + "' (" +
                                                  (i.kind == ValueKind::Tensor ? "" : kind_phrase(i.kind) + std::string(" of ")) +
                                                  dtype_name(i.dtype) + " " + i.shape_string() +
                                                  ") is required but was not given");
  return out;
}

namespace {

ir::Tensor to_ir(const Tensor& t) {
  return ir::Tensor::view(ir::DType(int32_t(t.dtype())), t.shape(), const_cast<void*>(t.data()), t.owner());
}

}  // namespace

std::map<std::string, ir::Value> Model::Impl::validate_values(const std::vector<std::pair<std::string, Value>>& given) const {
  const std::string where = "model '" + model.source_path + "'";
  std::map<std::string, ir::Value> out;
  for (const auto& [name, v] : given) {
    if (v.kind() == ValueKind::Tensor) continue;  // validate() checks those
    const TensorInfo* info = nullptr;
    for (const auto& i : inputs)
      if (i.name == name) info = &i;
    if (!info) throw Error(ErrorCode::InvalidArgument, where + ": unknown input '" + name + "'");
    if (out.count(name)) throw Error(ErrorCode::InvalidArgument, where + ": input '" + name + "' is given twice");
    const std::string what = where + ": input '" + name + "'";
    if (v.kind() != info->kind)
      throw Error(ErrorCode::InvalidArgument, what + " is " + kind_phrase(info->kind) + ", was given " + kind_phrase(v.kind()));
    // The tensors of a sequence (held by an optional or not): defined, of the declared dtype.
    auto tensors = [&](const std::vector<Tensor>& seq) {
      std::vector<ir::Tensor> ts;
      for (size_t k = 0; k < seq.size(); ++k) {
        const Tensor& t = seq[k];
        if (!t.defined()) throw Error(ErrorCode::InvalidArgument, what + ": tensor " + std::to_string(k) + " is empty (no data)");
        if (t.dtype() != info->dtype)
          throw Error(ErrorCode::InvalidArgument, what + ": tensor " + std::to_string(k) + " is " + dtype_name(t.dtype()) +
                                                      ", expected " + dtype_name(info->dtype));
        ts.push_back(to_ir(t));
      }
      return ts;
    };
    if (v.kind() == ValueKind::Sequence) {
      out[name] = ir::Value::of_sequence(tensors(v.tensors()));
      continue;
    }
    if (v.element_kind() != info->element_kind)
      throw Error(ErrorCode::InvalidArgument, what + " is an optional of " + kind_phrase(info->element_kind) +
                                                  ", was given one of " + kind_phrase(v.element_kind()));
    if (!v.has_element()) {
      out[name] = ir::Value::empty_optional(ir::ValueKind(int32_t(info->element_kind)));
    } else if (info->element_kind == ValueKind::Sequence) {
      out[name] = ir::Value::optional(ir::Value::of_sequence(tensors(v.element().tensors())));
    } else {
      out[name] = ir::Value::optional(tensors({v.element().tensor()})[0]);
    }
  }
  return out;
}

}  // namespace kiln
