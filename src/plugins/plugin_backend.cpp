#include "plugins/plugin_backend.hpp"

#include <cstring>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

#include "backends/artifact_weights.hpp"
#include "plugins/graph_view.hpp"
#include "runtime/ir/serialize.hpp"

namespace kiln::plugins {

namespace {

using nlohmann::json;

// A call into the plugin: its log messages go to the Runtime's logger, and
// an exception that a C++ plugin lets out is a status, not an unwinding
// through foreign frames.
template <typename F>
kiln_backend_status call(const LogSink& log, F&& f) {
  LogScope scope(&log);
  try {
    return f();
  } catch (...) {
    return kiln_backend_status(-1);
  }
}

std::string failure(kiln_backend_status status, Message& message) {
  if (int(status) == -1) return "threw an exception across the C ABI";
  return message.str() + " (status " + std::to_string(int(status)) + ")";
}

// The host's threads as the ABI hands them to the plugin.
struct Threads {
  explicit Threads(backends::HostThreads* host) : host_(host) {
    c.struct_size = sizeof c;
    c.count = host ? host->count() : 1;
    c.context = this;
    c.parallel_for = [](void* context, int64_t n, kiln_backend_range_fn fn, void* arg) {
      auto* self = static_cast<Threads*>(context);
      if (!fn || n <= 0) return;
      if (!self->host_ || self->host_->count() < 2 || n < 2) return fn(arg, 0, n);
      self->host_->parallel_for(n, [&](int64_t begin, int64_t end) { fn(arg, begin, end); });
    };
  }
  kiln_backend_threads c{};

 private:
  backends::HostThreads* host_;
};

// "3 nodes: Conv, Relu, MaxPool", for messages.
std::string describe_nodes(const ir::Graph& graph) {
  std::string ops;
  for (size_t i = 0; i < graph.nodes.size() && i < 4; ++i) ops += (i ? ", " : "") + graph.nodes[i].op_type;
  if (graph.nodes.size() > 4) ops += ", ...";
  return std::to_string(graph.nodes.size()) + " node" + (graph.nodes.size() == 1 ? "" : "s") + ": " + ops;
}

// The values a part reads or makes, with their types from the specialization.
std::map<std::string, ir::ValueInfo> part_values(const ir::Graph& part, const std::map<std::string, ir::ValueInfo>& all) {
  std::map<std::string, ir::ValueInfo> values;
  auto add = [&](const std::string& name) {
    if (name.empty()) return;
    if (auto it = all.find(name); it != all.end()) {
      values.emplace(name, it->second);
    } else if (auto c = part.initializers.find(name); c != part.initializers.end()) {
      // A constant a graph pass made after the shapes were inferred.
      values.emplace(name, ir::ValueInfo{name, c->second.dtype(), ir::Shape::from_dims(c->second.dims())});
    }
  };
  for (const auto& in : part.inputs) add(in.name);
  for (const auto& out : part.outputs) add(out.name);
  for (const auto& node : part.nodes) {
    for (const auto& name : node.inputs) add(name);
    for (const auto& name : node.outputs) add(name);
  }
  return values;
}

using Compiled = std::shared_ptr<kiln_backend_compiled>;

constexpr std::string_view kMagic = "KILN-PLUGIN\n";
constexpr int kFormat = 1;

class PluginExecutable : public backends::Executable {
 public:
  struct Boundary {
    std::string name;
    ir::DType dtype;
    ir::Dims dims;
  };

  PluginExecutable(std::shared_ptr<const PluginLibrary> library, std::shared_ptr<backends::HostThreads> threads,
                   std::shared_ptr<const LogSink> log, Compiled compiled, std::shared_ptr<const ir::Graph> part,
                   std::map<std::string, ir::ValueInfo> values)
      : library_(std::move(library)),
        threads_(std::move(threads)),
        log_(std::move(log)),
        compiled_(std::move(compiled)),
        part_(std::move(part)),
        values_(std::move(values)) {
    auto boundary = [&](const std::string& name) {
      const ir::ValueInfo& v = values_.at(name);
      return Boundary{name, v.dtype, v.shape.concrete()};
    };
    for (const auto& in : part_->inputs) inputs_.push_back(boundary(in.name));
    for (const auto& out : part_->outputs) outputs_.push_back(boundary(out.name));
  }

  backends::ExecutableStats stats() const override {
    backends::ExecutableStats s;
    s.nodes = s.compiled_nodes = int64_t(part_->nodes.size());
    return s;
  }

