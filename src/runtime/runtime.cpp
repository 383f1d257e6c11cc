// The public C++ API: Runtime, Model, Tensor. Translates between the public
// types and the IR, validates what callers pass, and turns internal errors
// into kiln::Error.
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "backends/pipeline.hpp"
#include "backends/reference/reference_executor.hpp"
#include "cache/authenticator.hpp"
#include "cache/freeze.hpp"
#include "plugins/plugin_backend.hpp"
#include "plugins/plugin_set.hpp"
#include "runtime/ir/shape_inference.hpp"
#include "runtime/onnx/onnx_importer.hpp"
#include "runtime/passes/passes.hpp"
#include "runtime/runtime_impl.hpp"

namespace kiln {

namespace {

ErrorCode to_code(ir::ErrorKind k) {
  switch (k) {
    case ir::ErrorKind::InvalidModel: return ErrorCode::InvalidModel;
    case ir::ErrorKind::Unsupported: return ErrorCode::Unsupported;
    case ir::ErrorKind::InvalidArgument: return ErrorCode::InvalidArgument;
    case ir::ErrorKind::Io: return ErrorCode::Io;
    case ir::ErrorKind::Internal: return ErrorCode::Internal;
  }
  return ErrorCode::Internal;
}

// Runs f, turning every internal failure into kiln::Error.
template <typename F>
decltype(auto) translate_errors(F&& f) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const ir::Error& e) {
    throw Error(to_code(e.kind()), e.what());
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::Internal, "out of memory");
  } catch (const std::exception& e) {
    throw Error(ErrorCode::Internal, e.what());
  }
}

// The public enum mirrors the IR's (both are ONNX's codes): conversions are casts.
static_assert(int(DType::Float32) == int(ir::DType::Float32) && int(DType::Int64) == int(ir::DType::Int64) &&
              int(DType::Bool) == int(ir::DType::Bool) && int(DType::Float16) == int(ir::DType::Float16) &&
              int(DType::BFloat16) == int(ir::DType::BFloat16) && int(DType::UInt64) == int(ir::DType::UInt64));

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

TensorInfo to_info(const ir::ValueInfo& v, bool has_default) {
  TensorInfo info;
  info.name = v.name;
  info.dtype = ir::dtype_supported(v.dtype) ? DType(int32_t(v.dtype)) : DType::Float32;
  info.rank_known = v.shape.rank_known;
  info.has_default = has_default;
  for (const auto& d : v.shape.dims) info.shape.push_back(Dim{d.value.value_or(-1), d.symbol});
  return info;
}

// A shape the caller gives: the IR calls a bad one an invalid model, but
// here it is the caller's argument.
void check_shape(const char* where, const Shape& shape) {
  try {
    ir::checked_numel(shape);
  } catch (const ir::Error& e) {
    throw Error(ErrorCode::InvalidArgument, std::string(where) + ": " + e.what());
  }
}

}  // namespace

const char* dtype_name(DType t) { return ir::dtype_name(ir::DType(int32_t(t))); }
size_t dtype_size(DType t) { return ir::dtype_size(ir::DType(int32_t(t))); }

std::string shape_to_string(const Shape& s) { return ir::dims_to_string(s); }

// ---- Tensor ---------------------------------------------------------------

Tensor::Tensor(DType dtype, Shape shape) {
  check_shape("Tensor", shape);
  ir::Tensor t = translate_errors([&] { return ir::Tensor(ir::DType(int32_t(dtype)), shape); });
  dtype_ = dtype;
  shape_ = std::move(shape);
  owner_ = t.owner();
  data_ = t.raw();
}

Tensor Tensor::view(DType dtype, Shape shape, void* data) { return view(dtype, std::move(shape), data, nullptr); }

