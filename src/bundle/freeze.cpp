#include "bundle/freeze.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "backends/artifact_weights.hpp"
#include "backends/cpu/host_kernels.hpp"
#include "backends/cpu/lower/op_table.hpp"
#include "backends/cpu/lowering.hpp"
#include "backends/cpu/onednn_kernel.hpp"
#include "backends/pipeline.hpp"
#include "backends/program_blocks.hpp"
#include "backends/reference/reference_executor.hpp"
#include "bundle/bundle_codegen.hpp"
#include "bundle/bundle_header.hpp"
#include "bundle/runtime/bundle_abi.h"
#include "cache/cache_key.hpp"
#include "cache/store.hpp"
#include "runtime/ir/error.hpp"
#include "runtime/ir/shape_inference.hpp"

namespace kiln::bundle {

namespace fs = std::filesystem;

namespace {

bool is_c_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

std::string identifier_from(const std::string& path) {
  std::string stem = fs::path(path).stem().string(), out;
  for (char c : stem) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "model_" + out;
  return out;
}

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  out.close();
  if (!out) ir::fail(ir::ErrorKind::Io, "cannot write '" + path.string() + "'");
}

// A specialization of the model for one batch size.
struct Frozen {
  int64_t batch = 0;
  std::shared_ptr<ir::Graph> graph;
  ir::Specialization spec;
  cpu::Program program;
};

class Freezer {
 public:
  Freezer(const ir::Model& model, const FreezeRequest& request) : model_(model), req_(request) {}

  FreezeResult run() {
    const auto start = std::chrono::steady_clock::now();
    FreezeResult r;
    r.name = req_.name.empty() ? identifier_from(model_.source_path) : req_.name;
    if (!is_c_identifier(r.name))
      ir::fail(ir::ErrorKind::InvalidArgument, "bundle name '" + r.name + "' is not a C identifier (letters, digits, '_')");
    choose_inputs();
    r.batch_sizes = batch_sizes();
    make_compilers();
    for (size_t i = 0; i < r.batch_sizes.size(); ++i) {
      progress("specializing and lowering batch " + std::to_string(r.batch_sizes[i]) + " (" + std::to_string(i + 1) + "/" +
               std::to_string(r.batch_sizes.size()) + ")");
      frozen_.push_back(specialize(r.batch_sizes[i]));
    }

    r.triple = compilers_[0]->target().triple;
    for (const auto& c : compilers_) r.cpu += (r.cpu.empty() ? "" : ",") + cpu_name(*c);

    BundlePlan plan = make_plan(r.name);
    const std::string object = compiled_object(plan, r);

    const fs::path dir(req_.output_dir);
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) ir::fail(ir::ErrorKind::Io, "cannot create '" + dir.string() + "': " + ec.message());
    const std::string object_file = req_.static_library ? "lib" + r.name + ".a" : r.name + ".o";
    const std::string bytes = req_.static_library ? static_archive(object, r.name + ".o") : object;
    write_file(dir / object_file, bytes);
    r.files.push_back((dir / object_file).string());
    r.object_bytes = int64_t(bytes.size());
    r.weights_bytes = int64_t(weights_.size());
    if (!req_.embed_weights) {
      write_file(dir / (r.name + ".weights.bin"), weights_file());
      r.files.push_back((dir / (r.name + ".weights.bin")).string());
    }

    BundleDescription d;
    d.name = r.name;
    d.model = model_.source_path;
    d.model_hash = model_.content_hash;
    d.triple = r.triple;
    for (const auto& c : compilers_) d.variants.push_back({cpu_name(*c), bundle_cpu_features(*c)});
    d.object_file = object_file;
    d.embedded_weights = req_.embed_weights;
    if (req_.native_kernels) d.native = onednn_version();
    d.weights_bytes = r.weights_bytes;
    d.batch_sizes = r.batch_sizes;
    d.inputs = describe(plan.inputs, true);
    d.outputs = describe(plan.outputs, false);
    for (const Frozen& f : frozen_) d.arena_bytes.push_back(f.program.arena_bytes);
    write_file(dir / (r.name + ".h"), bundle_header(d));
    write_file(dir / "README.md", bundle_readme(d));
    r.files.push_back((dir / (r.name + ".h")).string());
    r.files.push_back((dir / "README.md").string());
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
  }

