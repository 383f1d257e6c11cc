// kiln::Model: loading, what a model declares, running it, where its nodes
// go and freezing it into a bundle.
#include "backends/pipeline.hpp"
#include "backends/reference/reference_executor.hpp"
#include "bundle/freeze.hpp"
#include "runtime/api_errors.hpp"
#include "runtime/model_impl.hpp"
#include "runtime/onnx/onnx_importer.hpp"
#include "runtime/runtime_impl.hpp"

namespace kiln {

namespace {

// How a model is read: its files' hashes remembered in the cache, if it has one.
onnx_import::ImportOptions import_options(const Runtime& runtime, const cache::Store* store) {
  onnx_import::ImportOptions opts;
  opts.hash_threads = runtime.threads();
  if (store) {
    opts.recall_file_hash = [store](const struct stat& st) { return store->recall_model_hash(st); };
    opts.remember_file_hash = [store](const std::string& file, const struct stat& st, const timespec& looked_at,
                                      const std::string& hex) { store->remember_model_hash(st, looked_at, hex, file); };
  }
  return opts;
}

}  // namespace

Model Model::load(const Runtime& runtime, const std::string& path) { return load(runtime, path, LoadOptions{}); }

Model Model::load(const Runtime& runtime, const std::string& path, const LoadOptions& options) {
  Model m;
  m.impl_ = translate_errors([&] {
    onnx_import::ImportOptions opts = import_options(runtime, runtime.impl_->store.get());
    opts.keep_weights_in_file = true;
    auto impl = std::make_shared<Impl>(runtime, onnx_import::import_model_file(path, opts));
    impl->share_remotely = !options.private_weights;
    return impl;
  });
  return m;
}

Model Model::load_from_memory(const Runtime& runtime, const void* data, size_t size, const std::string& external_data_dir) {
  return load_from_memory(runtime, data, size, MemoryLoadOptions{external_data_dir, false});
}

Model Model::load_from_memory(const Runtime& runtime, const void* data, size_t size, const MemoryLoadOptions& options) {
  if (!data && size) throw Error(ErrorCode::InvalidArgument, "Model::load_from_memory: data is null");
  Model m;
  m.impl_ = translate_errors([&] {
    const cache::Store* store = options.cache ? runtime.impl_->store.get() : nullptr;
    onnx_import::ImportOptions opts = import_options(runtime, store);
    opts.external_data_dir = options.external_data_dir;
    return std::make_shared<Impl>(runtime, onnx_import::import_model_bytes(data, size, "<memory>", opts),
                                  options.cache ? "" : "loaded from memory: not cached unless MemoryLoadOptions::cache is set");
  });
  return m;
}

const std::vector<TensorInfo>& Model::inputs() const { return impl_->inputs; }
const std::vector<TensorInfo>& Model::outputs() const { return impl_->outputs; }
int64_t Model::opset() const { return impl_->model.opset(""); }
std::string Model::source() const { return impl_->model.source_path; }

std::string Model::producer() const {
  const auto& m = impl_->model;
  return m.producer_version.empty() ? m.producer_name : m.producer_name + " " + m.producer_version;
}

std::map<std::string, int> Model::op_histogram() const {
  std::map<std::string, int> h;
  ir::visit_nodes(*impl_->model.graph,
                  [&](const ir::Node& n) { h[n.domain.empty() ? n.op_type : n.domain + "." + n.op_type]++; });
  return h;
}

std::vector<std::string> Model::unsupported_ops() const { return ref::unsupported_ops(*impl_->model.graph); }

std::vector<NodePlacement> Model::placement(const std::vector<std::pair<std::string, Shape>>& shapes) const {
  return translate_errors([&] {
    const auto given = backends::shapes_of(impl_->validate(impl_->placeholders(shapes)));
    auto [graph, spec] = backends::specialize_and_optimize(*impl_->model.graph, given);
    std::vector<NodePlacement> placed;
    for (const auto& part : backends::partition(*graph, spec, impl_->runtime.impl_->order))
      for (const auto& node : part.graph->nodes)
        placed.push_back(
            {node.name, node.domain.empty() ? node.op_type : node.domain + "." + node.op_type, part.backend->name()});
    return placed;
  });
}

Model::FreezeResult Model::freeze(const FreezeOptions& options) const {
  return translate_errors([&] {
    if (options.kernels != "portable" && options.kernels != "native")
      ir::fail(ir::ErrorKind::InvalidArgument, "kernels '" + options.kernels + "': expected 'portable' or 'native'");
    if (options.format != "object" && options.format != "static")
      ir::fail(ir::ErrorKind::InvalidArgument, "format '" + options.format + "': expected 'object' or 'static'");
    if (options.output_dir.empty()) ir::fail(ir::ErrorKind::InvalidArgument, "no output directory");
    bundle::FreezeRequest req;
    req.output_dir = options.output_dir;
    req.name = options.name;
    for (const auto& [name, shape] : options.shapes) req.shapes[name] = shape;
    req.dims = options.dims;
    req.batch_sizes = options.batch_sizes;
    req.batch_axes = options.batch_axes;
    for (const auto& [name, t] : options.constants) {
      if (!t.defined()) ir::fail(ir::ErrorKind::InvalidArgument, "constant '" + name + "' has no data");
      const ir::Tensor view = ir::Tensor::view(ir::DType(int32_t(t.dtype())), ir::Dims(t.shape().begin(), t.shape().end()),
                                               const_cast<void*>(t.data()));
      if (!req.constants.emplace(name, view.clone()).second)
        ir::fail(ir::ErrorKind::InvalidArgument, "constant '" + name + "' is given twice");
    }
    req.triple = options.target;
    for (size_t start = 0; !options.cpu.empty();) {
      const size_t end = std::min(options.cpu.find(',', start), options.cpu.size());
      req.cpus.push_back(options.cpu.substr(start, end - start));
      if (req.cpus.back().empty()) ir::fail(ir::ErrorKind::InvalidArgument, "cpu '" + options.cpu + "' has an empty name");
      if (end == options.cpu.size()) break;
      start = end + 1;
    }
    req.embed_weights = options.embed_weights;
    req.static_library = options.format == "static";
    req.native_kernels = options.kernels == "native";
    req.progress = options.progress;
    const Runtime::Impl& rt = *impl_->runtime.impl_;
    if (impl_->store && rt.store_writable.load()) req.store = impl_->store.get();
    req.warn = [&](const std::string& message) {
      impl_->runtime.log(LogLevel::Warning, model_label(impl_->model) + ": " + message);
    };
    impl_->own_weights();
    const bundle::FreezeResult r = bundle::freeze(impl_->model, req);
    FreezeResult out;
    out.name = r.name;
    out.target = r.triple;
    out.cpu = r.cpu;
    out.batch_sizes = r.batch_sizes;
    out.files = r.files;
    out.object_bytes = r.object_bytes;
    out.weights_bytes = r.weights_bytes;
    out.seconds = r.seconds;
    switch (r.cache) {
      case bundle::FreezeCache::Off: out.cache = CacheOutcome::Off; break;
      case bundle::FreezeCache::Hit: out.cache = CacheOutcome::Hit; break;
      case bundle::FreezeCache::Miss: out.cache = CacheOutcome::Miss; break;
      case bundle::FreezeCache::Rebuild: out.cache = CacheOutcome::Rebuild; break;
    }
    out.cache_key = r.cache_key;
    out.cache_note = r.cache_note;
    if (!req.store) {
      out.cache = impl_->no_store;
      if (out.cache_note.empty()) out.cache_note = impl_->no_store_note;
    }
    return out;
  });
}

namespace {

// Callers own what run returns: storage anything else still holds (an
// input, a weight, a constant of the specialization, another output) is copied.
Tensor to_public(ir::Tensor& o) {
  if (!o.owner() || o.owner().use_count() > 1) o = o.clone();
  return Tensor::view(DType(int32_t(o.dtype())), o.dims(), o.raw(), o.owner());
}

std::vector<Tensor> to_public(std::vector<ir::Tensor>& tensors) {
  std::vector<Tensor> out;
  for (auto& t : tensors) out.push_back(to_public(t));
  return out;
}

Value to_public(ir::Value& v) {
  switch (v.kind) {
    case ir::ValueKind::Tensor: return to_public(v.tensor);
    case ir::ValueKind::Sequence: return Value::sequence(to_public(v.sequence));
    case ir::ValueKind::Optional: break;
  }
  return v.element ? Value::optional(to_public(*v.element)) : Value::empty_optional(ValueKind(int32_t(v.element_kind)));
}

}  // namespace

std::vector<Value> Model::run_values(const std::vector<std::pair<std::string, Value>>& inputs) const {
  return translate_errors([&] {
    std::map<std::string, ir::Value> values = impl_->validate_values(inputs);
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& [name, v] : inputs)
      if (v.kind() == ValueKind::Tensor) tensors.emplace_back(name, v.tensor());
    auto ins = impl_->validate(tensors, values);
    auto executable = impl_->specialization_for(ins);
    values.insert(ins.begin(), ins.end());
    std::vector<ir::Value> outs = executable->run_values(values);
    std::vector<Value> result;
    for (auto& o : outs) result.push_back(to_public(o));
    return result;
  });
}