Tensor Tensor::view(DType dtype, Shape shape, void* data, std::shared_ptr<void> owner) {
  if (!data) throw Error(ErrorCode::InvalidArgument, "Tensor::view: data pointer is null");
  if (dtype_size(dtype) == 0) throw Error(ErrorCode::InvalidArgument, "Tensor::view: unknown dtype " + std::to_string(int(dtype)));
  check_shape("Tensor::view", shape);
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.owner_ = std::move(owner);
  t.data_ = data;
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

void Tensor::check_size(size_t element_size) const {
  if (element_size != dtype_size(dtype_))
    throw Error(ErrorCode::InvalidArgument, std::string("tensor of ") + dtype_name(dtype_) + " accessed with a " +
                                                std::to_string(element_size) + "-byte element type");
}

std::string TensorInfo::shape_string() const {
  if (!rank_known) return "[unknown rank]";
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += shape[i].is_fixed() ? std::to_string(shape[i].value) : shape[i].symbol.empty() ? "?" : shape[i].symbol;
  }
  return s + "]";
}

// ---- Runtime --------------------------------------------------------------

const char* cache_outcome_name(CacheOutcome o) {
  switch (o) {
    case CacheOutcome::Off: return "off";
    case CacheOutcome::Hit: return "hit";
    case CacheOutcome::Miss: return "miss";
    case CacheOutcome::Rebuild: return "rebuild";
    case CacheOutcome::NotCached: return "not cached";
  }
  return "?";
}