  std::vector<ir::Tensor> run(const std::map<std::string, ir::Tensor>& inputs) const override {
    std::vector<ir::Tensor> given;
    std::vector<const void*> in_ptrs;
    for (const auto& b : inputs_) {
      auto it = inputs.find(b.name);
      ir::Tensor t;
      if (it != inputs.end())
        t = it->second;
      else if (const auto init = part_->initializers.find(b.name); init != part_->initializers.end())
        t = init->second;
      else
        ir::fail(ir::ErrorKind::InvalidArgument, "input '" + b.name + "' is missing");
      if (t.dtype() != b.dtype || t.dims() != b.dims)
        ir::fail(ir::ErrorKind::InvalidArgument,
                 "input '" + b.name + "' is " + ir::dtype_name(t.dtype()) + " " + ir::dims_to_string(t.dims()) + ", plugin '" +
                     library_->name + "' compiled it for " + ir::dtype_name(b.dtype) + " " + ir::dims_to_string(b.dims));
      // The ABI promises aligned buffers; a caller's own memory may not be.
      if (reinterpret_cast<uintptr_t>(t.raw()) % KILN_BACKEND_ALIGNMENT) t = t.clone();
      in_ptrs.push_back(t.raw());
      given.push_back(std::move(t));
    }
    std::vector<ir::Tensor> outputs;
    std::vector<void*> out_ptrs;
    for (const auto& b : outputs_) {
      outputs.emplace_back(b.dtype, b.dims);
      out_ptrs.push_back(outputs.back().raw());
    }
    auto go = [&] {
      Threads threads(threads_.get());
      Message message;
      const kiln_backend_status status = call(*log_, [&] {
        return library_->api->run(compiled_.get(), in_ptrs.data(), in_ptrs.size(), out_ptrs.data(), out_ptrs.size(), &threads.c,
                                  message.text);
      });
      if (status != KILN_BACKEND_OK)
        ir::fail(status == KILN_BACKEND_INVALID_ARGUMENT ? ir::ErrorKind::InvalidArgument : ir::ErrorKind::Internal,
                 "plugin '" + library_->name + "' failed to run its partition (" + describe_nodes(*part_) +
                     "): " + failure(status, message));
    };
    if (threads_)
      threads_->run_in_turn(go);
    else
      go();
    return outputs;
  }

  backends::Artifact save() const override {
    const void* bytes = nullptr;
    size_t size = 0;
    Message message;
    const kiln_backend_status status =
        call(*log_, [&] { return library_->api->serialize(compiled_.get(), &bytes, &size, message.text); });
    if (status != KILN_BACKEND_OK)
      ir::fail(ir::ErrorKind::Unsupported,
               "plugin '" + library_->name + "' cannot save its partition: " + failure(status, message));
    if (!bytes && size) ir::fail(ir::ErrorKind::Internal, "plugin '" + library_->name + "' serialized to a null pointer");
    backends::Artifact a;
    backends::WeightsWriter weights;
    const int64_t blob_at = weights.add(bytes, size);
    // The part's structure in the program, its constants beside the blob.
    ir::Graph shape = *part_;
    shape.initializers.clear();
    json initializers = json::object();
    for (const auto& [name, t] : part_->initializers) initializers[name] = backends::save_constant(t, weights);
    json values = json::array();
    for (const auto& [name, v] : values_) values.push_back({name, int(v.dtype), v.shape.concrete()});
    backends::put_weights(weights, a);
    const json doc = {{"format", kFormat},
                      {"plugin", library_->name},
                      {"graph", ir::graph_to_json(shape)},
                      {"initializers", initializers},
                      {"values", values},
                      {"blob", {blob_at, int64_t(size)}}};
    const std::vector<uint8_t> cbor = json::to_cbor(doc);
    a.program = std::string(kMagic) + std::string(cbor.begin(), cbor.end());
    a.summary = json({{"plugin", library_->name}, {"nodes", part_->nodes.size()}}).dump();
    // The blob stays valid while the compiled partition does: the artifact
    // must not outlive this executable (Executable::save's contract).
    return a;
  }

 private:
  std::shared_ptr<const PluginLibrary> library_;
  std::shared_ptr<backends::HostThreads> threads_;
  std::shared_ptr<const LogSink> log_;
  Compiled compiled_;
  std::shared_ptr<const ir::Graph> part_;
  std::map<std::string, ir::ValueInfo> values_;
  std::vector<Boundary> inputs_, outputs_;
};

class PluginBackend : public backends::Backend {
 public:
  PluginBackend(std::shared_ptr<const PluginLibrary> library, std::shared_ptr<backends::HostThreads> threads, LogSink log)
      : library_(std::move(library)),
        threads_(std::move(threads)),
        log_(std::make_shared<const LogSink>(std::move(log))),
        operators_(library_->operators.begin(), library_->operators.end()) {}