 private:
  void progress(const std::string& line) const {
    if (req_.progress) req_.progress(line);
  }

  // The bundle's object, from the cache or compiled (and then stored). The
  // whole bundle is one cache entry: its specializations are compiled as one
  // module together with the kernel library, which is most of the time
  // (about 2.5 s of 2.8 for resnet50, whatever the number of batch sizes),
  // so an entry per specialization would save nothing when one is missing.
  std::string compiled_object(const BundlePlan& plan, FreezeResult& r) const {
    std::string shapes;
    for (const Frozen& f : frozen_)
      for (const auto& [name, shape] : input_shapes(f.batch))
        shapes += (shapes.empty() ? "" : ",") + name + ":" + ir::dtype_name(shape.first) + ":" + ir::dims_to_string(shape.second);
    // An output's batch axis changes only how run() splits it.
    for (const auto& [name, axis] : req_.batch_axes) shapes += ",batch axis " + name + "=" + std::to_string(axis);
    // A constant may change the code and not the weights (a branch on it).
    for (const auto& [name, t] : req_.constants)
      shapes += "," + name + "=" + ir::dtype_name(t.dtype()) + ":" + ir::dims_to_string(t.dims()) + ":" +
                std::to_string(XXH3_64bits(t.raw(), t.nbytes()));
    // The weights' checksum stands for the specialized programs: the object
    // embeds their offsets and checksum.
    const std::string kernels = req_.native_kernels ? "native onednn " + onednn_version(true) : "portable";
    std::string cpus;
    for (const auto& c : compilers_) cpus += ", cpu " + cpu_name(*c) + " features " + c->target().features;
    const std::string identity = "bundle abi " + std::to_string(KILN_BUNDLE_ABI_VERSION) + ", kernels " + kernels + ", name " +
                                 plan.name + ", target " + r.triple + cpus + ", weights " +
                                 (req_.embed_weights ? "embedded" : "file") + " xxh3-64 " +
                                 std::to_string(plan.weights_checksum) + " " + std::to_string(plan.weights_bytes);
    const cache::Key key = cache::make_key({model_.content_hash, model_.source_path, shapes, identity});
    if (req_.store) {
      r.cache_key = key.hex;
      std::string problem;
      if (auto hit = req_.store->open(key.hex, problem)) {
        r.cache = FreezeCache::Hit;
        progress("reusing the compiled bundle from the cache (entry " + key.hex + ")");
        return std::string(hit->object);
      }
      r.cache = problem.empty() ? FreezeCache::Miss : FreezeCache::Rebuild;
      r.cache_note = problem;
      if (!problem.empty() && req_.warn)
        req_.warn("cache entry " + key.hex + " for bundle " + plan.name + " is unusable (" + problem + "); compiling it again");
    }
    progress("compiling " + std::to_string(frozen_.size()) + " specialization(s) for " + r.triple + " (" + r.cpu + ")");
    const auto start = std::chrono::steady_clock::now();
    std::vector<const cpu::TargetCompiler*> compilers;
    for (const auto& c : compilers_) compilers.push_back(c.get());
    std::string object = compile_bundle(plan, compilers);
    if (req_.store) {
      backends::Artifact artifact;
      artifact.object = object;
      artifact.summary =
          nlohmann::json({{"bundle", plan.name}, {"batch_sizes", r.batch_sizes}, {"target", r.triple}, {"cpu", r.cpu}}).dump();
      try {
        req_.store->put(key.hex, key.readable, artifact,
                        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      } catch (const ir::Error& e) {
        if (e.kind() != ir::ErrorKind::Io) throw;
        r.cache = FreezeCache::Off;
        r.cache_note = e.what();
        if (req_.warn) req_.warn(std::string(e.what()) + "; the bundle is written, but not cached");
      }
    }
    return object;
  }

  static std::string cpu_name(const cpu::TargetCompiler& c) { return c.target().cpu.empty() ? "generic" : c.target().cpu; }

  // A compiler per CPU of the request, best first, leaving out a CPU that
  // create would never pick: one listed before it needs no feature it lacks.
  void make_compilers() {
    const cpu::HostInfo host = cpu::detect_host();
    const std::string triple = req_.triple.empty() ? host.triple : req_.triple;
    const bool here = triple == host.triple;
    if (req_.native_kernels && !here)
      ir::fail(ir::ErrorKind::InvalidArgument, "--kernels native bundles are for this machine (" + host.triple + "), not '" +
                                                   req_.triple + "': oneDNN chose their layouts here");
    if (req_.native_kernels && req_.cpus.size() > 1)
      ir::fail(ir::ErrorKind::InvalidArgument,
               "--kernels native bundles are for this machine, whose oneDNN primitives they hold: give one --cpu, not a list");
    if (req_.cpus.size() > KILN_BUNDLE_MAX_VARIANTS)
      ir::fail(ir::ErrorKind::InvalidArgument,
               "a bundle holds code for at most " + std::to_string(KILN_BUNDLE_MAX_VARIANTS) + " CPUs (--cpu)");
    std::vector<std::string> cpus = req_.cpus;
    if (cpus.empty()) cpus.push_back(req_.triple.empty() ? "host" : "");
    std::set<std::string> named;
    std::vector<std::set<std::string>> kept_features;
    for (const std::string& name : cpus) {
      if (!named.insert(name).second) ir::fail(ir::ErrorKind::InvalidArgument, "--cpu names '" + name + "' twice");
      cpu::Target target{triple, name, ""};
      if (name == "host") {
        if (!here)
          ir::fail(ir::ErrorKind::InvalidArgument,
                   "--cpu host is this machine's CPU, which cannot run code for '" + triple + "': name a CPU of that target");
        // This very CPU: its features as CPUID reports them.
        target.cpu = host.cpu;
        for (const auto& f : host.features) target.features += (target.features.empty() ? "" : ",") + f;
      }
      auto compiler = std::make_unique<cpu::TargetCompiler>(target);
      const std::string checked = bundle_cpu_features(*compiler);
      std::set<std::string> features;
      for (size_t start = 0; start < checked.size();) {
        const size_t end = std::min(checked.find(',', start), checked.size());
        features.insert(checked.substr(start, end - start));
        start = end + 1;
      }
      auto covers = [&](const std::set<std::string>& earlier) {
        return std::includes(features.begin(), features.end(), earlier.begin(), earlier.end());
      };
      if (auto it = std::find_if(kept_features.begin(), kept_features.end(), covers); it != kept_features.end()) {
        const std::string before = cpu_name(*compilers_[size_t(it - kept_features.begin())]);
        if (req_.warn)
          req_.warn("--cpu " + name + " is left out: every CPU that runs its code also runs the code for " + before +
                    ", listed before it (list the CPUs best first)");
        continue;
      }
      kept_features.push_back(std::move(features));
      compilers_.push_back(std::move(compiler));
    }
  }

  // Inputs backed by an initializer, and those the request fixes, are
  // frozen as constants; an input is batched on the axis the request gives,
  // else on axis 0 if that is symbolic.
  void choose_inputs() {
    graph_ = *model_.graph;
    for (const auto& [name, t] : req_.constants) {
      const ir::ValueInfo* in = graph_.find_input(name);
      if (!in || graph_.initializers.count(name))
        ir::fail(ir::ErrorKind::InvalidArgument, "constant '" + name + "' is not an input the model takes");
      if (req_.shapes.count(name))
        ir::fail(ir::ErrorKind::InvalidArgument, "input '" + name + "' is given both a constant and a shape");
      if (in->dtype != t.dtype())
        ir::fail(ir::ErrorKind::InvalidArgument,
                 "constant '" + name + "' is " + ir::dtype_name(t.dtype()) + ", the input is " + ir::dtype_name(in->dtype));
      bool fits = !in->shape.rank_known || size_t(in->shape.rank()) == t.dims().size();
      for (size_t d = 0; fits && in->shape.rank_known && d < t.dims().size(); ++d)
        fits = !in->shape.dims[d].is_known() || *in->shape.dims[d].value == t.dims()[d];
      if (!fits)
        ir::fail(ir::ErrorKind::InvalidArgument, "constant '" + name + "' has shape " + ir::dims_to_string(t.dims()) +
                                                     ", the input is declared " + in->shape.to_string());
      graph_.initializers[name] = t;
    }
    std::vector<ir::ValueInfo> kept;
    for (const auto& in : graph_.inputs)
      if (!graph_.initializers.count(in.name)) kept.push_back(in);
    graph_.inputs = kept;
    for (const auto& [name, dims] : req_.shapes)
      if (!graph_.find_input(name))
        ir::fail(ir::ErrorKind::InvalidArgument, "--shape names '" + name + "', which is not an input");
    for (const auto& [name, axis] : req_.batch_axes) {
      const bool output =
          std::any_of(graph_.outputs.begin(), graph_.outputs.end(), [&](const auto& o) { return o.name == name; });
      if (!graph_.find_input(name) && !output)
        ir::fail(ir::ErrorKind::InvalidArgument,
                 "--batch-axis names '" + name + "', which is " +
                     (req_.constants.count(name) ? "fixed by --constant" : "neither an input nor an output of the model"));
      if (axis < 0) ir::fail(ir::ErrorKind::InvalidArgument, "--batch-axis " + name + ": the axis must be 0 or more");
    }
    std::string symbol;  // of the batch, from an input given --batch-axis
    for (const auto& in : graph_.inputs) {
      const auto given = req_.batch_axes.find(in.name);
      const auto shape = req_.shapes.find(in.name);
      if (given == req_.batch_axes.end()) {
        if (in.shape.rank_known && in.shape.rank() > 0 && !in.shape.dims[0].is_known()) input_axis_[in.name] = 0;
        continue;
      }
      const int64_t axis = given->second;
      const int64_t rank = shape != req_.shapes.end() ? int64_t(shape->second.size())
                           : in.shape.rank_known      ? in.shape.rank()
                                                      : -1;
      if (rank < 0)
        ir::fail(ir::ErrorKind::InvalidArgument,
                 "input '" + in.name + "' has no declared shape: give --shape with its batch axis");
      if (axis >= rank)
        ir::fail(ir::ErrorKind::InvalidArgument,
                 "--batch-axis " + in.name + "=" + std::to_string(axis) + ": the input has " + std::to_string(rank) + " axes");
      if (in.shape.rank_known && in.shape.dims[size_t(axis)].is_known())
        ir::fail(ir::ErrorKind::InvalidArgument, "--batch-axis " + in.name + "=" + std::to_string(axis) + ": the input's axis " +
                                                     std::to_string(axis) + " is declared " +
                                                     in.shape.dims[size_t(axis)].to_string() + " (" + in.shape.to_string() +
                                                     "), not a symbolic batch");
      input_axis_[in.name] = axis;
      const std::string& s = in.shape.rank_known ? in.shape.dims[size_t(axis)].symbol : "";
      if (!s.empty() && !symbol.empty() && s != symbol)
        ir::fail(ir::ErrorKind::InvalidArgument, "--batch-axis: input '" + in.name + "' has '" + s + "' on axis " +
                                                     std::to_string(axis) + ", another input given a batch axis has '" + symbol +
                                                     "'");
      if (!s.empty()) symbol = s;
    }
    // The other batched inputs: their batch axis must carry the same symbol.
    for (const auto& [name, axis] : input_axis_) {
      const ir::ValueInfo* in = graph_.find_input(name);
      const std::string& s = in->shape.rank_known ? in->shape.dims[size_t(axis)].symbol : "";
      if (!symbol.empty() && !s.empty() && s != symbol)
        ir::fail(ir::ErrorKind::InvalidArgument, "input '" + name + "' is batched on axis " + std::to_string(axis) + " ('" + s +
                                                     "'), the inputs given --batch-axis on '" + symbol +
                                                     "': give its batch axis too, or a --shape");
    }
  }

  std::vector<int64_t> batch_sizes() const {
    std::vector<int64_t> sizes = req_.batch_sizes;
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    if (sizes.empty() || sizes.front() < 1) ir::fail(ir::ErrorKind::InvalidArgument, "batch sizes must be positive");
    if (sizes.size() > KILN_BUNDLE_MAX_SPECS)
      ir::fail(ir::ErrorKind::InvalidArgument,
               "a bundle holds at most " + std::to_string(KILN_BUNDLE_MAX_SPECS) + " batch sizes");
    if (input_axis_.empty() && (sizes.size() != 1 || sizes[0] != 1))
      ir::fail(ir::ErrorKind::InvalidArgument,
               "no input of the model has a symbolic batch axis (axis 0, or one --batch-axis gives), so it has one batch "
               "size: leave out --batch-sizes, or give --batch-axis NAME=AXIS");
    return sizes;
  }

  std::map<std::string, std::pair<ir::DType, ir::Dims>> input_shapes(int64_t batch) const {
    std::map<std::string, std::pair<ir::DType, ir::Dims>> shapes;
    for (const auto& in : graph_.inputs) {
      ir::Dims d;
      if (auto it = req_.shapes.find(in.name); it != req_.shapes.end()) {
        d = it->second;
      } else {
        if (!in.shape.rank_known)
          ir::fail(ir::ErrorKind::InvalidArgument, "input '" + in.name + "' has no declared shape: give --shape");
        for (size_t i = 0; i < in.shape.dims.size(); ++i) {
          const ir::Dim& dim = in.shape.dims[i];
          if (dim.is_known())
            d.push_back(*dim.value);
          else if (batched(in.name) && int64_t(i) == input_axis_.at(in.name))
            d.push_back(batch);
          else if (auto v = req_.dims.find(dim.symbol); !dim.symbol.empty() && v != req_.dims.end())
            d.push_back(v->second);
          else
            ir::fail(ir::ErrorKind::InvalidArgument,
                     "input '" + in.name + "' dim " + std::to_string(i) + " ('" + dim.to_string() + "') has no value: give " +
                         (is_batch_symbol(dim.symbol) ? "--batch-axis " + in.name + "=" + std::to_string(i) + " (it is the batch)"
                                                      : "--dim SYMBOL=V or --shape"));
        }
      }
      if (batched(in.name)) {
        const int64_t axis = input_axis_.at(in.name);
        if (int64_t(d.size()) <= axis)
          ir::fail(ir::ErrorKind::InvalidArgument,
                   "input '" + in.name + "' is batched on axis " + std::to_string(axis) + " but --shape gives it no such axis");
        d[size_t(axis)] = batch;
      }
      shapes[in.name] = {in.dtype, d};
    }
    return shapes;
  }

  // "HEAD: N ...:" and the items, one a line, the first kListed of them.
  static std::string listed(const std::string& head, const std::vector<std::string>& items) {
    constexpr size_t kListed = 20;
    std::string text = head;
    for (size_t i = 0; i < items.size() && i < kListed; ++i) text += "\n  " + items[i];
    if (items.size() > kListed) text += "\n  ... and " + std::to_string(items.size() - kListed) + " more";
    return text;
  }

  // Every node that keeps the specialization out of a bundle, and why: those
  // making a value whose shape depends on the data (from values that do not),
  // then those the bundle's kernels cannot run.
  Frozen specialize(int64_t batch) const {
    Frozen f;
    f.batch = batch;
    auto [graph, spec] = backends::specialize_and_optimize(graph_, input_shapes(batch));
    if (!spec.dynamic.empty()) {
      const std::set<std::string> dynamic(spec.dynamic.begin(), spec.dynamic.end());
      std::vector<std::string> sources;
      for (const ir::Node& n : graph->nodes) {
        const auto reads = ir::values_read(n);
        if (std::any_of(reads.begin(), reads.end(), [&](const std::string& v) { return dynamic.count(v) != 0; })) continue;
        for (const std::string& out : n.outputs)
          if (dynamic.count(out)) sources.push_back(n.describe() + ": the shape of '" + out + "' depends on the data");
      }
      if (sources.empty())
        for (const std::string& v : spec.dynamic) sources.push_back("the shape of '" + v + "' depends on the data");
      ir::fail(ir::ErrorKind::Unsupported,
               listed("cannot freeze: " + std::to_string(sources.size()) +
                          " node(s) make values whose shape depends on the data (" + std::to_string(spec.dynamic.size()) +
                          " values in all); fix an input they depend on with --constant, or give it --shape:",
                      sources));
    }
    f.graph = std::move(graph);
    f.spec = std::move(spec);
    const std::string family = req_.native_kernels ? "native" : "portable";
    f.program = cpu::lower(*f.graph, f.spec, req_.native_kernels ? cpu::KernelFamily::NativeBundle : cpu::KernelFamily::Portable);
    std::map<std::string, const ir::Node*> nodes;  // by the label of the step that runs one alone
    for (const ir::Node& n : f.graph->nodes) nodes.emplace(n.describe(), &n);
    std::vector<std::string> refused;
    for (const auto& step : f.program.steps)
      if (step.kernel && !(req_.native_kernels && cpu::is_onednn_kernel(*step.kernel)))
        refused.push_back(step.label + ": " + why_not(step, nodes, family, f.program));
    if (!refused.empty())
      ir::fail(ir::ErrorKind::Unsupported,
               listed("cannot freeze: the " + family + " kernels cannot run " + std::to_string(refused.size()) +
                          " node(s) of batch " + std::to_string(batch) + ":",
                      refused));
    return f;
  }

  // Why a step that needs a host kernel does (the JIT's host kernels are not in a bundle).
  static std::string why_not(const cpu::Step& step, const std::map<std::string, const ir::Node*>& nodes,
                             const std::string& family, const cpu::Program& program) {
    if (auto reason = program.fallback_reasons.find(step.label); reason != program.fallback_reasons.end()) return reason->second;
    const auto it = nodes.find(step.label);
    if (it == nodes.end()) return "a host kernel of the JIT, which a bundle does not hold";
    const ir::Node& n = *it->second;
    const std::string op = (n.domain.empty() ? "" : n.domain + ".") + n.op_type;
    if (!dynamic_cast<const cpu::ReferenceKernel*>(step.kernel.get()))
      return "a host kernel of the JIT, which a bundle does not hold";
    const cpu::lowering::OpLowering* lowering = cpu::lowering::find_op(n);
    if (!lowering) return "no compiled kernel runs " + op + ", only the reference kernels";
    if (!(family == "native" ? lowering->native : lowering->portable)) return "the " + family + " kernels have no " + op;
    return "the " + family + " kernels do not take " + op + " with these types, shapes or attributes";
  }

  bool batched(const std::string& input) const { return input_axis_.count(input) != 0; }
  bool is_batch_symbol(const std::string& symbol) const {
    for (const auto& [name, axis] : input_axis_) {
      const ir::ValueInfo* in = graph_.find_input(name);
      if (!symbol.empty() && in->shape.rank_known && in->shape.dims[size_t(axis)].symbol == symbol) return true;
    }
    return false;
  }

  // Each output's batch axis, or -1: the axis --batch-axis gives, else 0 if
  // that follows the batch size. An output with another axis that follows
  // it must be given that axis (run() would take it for a whole tensor).
  std::vector<int64_t> output_axes() const {
    // The outputs' dims at each frozen batch size, and at another when there
    // is only one (one size cannot tell).
    std::vector<std::pair<int64_t, std::vector<ir::Dims>>> seen;
    for (const Frozen& f : frozen_) seen.push_back({f.batch, f.program.output_dims});
    if (frozen_.size() == 1 && !input_axis_.empty()) {
      const int64_t other = frozen_[0].batch + 1;
      const ir::Specialization s = ir::specialize(graph_, input_shapes(other), ref::constant_evaluator());
      std::vector<ir::Dims> dims;
      for (const std::string& name : frozen_[0].program.outputs) dims.push_back(s.result.values.at(name).shape.concrete());
      seen.push_back({other, std::move(dims)});
    }
    auto follows = [&](size_t k, int64_t axis) {
      for (const auto& [batch, dims] : seen)
        if (int64_t(dims[k].size()) <= axis || dims[k][size_t(axis)] != batch) return false;
      return !input_axis_.empty();
    };
    std::vector<int64_t> axes;
    const cpu::Program& first = frozen_[0].program;
    for (size_t k = 0; k < first.outputs.size(); ++k) {
      const std::string& name = first.outputs[k];
      std::string shape;
      for (int64_t d : first.output_dims[k]) shape += (shape.empty() ? "[" : ", ") + std::to_string(d);
      shape += shape.empty() ? "[]" : "]";
      if (auto given = req_.batch_axes.find(name); given != req_.batch_axes.end()) {
        if (!follows(k, given->second))
          ir::fail(ir::ErrorKind::InvalidArgument, "--batch-axis " + name + "=" + std::to_string(given->second) + ": output '" +
                                                       name + "' is " + shape + " at batch " + std::to_string(frozen_[0].batch) +
                                                       ", its axis " + std::to_string(given->second) +
                                                       " does not follow the batch size");
        axes.push_back(given->second);
        continue;
      }
      axes.push_back(follows(k, 0) ? 0 : -1);
      for (int64_t a = 1; axes.back() < 0 && a < int64_t(first.output_dims[k].size()); ++a)
        if (follows(k, a))
          ir::fail(ir::ErrorKind::InvalidArgument,
                   "output '" + name + "' is " + shape + " at batch " + std::to_string(frozen_[0].batch) + ": its axis " +
                       std::to_string(a) + " follows the batch size: give --batch-axis " + name + "=" + std::to_string(a));
    }
    return axes;
  }

  // A tensor of the plan: one item's bytes and the dims before the batch axis.
  static BundleTensor tensor(const std::string& name, ir::DType dtype, const ir::Dims& dims, int64_t batch, int64_t axis) {
    const int64_t bytes = ir::checked_numel(dims) * int64_t(ir::dtype_size(dtype));
    if (axis < 0) return {name, dtype, bytes, false, 1};
    int64_t outer = 1;
    for (int64_t a = 0; a < axis; ++a) outer *= dims[size_t(a)];
    return {name, dtype, bytes / batch, true, outer};
  }

  BundlePlan make_plan(const std::string& name) {
    BundlePlan plan;
    plan.name = name;
    const cpu::Program& first = frozen_[0].program;
    const int64_t b0 = frozen_[0].batch;
    const auto shapes = input_shapes(b0);
    for (const std::string& in : first.inputs) {
      const auto& [dtype, dims] = shapes.at(in);
      plan.inputs.push_back(tensor(in, dtype, dims, b0, batched(in) ? input_axis_.at(in) : -1));
      input_dims_.push_back(dims);
      axes_.push_back(batched(in) ? input_axis_.at(in) : -1);
    }
    for (int64_t axis : output_axes()) {
      const size_t k = plan.outputs.size();
      plan.outputs.push_back(tensor(first.outputs[k], first.output_dtypes[k], first.output_dims[k], b0, axis));
      axes_.push_back(axis);
    }
    // Every constant once (specializations share the model's weights), 64-byte aligned.
    std::map<std::pair<const void*, size_t>, int64_t> placed;
    for (const Frozen& f : frozen_) {
      if (f.program.inputs != first.inputs || f.program.outputs != first.outputs)
        ir::fail(ir::ErrorKind::Internal, "specializations of one model disagree on inputs or outputs");
      BundleSpecialization s;
      s.program = &f.program;
      s.batch = f.batch;
      for (const ir::Tensor& c : f.program.constants) {
        const auto key = std::make_pair(c.raw(), c.nbytes());
        auto it = placed.find(key);
        if (it == placed.end()) it = placed.emplace(key, place(c.raw(), c.nbytes())).first;
        s.constant_offsets.push_back(it->second);
      }
      backends::BlockWriter blocks;
      nlohmann::json primitives = nlohmann::json::array();
      for (const auto& step : f.program.steps)
        if (step.kernel) primitives.push_back(saved_primitive(step, blocks));
      s.primitives = blocks.finish(primitives);
      plan.specs.push_back(std::move(s));
    }
    plan.weights_bytes = weights_.size();
    plan.weights_checksum = XXH3_64bits(weights_.data(), weights_.size());
    checksum_ = plan.weights_checksum;
    if (req_.embed_weights) plan.embedded_weights = &weights_;
    plan.native = req_.native_kernels;
    return plan;
  }

  // Appends bytes to the weights data, 64-byte aligned; returns their offset.
  int64_t place(const void* data, size_t bytes) {
    weights_.resize((weights_.size() + KILN_BUNDLE_ALIGNMENT - 1) / KILN_BUNDLE_ALIGNMENT * KILN_BUNDLE_ALIGNMENT, '\0');
    const int64_t at = int64_t(weights_.size());
    weights_.append(static_cast<const char*>(data), bytes);
    return at;
  }

  // A oneDNN step as OneDnnKernel::save() describes it, its reordered
  // weights placed in the bundle's data. Each batch size has its own
  // primitives and copies of the reordered weights, so identical bytes are
  // placed once.
  nlohmann::json saved_primitive(const cpu::Step& step, backends::BlockWriter& blocks) {
    nlohmann::json j;
    backends::WeightsWriter writer;
    step.kernel->save(j, writer, blocks);
    std::map<int64_t, int64_t> moved;  // writer offset -> bundle offset
    for (const auto& [offset, chunk] : writer.chunks()) {
      const auto [data, bytes] = chunk;
      auto& candidates = reordered_[{XXH3_64bits(data, bytes), bytes}];
      int64_t at = -1;
      for (int64_t c : candidates)
        if (std::memcmp(weights_.data() + c, data, bytes) == 0) {
          at = c;
          break;
        }
      if (at < 0) candidates.push_back(at = place(data, bytes));
      moved[offset] = at;
    }
    for (auto& c : j.at("constants")) c.at(2) = moved.at(c.at(2).get<int64_t>());
    j["label"] = step.label;
    return j;
  }

  // "2.6" (or "2.6.0" with the patch level, for the cache key).
  static std::string onednn_version(bool patch = false) {
    const dnnl_version_t* v = dnnl_version();
    return std::to_string(v->major) + "." + std::to_string(v->minor) + (patch ? "." + std::to_string(v->patch) : "");
  }

  std::string weights_file() const {
    kiln_bundle_weights_header h{};
    std::memcpy(h.magic, KILN_BUNDLE_WEIGHTS_MAGIC, 8);
    h.abi_version = KILN_BUNDLE_ABI_VERSION;
    h.header_bytes = KILN_BUNDLE_ALIGNMENT;
    h.data_bytes = weights_.size();
    h.checksum = checksum_;
    std::string file(KILN_BUNDLE_ALIGNMENT, '\0');
    std::memcpy(file.data(), &h, sizeof h);
    return file + weights_;
  }

  std::vector<BundleDescription::Tensor> describe(const std::vector<BundleTensor>& list, bool inputs) const {
    std::vector<BundleDescription::Tensor> out;
    for (size_t i = 0; i < list.size(); ++i) {
      BundleDescription::Tensor t;
      t.name = list[i].name;
      t.dtype = list[i].dtype;
      t.batched = list[i].batched;
      t.batch_axis = axes_[inputs ? i : input_dims_.size() + i];
      t.item_bytes = list[i].item_bytes;
      t.dims = inputs ? input_dims_[i] : frozen_[0].program.output_dims[i];
      out.push_back(std::move(t));
    }
    return out;
  }

  const ir::Model& model_;
  const FreezeRequest& req_;
  ir::Graph graph_;
  std::map<std::string, int64_t> input_axis_;                    // batched inputs: their batch axis
  std::vector<int64_t> axes_;                                    // of the plan's inputs then outputs (-1: not batched)
  std::vector<std::unique_ptr<cpu::TargetCompiler>> compilers_;  // one per code version, best first
  std::vector<Frozen> frozen_;
  std::vector<ir::Dims> input_dims_;  // at the first batch size
  std::string weights_;
  std::map<std::pair<uint64_t, size_t>, std::vector<int64_t>> reordered_;  // (XXH3-64, bytes) -> offsets of oneDNN weights
  uint64_t checksum_ = 0;
};

}  // namespace

FreezeResult freeze(const ir::Model& model, const FreezeRequest& request) { return Freezer(model, request).run(); }

}  // namespace kiln::bundle