namespace {

bool env_says_off(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return false;
  const std::string s(v);
  return s == "off" || s == "0" || s == "false" || s == "no";
}

int64_t cache_max_bytes(const RuntimeOptions& options, const Runtime& runtime) {
  if (options.cache_max_bytes < 0)
    throw Error(ErrorCode::InvalidArgument, "RuntimeOptions::cache_max_bytes must be 0 (default) or positive, got " +
                                                std::to_string(options.cache_max_bytes));
  if (options.cache_max_bytes > 0) return options.cache_max_bytes;
  if (const char* v = std::getenv("KILN_CACHE_MAX_BYTES"); v && *v) {
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    if (end && *end == '\0' && n > 0) return n;
    runtime.log(LogLevel::Warning, std::string("KILN_CACHE_MAX_BYTES='") + v + "' is not a positive number of bytes; using 1 GiB");
  }
  return cache::kDefaultMaxBytes;
}

}  // namespace

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_shared<Impl>()) {
  if (options.threads < 0)
    throw Error(ErrorCode::InvalidArgument, "RuntimeOptions::threads must be 0 (all cores) or positive, got " +
                                                std::to_string(options.threads));
  impl_->threads = options.threads > 0 ? options.threads : usable_cores();
  impl_->options.log_level = options.log_level;  // for the plugins' warnings, before the rest is set
  impl_->options.logger = options.logger;
  try {
    // What a plugin says while it is loaded reaches the Runtime that loads it.
    const plugins::LogSink loading = [&](int level, const std::string& text) { log(LogLevel(std::clamp(level, 0, 3)), text); };
    const plugins::LogScope scope(&loading);
    const char* env = std::getenv("KILN_PLUGIN_PATH");
    impl_->plugin_libraries = plugins::find_plugins(options.plugins, env ? env : "",
                                                    [&](const std::string& w) { log(LogLevel::Warning, w); });
  } catch (const ir::Error& e) {
    throw Error(ErrorCode::InvalidArgument, e.what());
  }
  impl_->backend = backends::make_backend(options.backend, impl_->threads);
  if (!impl_->backend) {
    auto forced = std::find_if(impl_->plugin_libraries.begin(), impl_->plugin_libraries.end(),
                               [&](const auto& lib) { return lib->name == options.backend; });
    if (forced == impl_->plugin_libraries.end()) {
      std::string names;
      for (const auto& n : backends::backend_names()) names += (names.empty() ? "'" : ", '") + n + "'";
      for (const auto& lib : impl_->plugin_libraries) names += ", '" + lib->name + "' (plugin)";
      throw Error(ErrorCode::InvalidArgument, "RuntimeOptions::backend '" + options.backend + "' is unknown; available: " + names);
    }
    impl_->plugin_libraries = {*forced};
    impl_->backend = backends::make_backend("reference", impl_->threads);
  }
  for (const auto& name : options.excluded_plugins) {
    auto& libs = impl_->plugin_libraries;
    libs.erase(std::remove_if(libs.begin(), libs.end(), [&](const auto& lib) { return lib->name == name; }), libs.end());
  }
  impl_->fallback = impl_->backend->fallback();
  // The plugins' messages reach this Runtime's logger while it lives.
  std::weak_ptr<Impl> weak = impl_;
  plugins::LogSink sink = [weak](int level, const std::string& text) {
    if (auto impl = weak.lock()) impl->log(LogLevel(std::clamp(level, 0, 3)), text);
  };
  for (const auto& lib : impl_->plugin_libraries) {
    impl_->plugins.push_back(plugins::make_plugin_backend(lib, impl_->backend->host_threads(), sink));
    impl_->order.push_back(impl_->plugins.back().get());
  }
  impl_->order.push_back(impl_->backend.get());
  if (impl_->fallback) impl_->order.push_back(impl_->fallback.get());
  if (options.kernels.empty())
    if (const char* env = std::getenv("KILN_KERNELS"); env && *env) options.kernels = env;
  if (options.kernels.empty()) options.kernels = "native";
  if (options.kernels != "native" && options.kernels != "portable")
    throw Error(ErrorCode::InvalidArgument, "RuntimeOptions::kernels (or KILN_KERNELS) is '" + options.kernels +
                                                "'; expected 'native' or 'portable'");
  impl_->options = std::move(options);
  const RuntimeOptions& o = impl_->options;
  if (o.cache && !env_says_off("KILN_CACHE")) {
    std::string dir = o.cache_dir;
    if (dir.empty())
      if (const char* env = std::getenv("KILN_CACHE_DIR"); env && *env) dir = env;
    if (dir.empty()) dir = cache::default_dir();
    const int64_t max_bytes = cache_max_bytes(o, *this);
    std::string key_file = o.cache_key_file;
    if (key_file.empty())
      if (const char* env = std::getenv("KILN_CACHE_KEY_FILE"); env && *env) key_file = env;
    std::string& refused = impl_->cache_refused;
    std::string key;
    if (dir.empty()) refused = "no cache directory (HOME is not set)";
    else if (cache::build_id().empty()) refused = "this Kiln build has no identity (no build-id)";
    else if (!key_file.empty()) {
      try {
        key = cache::read_key_file(key_file);
      } catch (const ir::Error& e) {
        refused = e.what();
      }
    }
    if (refused.empty()) {
      auto store = std::make_shared<cache::Store>(dir, max_bytes, key);
      refused = store->check();
      if (refused.empty()) impl_->store = std::move(store);
      else refused = "cache directory not used: " + refused;
    }
    if (!refused.empty()) log(LogLevel::Warning, refused + "; compiling in memory only");
  }
}

std::string Runtime::cache_dir() const { return impl_->store ? impl_->store->dir() : std::string(); }
int64_t Runtime::codegen_runs() const {
  int64_t runs = 0;
  for (const auto* backend : impl_->order) runs += backend->codegen_runs();
  return runs;
}

std::vector<PluginInfo> Runtime::plugins() const {
  std::vector<PluginInfo> infos;
  for (const auto& lib : impl_->plugin_libraries) {
    infos.push_back({lib->name, lib->path, lib->identity, int(lib->abi_version), lib->priority, lib->operators});
  }
  return infos;
}

const RuntimeOptions& Runtime::options() const { return impl_->options; }
int Runtime::threads() const { return impl_->threads; }

void Runtime::log(LogLevel level, const std::string& message) const { impl_->log(level, message); }