std::vector<Tensor> Model::run(const std::vector<std::pair<std::string, Tensor>>& inputs) const {
  return translate_errors([&] {
    if (!impl_->tensors_only_refusal.empty()) throw Error(ErrorCode::InvalidArgument, impl_->tensors_only_refusal);
    auto ins = impl_->validate(inputs);
    std::vector<ir::Tensor> outs = impl_->specialization_for(ins)->run(ins);
    return to_public(outs);
  });
}

void Model::run(const std::vector<std::pair<std::string, Tensor>>& inputs, std::vector<Tensor>& outputs) const {
  translate_errors([&] {
    if (!impl_->tensors_only_refusal.empty()) throw Error(ErrorCode::InvalidArgument, impl_->tensors_only_refusal);
    for (const auto& out : impl_->outputs)
      if (out.dtype == DType::String)
        throw Error(ErrorCode::InvalidArgument, model_label(impl_->model) + ": output '" + out.name +
                                                    "' is a string tensor, which run() returns but cannot write into a buffer");
    auto ins = impl_->validate(inputs);
    if (outputs.size() != impl_->outputs.size())
      throw Error(ErrorCode::InvalidArgument, model_label(impl_->model) + ": " + std::to_string(outputs.size()) +
                                                  " output buffers given, the model has " +
                                                  std::to_string(impl_->outputs.size()) + " outputs");
    std::vector<ir::Tensor> outs;
    for (size_t i = 0; i < outputs.size(); ++i) {
      Tensor& o = outputs[i];
      if (!o.defined())
        throw Error(ErrorCode::InvalidArgument, model_label(impl_->model) + ": output buffer " + std::to_string(i) + " ('" +
                                                    impl_->outputs[i].name + "') is empty");
      outs.push_back(ir::Tensor::view(ir::DType(int32_t(o.dtype())), ir::Dims(o.shape().begin(), o.shape().end()), o.data()));
    }
    impl_->specialization_for(ins)->run_into(ins, outs);
    return 0;
  });
}

}  // namespace kiln