  std::string name() const override { return library_->name; }
  std::string version() const override { return "abi" + std::to_string(library_->abi_version); }
  bool supports(const ir::Node& node) const override {
    return operators_.count(node.domain.empty() ? node.op_type : node.domain + "." + node.op_type) > 0;
  }
  bool takes(const ir::Node&, const ir::Specialization&) const override { return false; }  // claim() decides
  bool may_decline() const override { return true; }
  std::unique_ptr<Backend> fallback() const override { return nullptr; }
  std::string identity(const backends::CompileOptions&) const override {
    return "plugin " + library_->name + " " + version() + " " + library_->identity;
  }
  // The plugin counts for the process: its compiles since this backend was made.
  int64_t codegen_runs() const override { return compile_count() - compiles_before_; }

  std::vector<int64_t> claim(const ir::Graph& graph, const ir::Specialization& spec) const override {
    std::vector<int64_t> groups(graph.nodes.size(), -1);
    // The view does not own the graph: it lives for this call only.
    const auto view =
        make_graph_view(std::shared_ptr<const ir::Graph>(std::shared_ptr<const ir::Graph>(), &graph), spec.result.values);
    struct Answer {
      std::vector<int64_t>* groups;
      const GraphView* view;
      int64_t next = 0;
      std::string problem;
    } answer{&groups, view.get(), 0, {}};
    kiln_backend_capability capability{};
    capability.struct_size = sizeof capability;
    capability.context = &answer;
    capability.add_partition = [](void* context, const int64_t* nodes, size_t count) {
      auto& a = *static_cast<Answer*>(context);
      if (!a.problem.empty()) return KILN_BACKEND_INVALID_ARGUMENT;
      if (!nodes && count) a.problem = "a partition of " + std::to_string(count) + " nodes with no node list";
      for (size_t i = 0; i < count && a.problem.empty(); ++i) {
        const int64_t n = nodes[i];
        if (n < 0 || uint64_t(n) >= a.groups->size())
          a.problem = "it named node " + std::to_string(n) + ", the graph has nodes 0 to " +
                      std::to_string(int64_t(a.groups->size()) - 1);
        else if ((*a.groups)[size_t(n)] >= 0)
          a.problem = "it claimed " + a.view->nodes[size_t(n)].node->describe() + " twice";
        else
          (*a.groups)[size_t(n)] = a.next;
      }
      ++a.next;
      return a.problem.empty() ? KILN_BACKEND_OK : KILN_BACKEND_INVALID_ARGUMENT;
    };
    Message message;
    const kiln_backend_status status =
        call(*log_, [&] { return library_->api->get_capability(view.get(), &capability, message.text); });
    std::string problem = answer.problem;
    if (problem.empty() && status != KILN_BACKEND_OK) problem = "get_capability failed: " + failure(status, message);
    if (!problem.empty()) {
      warn("answered which nodes it takes wrongly (" + problem + "); the built-in backends take them all");
      return std::vector<int64_t>(graph.nodes.size(), -1);
    }
    // A value whose shape depends on the data cannot be shown to a plugin.
    for (size_t i = 0; i < groups.size(); ++i) {
      const auto& n = view->nodes[i];
      for (const auto* list : {&n.inputs, &n.outputs})
        for (int64_t v : *list)
          if (v >= 0 && view->values[size_t(v)].rank < 0) groups[i] = -1;
    }
    return groups;
  }

  std::unique_ptr<backends::Executable> compile(std::shared_ptr<const ir::Graph> graph, const ir::Specialization& spec,
                                                const backends::CompileOptions&) const override {
    auto values = part_values(*graph, spec.result.values);
    for (const auto* list : {&graph->inputs, &graph->outputs})
      for (const auto& v : *list)
        if (!values.count(v.name) || !values.at(v.name).shape.is_concrete())
          decline(*graph, "the shape of '" + v.name + "' is not known before the run");
    const auto view = make_graph_view(graph, values);
    Threads threads(threads_.get());
    kiln_backend_compiled* compiled = nullptr;
    Message message;
    const kiln_backend_status status =
        call(*log_, [&] { return library_->api->compile(view.get(), &threads.c, &compiled, message.text); });
    if (status != KILN_BACKEND_OK) decline(*graph, failure(status, message));
    if (!compiled) decline(*graph, "its compile returned no compiled partition");
    return std::make_unique<PluginExecutable>(library_, threads_, log_, own(compiled), std::move(graph), std::move(values));
  }