void Runtime::wait_for_cache() const { impl_->wait_for_stores(); }

// ---- Model ----------------------------------------------------------------

struct __attribute__((visibility("hidden"))) Model::Impl {  // hidden: see Runtime::Impl
  Runtime runtime;
  ir::Model model;
  // The runtime's cache, unless this model is kept out of it; then what its
  // specializations say of the cache, and why.
  std::shared_ptr<const cache::Store> store;
  CacheOutcome no_store = CacheOutcome::Off;
  std::string no_store_note;
  std::vector<TensorInfo> inputs;
  std::vector<TensorInfo> outputs;

  // One entry per specialization key; `once` makes concurrent first runs
  // compile it a single time while other keys compile in parallel.
  struct Specialized {
    std::once_flag once;
    std::shared_ptr<const backends::Executable> executable;
    SpecializationStats stats;
    std::atomic<bool> ready{false};  // set once executable and stats are written
    std::atomic<int64_t> runs{0};
    // The cache's outcome can change once more after `ready`: the writer
    // thread finds that nothing could be stored.
    mutable std::mutex settle_mutex;
    void settle(CacheOutcome outcome, const std::string& note) {
      std::lock_guard<std::mutex> lock(settle_mutex);
      stats.cache = outcome;
      stats.cache_note = note;
    }
    SpecializationStats snapshot() const {
      std::lock_guard<std::mutex> lock(settle_mutex);
      SpecializationStats s = stats;
      s.runs = runs.load();
      return s;
    }
  };
  mutable std::mutex table_mutex;
  mutable std::map<std::string, std::shared_ptr<Specialized>> table;
  mutable std::vector<std::string> table_order;

  std::shared_ptr<const backends::Executable> specialization_for(const std::map<std::string, ir::Tensor>& inputs,
                                                                 bool count_run = true);

  // Hands a freshly compiled specialization to the writer thread, which
  // makes its artifact and writes the files; whether it could be stored is
  // known after Runtime::wait_for_cache(). A directory that cannot be
  // created is found here already. A cache that cannot be written is
  // reported once and then left alone; run() never fails because of it.
  void store_entry(const cache::Store& store, const cache::Key& key, const std::shared_ptr<Specialized>& entry) const {
    const Runtime::Impl& rt = *runtime.impl_;
    SpecializationStats& stats = entry->stats;
    try {
      if (!rt.store_writable.load()) ir::fail(ir::ErrorKind::Io, "cache directory '" + store.dir() + "' is not writable");
      store.create();
      rt.enqueue_store({key, entry->executable, stats.compile_ms,
                        [entry](CacheOutcome outcome, const std::string& note) { entry->settle(outcome, note); }});
    } catch (const ir::Error& e) {
      if (rt.store_writable.exchange(false)) runtime.log(LogLevel::Warning, std::string(e.what()) + "; compiling in memory only from now on");
      stats.cache = CacheOutcome::Off;
      stats.cache_note = e.what();
    }
  }

  // Model::load leaves the weights in the mapped file, where a warm start
  // never reads them; whatever reads them (compiling, shape inference,
  // defaults of inputs) copies them out first, once.
  std::once_flag weights_once;
  void own_weights() {
    std::call_once(weights_once, [&] { onnx_import::own_weights(model); });
  }

  // `not_cached`: why this model must stay out of the cache ("" if it need not).
  Impl(const Runtime& rt, ir::Model m, const std::string& not_cached = "") : runtime(rt), model(std::move(m)) {
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
    auto unsupported = ref::unsupported_ops(g);
    if (!unsupported.empty()) {
      std::string list;
      for (const auto& op : unsupported) list += (list.empty() ? "" : ", ") + op;
      runtime.log(LogLevel::Warning, model.source_path + ": operators without a kernel: " + list + "; run() will fail");
    }
  }

  // Tensors of these shapes that point at no data: validation and the key
  // look at dtypes and shapes only, and nothing runs on them.
  std::vector<std::pair<std::string, Tensor>> placeholders(const std::vector<std::pair<std::string, Shape>>& shapes) const {
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

  std::map<std::string, ir::Tensor> validate(const std::vector<std::pair<std::string, Tensor>>& given) const {
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
      if (out.count(name)) throw Error(ErrorCode::InvalidArgument, where + ": input '" + name + "' is given twice");
      if (!t.defined()) throw Error(ErrorCode::InvalidArgument, where + ": input '" + name + "' is an empty Tensor (no data)");
      if (t.dtype() != info->dtype)
        throw Error(ErrorCode::InvalidArgument, where + ": input '" + name + "' must be " + dtype_name(info->dtype) +
                                                    ", got " + dtype_name(t.dtype()));
      if (info->rank_known) {
        auto mismatch = [&](const std::string& why) {
          throw Error(ErrorCode::InvalidArgument, where + ": input '" + name + "' must have shape " +
                                                      info->shape_string() + ", got " + shape_to_string(t.shape()) +
                                                      " (" + why + ")");
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
              mismatch("dimension " + std::to_string(d) + " is '" + want.symbol + "', which input '" +
                       it->second.second + "' set to " + std::to_string(it->second.first));
          }
        }
      }
      out[name] = ir::Tensor::view(ir::DType(int32_t(t.dtype())), t.shape(), const_cast<void*>(t.data()), t.owner());
    }
    for (const auto& i : inputs)
      if (!i.has_default && !out.count(i.name))
        throw Error(ErrorCode::InvalidArgument, where + ": input '" + i.name + "' (" + dtype_name(i.dtype) + " " +
                                                    i.shape_string() + ") is required but was not given");
    return out;
  }
};

namespace {

// How a model is read: its files' hashes remembered in the cache, if it has one.
onnx_import::ImportOptions import_options(const Runtime& runtime, const cache::Store* store) {
  onnx_import::ImportOptions opts;
  opts.hash_threads = runtime.threads();
  if (store) {
    opts.recall_file_hash = [store](const struct stat& st) { return store->recall_model_hash(st); };
    opts.remember_file_hash = [store](const std::string& file, const struct stat& st, const timespec& looked_at, const std::string& hex) {
      store->remember_model_hash(st, looked_at, hex, file);
    };
  }
  return opts;
}

}  // namespace