  std::unique_ptr<backends::Executable> load(const backends::LoadedArtifact& artifact, std::shared_ptr<const ir::Graph>,
                                             const backends::CompileOptions&) const override {
    const std::string what = "plugin '" + library_->name + "' cached partition";
    if (artifact.program.substr(0, kMagic.size()) != kMagic)
      ir::fail(ir::ErrorKind::InvalidModel, what + ": not a plugin's entry");
    json doc;
    try {
      doc = json::from_cbor(artifact.program.substr(kMagic.size()));
    } catch (const json::exception& e) {
      ir::fail(ir::ErrorKind::InvalidModel, what + " is malformed: " + e.what());
    }
    if (ir::json_field<int>(doc, "format", what) != kFormat) ir::fail(ir::ErrorKind::InvalidModel, what + ": unknown format");
    if (ir::json_field<std::string>(doc, "plugin", what) != library_->name)
      ir::fail(ir::ErrorKind::InvalidModel, what + ": made by another plugin");
    const backends::WeightsReader weights(artifact.weights, artifact.weights_bytes);
    auto part = std::make_shared<ir::Graph>(ir::graph_from_json(ir::json_field<json>(doc, "graph", what)));
    const json initializers = ir::json_field<json>(doc, "initializers", what);
    if (!initializers.is_object()) ir::fail(ir::ErrorKind::InvalidModel, what + ": malformed constants");
    for (const auto& [name, c] : initializers.items())
      part->initializers[name] = backends::load_constant(c, weights, artifact.keep_alive, what + " constant '" + name + "'");
    std::map<std::string, ir::ValueInfo> values;
    const json listed = ir::json_field<json>(doc, "values", what);
    try {
      for (const json& v : listed) {
        ir::ValueInfo info;
        info.name = v.at(0).get<std::string>();
        info.dtype = ir::DType(v.at(1).get<int>());
        info.shape = ir::Shape::from_dims(v.at(2).get<ir::Dims>());
        values[info.name] = info;
      }
    } catch (const json::exception& e) {
      ir::fail(ir::ErrorKind::InvalidModel, what + ": malformed values (" + e.what() + ")");
    }
    for (const auto* list : {&part->inputs, &part->outputs})
      for (const auto& v : *list)
        if (!values.count(v.name)) ir::fail(ir::ErrorKind::InvalidModel, what + ": no type for '" + v.name + "'");
    const auto [blob_at, blob_bytes] = ir::json_field<std::pair<int64_t, int64_t>>(doc, "blob", what);
    const void* blob = weights.at(blob_at, blob_bytes, what + " blob");
    const auto view = make_graph_view(part, values);
    Threads threads(threads_.get());
    kiln_backend_compiled* compiled = nullptr;
    Message message;
    const kiln_backend_status status = call(*log_, [&] {
      return library_->api->deserialize(view.get(), blob, size_t(blob_bytes), &threads.c, &compiled, message.text);
    });
    if (status != KILN_BACKEND_OK || !compiled)
      ir::fail(ir::ErrorKind::InvalidModel, what + " was refused by the plugin: " +
                                                (status != KILN_BACKEND_OK ? failure(status, message) : "no compiled partition"));
    return std::make_unique<PluginExecutable>(library_, threads_, log_, own(compiled), std::move(part), std::move(values));
  }

 private:
  Compiled own(kiln_backend_compiled* compiled) const {
    auto library = library_;
    return Compiled(compiled, [library](kiln_backend_compiled* c) {
      try {
        library->api->release_compiled(c);
      } catch (...) {  // a plugin's exception must not leave a destructor
      }
    });
  }
  void warn(const std::string& text) const {
    if (*log_) (*log_)(KILN_BACKEND_LOG_WARNING, "plugin '" + library_->name + "' " + text);
  }
  [[noreturn]] void decline(const ir::Graph& part, const std::string& why) const {
    const std::string text = "could not compile a partition (" + describe_nodes(part) + "): " + why;
    warn(text + "; the built-in backends take it");
    ir::fail(ir::ErrorKind::Unsupported, "plugin '" + library_->name + "' " + text);
  }

  int64_t compile_count() const {
    int64_t n = 0;
    call(*log_, [&] {
      n = library_->api->compile_count();
      return KILN_BACKEND_OK;
    });
    return n;
  }

  std::shared_ptr<const PluginLibrary> library_;
  std::shared_ptr<backends::HostThreads> threads_;
  std::shared_ptr<const LogSink> log_;  // shared with its executables
  std::set<std::string> operators_;
  int64_t compiles_before_ = compile_count();
};

}  // namespace

std::unique_ptr<backends::Backend> make_plugin_backend(std::shared_ptr<const PluginLibrary> library,
                                                       std::shared_ptr<backends::HostThreads> threads, LogSink log) {
  return std::make_unique<PluginBackend>(std::move(library), std::move(threads), std::move(log));
}

}  // namespace kiln::plugins