Model Model::load(const Runtime& runtime, const std::string& path) {
  Model m;
  m.impl_ = translate_errors([&] {
    onnx_import::ImportOptions opts = import_options(runtime, runtime.impl_->store.get());
    opts.keep_weights_in_file = true;
    return std::make_shared<Impl>(runtime, onnx_import::import_model_file(path, opts));
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
  ir::visit_nodes(*impl_->model.graph, [&](const ir::Node& n) { h[n.domain.empty() ? n.op_type : n.domain + "." + n.op_type]++; });
  return h;
}

std::vector<std::string> Model::unsupported_ops() const { return ref::unsupported_ops(*impl_->model.graph); }

namespace {

std::string model_label(const ir::Model& m) { return "model '" + m.source_path + "'"; }

std::string specialization_key(const std::map<std::string, ir::Tensor>& inputs) {
  std::string key;
  for (const auto& [name, t] : inputs)
    key += (key.empty() ? "" : ",") + name + ":" + ir::dtype_name(t.dtype()) + ":" + ir::dims_to_string(t.dims());
  return key;
}

}  // namespace

std::vector<SpecializationStats> Model::specializations() const {
  std::lock_guard<std::mutex> lock(impl_->table_mutex);
  std::vector<SpecializationStats> out;
  for (const auto& key : impl_->table_order) {
    const auto& entry = impl_->table.at(key);
    if (entry->ready.load(std::memory_order_acquire)) out.push_back(entry->snapshot());
  }
  return out;
}

// The specialization for these (validated) inputs, compiled on first use.
std::shared_ptr<const backends::Executable> Model::Impl::specialization_for(const std::map<std::string, ir::Tensor>& ins,
                                                                            bool count_run) {
  const std::string key = specialization_key(ins);
  std::shared_ptr<Impl::Specialized> entry;
  {
    std::lock_guard<std::mutex> lock(table_mutex);
    auto& slot = table[key];
    if (!slot) {
      slot = std::make_shared<Impl::Specialized>();
      table_order.push_back(key);
    }
    entry = slot;
  }
  // A compile that throws leaves the flag unset: the next run tries again.
  const Runtime::Impl::HoldMessages hold_messages;
  std::call_once(entry->once, [&] {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<const backends::Backend*>& order = runtime.impl_->order;
    backends::CompileOptions options;
    options.threads = runtime.threads();
    options.kernels = runtime.options().kernels;
    SpecializationStats& stats = entry->stats;
    backends::PartitionedCompile made;  // loaded or compiled
    const cache::Store* store = this->store.get();
    if (!store) {
      stats.cache = no_store;
      stats.cache_note = no_store_note;
    }
    cache::Key cache_key;
    if (store) {
      cache_key = cache::make_key({model.content_hash, model.source_path, key, backends::partitioned_identity(order, options)});
      stats.cache_key = cache_key.hex;
      std::string problem;
      // With a second thread in the budget, the backend computes the
      // weights' checksum on its threads while it loads the rest.
      if (auto artifact = store->open(cache_key.hex, problem, runtime.threads() > 1)) {
        try {
          made = backends::load_partitioned(*artifact, model.graph, order, options);
        } catch (const ir::Error& e) {
          problem = e.what();
        }
        if (artifact->check) {
          if (const std::string& bad = artifact->check->run(); !bad.empty()) {
            made.executable.reset();
            problem = bad;
          }
        }
        if (made.executable) stats.cache = CacheOutcome::Hit;
      }
      if (!made.executable) {
        stats.cache = problem.empty() ? CacheOutcome::Miss : CacheOutcome::Rebuild;
        stats.cache_note = problem;
        if (!problem.empty())
          runtime.log(LogLevel::Warning, model_label(model) + ": cache entry " + cache_key.hex + " for " + key +
                                             " is unusable (" + problem + "); compiling it again");
      }
    }
    if (!made.executable) {
      own_weights();
      made = backends::compile_for_shapes(*model.graph, backends::shapes_of(ins), order, options);
    }
    entry->executable = std::move(made.executable);
    stats.backend = made.backends;
    stats.parts = made.parts;
    const backends::ExecutableStats built = entry->executable->stats();
    stats.nodes = built.nodes;
    stats.compiled_nodes = built.compiled_nodes;
    stats.fallback_nodes = built.fallback_nodes;
    stats.arena_bytes = built.arena_bytes;
    stats.intermediate_bytes = built.intermediate_bytes;
    stats.key = key;
    stats.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    runtime.log(LogLevel::Debug, model_label(model) + ": " + (stats.cache == CacheOutcome::Hit ? "loaded " : "compiled ") + key +
                                     " with " + stats.backend + " in " + std::to_string(stats.compile_ms) + " ms (cache: " +
                                     cache_outcome_name(stats.cache) + ")");
    if (store && stats.cache != CacheOutcome::Hit) {
      const auto store_start = std::chrono::steady_clock::now();
      store_entry(*store, cache_key, entry);
      stats.store_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - store_start).count();
    }
    entry->ready.store(true, std::memory_order_release);
  });
  if (count_run) entry->runs++;
  return entry->executable;
}

std::vector<NodePlacement> Model::placement(const std::vector<std::pair<std::string, Shape>>& shapes) const {
  return translate_errors([&] {
    const auto given = backends::shapes_of(impl_->validate(impl_->placeholders(shapes)));
    auto [graph, spec] = backends::specialize_and_optimize(*impl_->model.graph, given);
    std::vector<NodePlacement> placed;
    for (const auto& part : backends::partition(*graph, spec, impl_->runtime.impl_->order))
      for (const auto& node : part.graph->nodes)
        placed.push_back({node.name, node.domain.empty() ? node.op_type : node.domain + "." + node.op_type, part.backend->name()});
    return placed;
  });
}

SpecializationStats Model::prepare(const std::vector<std::pair<std::string, Shape>>& shapes) const {
  return translate_errors([&] {
    auto ins = impl_->validate(impl_->placeholders(shapes));
    auto executable = impl_->specialization_for(ins, false);
    const std::string key = specialization_key(ins);
    std::lock_guard<std::mutex> lock(impl_->table_mutex);
    return impl_->table.at(key)->snapshot();
  });
}

Model::FreezeResult Model::freeze(const FreezeOptions& options) const {
  return translate_errors([&] {
    if (options.kernels != "portable" && options.kernels != "native")
      ir::fail(ir::ErrorKind::InvalidArgument, "kernels '" + options.kernels + "': expected 'portable' or 'native'");
    if (options.format != "object" && options.format != "static")
      ir::fail(ir::ErrorKind::InvalidArgument, "format '" + options.format + "': expected 'object' or 'static'");
    if (options.output_dir.empty()) ir::fail(ir::ErrorKind::InvalidArgument, "no output directory");
    cache::FreezeRequest req;
    req.output_dir = options.output_dir;
    req.name = options.name;
    for (const auto& [name, shape] : options.shapes) req.shapes[name] = shape;
    req.dims = options.dims;
    req.batch_sizes = options.batch_sizes;
    req.target = {options.target, options.cpu, ""};
    req.embed_weights = options.embed_weights;
    req.static_library = options.format == "static";
    req.native_kernels = options.kernels == "native";
    req.progress = options.progress;
    const Runtime::Impl& rt = *impl_->runtime.impl_;
    if (impl_->store && rt.store_writable.load()) req.store = impl_->store.get();
    req.warn = [&](const std::string& message) { impl_->runtime.log(LogLevel::Warning, model_label(impl_->model) + ": " + message); };
    impl_->own_weights();
    const cache::FreezeResult r = cache::freeze(impl_->model, req);
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
      case cache::FreezeCache::Off: out.cache = CacheOutcome::Off; break;
      case cache::FreezeCache::Hit: out.cache = CacheOutcome::Hit; break;
      case cache::FreezeCache::Miss: out.cache = CacheOutcome::Miss; break;
      case cache::FreezeCache::Rebuild: out.cache = CacheOutcome::Rebuild; break;
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

std::vector<Tensor> Model::run(const std::vector<std::pair<std::string, Tensor>>& inputs) const {
  return translate_errors([&] {
    auto ins = impl_->validate(inputs);
    std::vector<ir::Tensor> outs = impl_->specialization_for(ins)->run(ins);
    std::vector<Tensor> result;
    for (size_t i = 0; i < outs.size(); ++i) {
      ir::Tensor& o = outs[i];
      // Callers own what run returns: storage anything else still holds (an
      // input, a weight, a constant of the specialization, another output) is copied.
      if (!o.owner() || o.owner().use_count() > 1) o = o.clone();
      result.push_back(Tensor::view(DType(int32_t(o.dtype())), o.dims(), o.raw(), o.owner()));
    }
    return result;
  });
}

void Model::run(const std::vector<std::pair<std::string, Tensor>>& inputs, std::vector<Tensor>& outputs) const {
  translate_errors([&] {
    auto ins = impl_->validate(inputs);
    if (outputs.size() != impl_->outputs.size())
      throw Error(ErrorCode::InvalidArgument, model_label(impl_->model) + ": " + std::to_string(outputs.size()) +
                                                  " output buffers given, the model has " + std::to_string(impl_->outputs.size()) + " outputs");
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
