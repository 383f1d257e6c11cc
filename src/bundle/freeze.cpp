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
    cpu::Target target = req_.target;
    const cpu::HostInfo host = cpu::detect_host();
    if (req_.native_kernels && !target.triple.empty() && target.triple != host.triple)
      ir::fail(ir::ErrorKind::InvalidArgument, "--kernels native bundles are for this machine (" + host.triple + "), not '" +
                                                   target.triple + "': oneDNN chose their layouts here");
    for (size_t i = 0; i < r.batch_sizes.size(); ++i) {
      progress("specializing and lowering batch " + std::to_string(r.batch_sizes[i]) + " (" + std::to_string(i + 1) + "/" +
               std::to_string(r.batch_sizes.size()) + ")");
      frozen_.push_back(specialize(r.batch_sizes[i]));
    }

    if (target.triple.empty()) {
      target.triple = host.triple;
      if (target.cpu.empty()) {
        // This very CPU: its features as CPUID reports them.
        target.cpu = host.cpu;
        for (const auto& f : host.features) target.features += (target.features.empty() ? "" : ",") + f;
      }
    }
    cpu::TargetCompiler compiler(target);
    r.triple = compiler.target().triple;
    r.cpu = target.cpu.empty() ? "generic" : target.cpu;

    BundlePlan plan = make_plan(r.name);
    const std::string object = compiled_object(plan, compiler, r);

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
    d.cpu = r.cpu;
    d.cpu_features = bundle_cpu_features(compiler);
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
  std::string compiled_object(const BundlePlan& plan, const cpu::TargetCompiler& compiler, FreezeResult& r) const {
    const cpu::Target& target = compiler.target();
    std::string shapes;
    for (const Frozen& f : frozen_)
      for (const auto& [name, shape] : input_shapes(f.batch))
        shapes += (shapes.empty() ? "" : ",") + name + ":" + ir::dtype_name(shape.first) + ":" + ir::dims_to_string(shape.second);
    // A constant may change the code and not the weights (a branch on it).
    for (const auto& [name, t] : req_.constants)
      shapes += "," + name + "=" + ir::dtype_name(t.dtype()) + ":" + ir::dims_to_string(t.dims()) + ":" +
                std::to_string(XXH3_64bits(t.raw(), t.nbytes()));
    // The weights' checksum stands for the specialized programs: the object
    // embeds their offsets and checksum.
    const std::string kernels = req_.native_kernels ? "native onednn " + onednn_version(true) : "portable";
    const std::string identity = "bundle abi " + std::to_string(KILN_BUNDLE_ABI_VERSION) + ", kernels " + kernels + ", name " +
                                 plan.name + ", target " + target.triple + ", cpu " + r.cpu + ", features " + target.features +
                                 ", weights " + (req_.embed_weights ? "embedded" : "file") + " xxh3-64 " +
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
    std::string object = compile_bundle(plan, compiler);
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

  // Inputs backed by an initializer, and those the request fixes, are
  // frozen as constants; an input whose axis 0 is symbolic is batched.
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
    for (const auto& in : graph_.inputs) {
      const bool symbolic0 = in.shape.rank_known && in.shape.rank() > 0 && !in.shape.dims[0].is_known();
      if (symbolic0) {
        batched_.insert(in.name);
        batch_symbol_ = in.shape.dims[0].symbol;
      }
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
    if (batched_.empty() && (sizes.size() != 1 || sizes[0] != 1))
      ir::fail(ir::ErrorKind::InvalidArgument,
               "no input of the model has a symbolic batch axis (axis 0), so it has one batch size: leave out --batch-sizes");
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
          else if (i == 0 && batched_.count(in.name))
            d.push_back(batch);
          else if (auto v = req_.dims.find(dim.symbol); !dim.symbol.empty() && v != req_.dims.end())
            d.push_back(v->second);
          else
            ir::fail(ir::ErrorKind::InvalidArgument, "input '" + in.name + "' dim " + std::to_string(i) + " ('" +
                                                         dim.to_string() + "') has no value: give --dim SYMBOL=V or --shape");
        }
      }
      if (batched_.count(in.name)) {
        if (d.empty())
          ir::fail(ir::ErrorKind::InvalidArgument, "input '" + in.name + "' is batched but --shape gives it no axis 0");
        d[0] = batch;
      }
      shapes[in.name] = {in.dtype, d};
    }
    return shapes;
  }

  Frozen specialize(int64_t batch) const {
    Frozen f;
    f.batch = batch;
    auto [graph, spec] = backends::specialize_and_optimize(graph_, input_shapes(batch));
    if (!spec.dynamic.empty())
      ir::fail(ir::ErrorKind::Unsupported, "cannot freeze: the shape of '" + spec.dynamic[0] + "' depends on the data");
    f.graph = std::move(graph);
    f.spec = std::move(spec);
    f.program = cpu::lower(*f.graph, f.spec, req_.native_kernels ? cpu::KernelFamily::NativeBundle : cpu::KernelFamily::Portable);
    std::string host_steps;
    int count = 0;
    for (const auto& step : f.program.steps)
      if (step.kernel && !(req_.native_kernels && cpu::is_onednn_kernel(*step.kernel)) && count++ < 8)
        host_steps += (host_steps.empty() ? "" : "; ") + step.label;
    if (count)
      ir::fail(ir::ErrorKind::Unsupported, std::string("cannot freeze: the ") + (req_.native_kernels ? "native" : "portable") +
                                               " kernels cannot run " + std::to_string(count) + " step(s) of batch " +
                                               std::to_string(batch) + ": " + host_steps);
    return f;
  }

  // Outputs whose axis 0 follows the batch size.
  std::vector<bool> batched_outputs() const {
    std::vector<bool> batched;
    for (size_t k = 0; k < frozen_[0].program.outputs.size(); ++k) {
      bool b = !batched_.empty();
      for (const Frozen& f : frozen_) b = b && !f.program.output_dims[k].empty() && f.program.output_dims[k][0] == f.batch;
      batched.push_back(b);
    }
    if (frozen_.size() == 1 && !batched_.empty()) {
      // One batch size cannot tell: infer the shapes of another.
      const int64_t other = frozen_[0].batch + 1;
      const ir::Specialization s = ir::specialize(graph_, input_shapes(other), ref::constant_evaluator());
      for (size_t k = 0; k < batched.size(); ++k) {
        const ir::Dims d = s.result.values.at(frozen_[0].program.outputs[k]).shape.concrete();
        batched[k] = batched[k] && d[0] == other;
      }
    }
    return batched;
  }

  BundlePlan make_plan(const std::string& name) {
    BundlePlan plan;
    plan.name = name;
    const cpu::Program& first = frozen_[0].program;
    const int64_t b0 = frozen_[0].batch;
    const auto shapes = input_shapes(b0);
    for (size_t i = 0; i < first.inputs.size(); ++i) {
      const std::string& in = first.inputs[i];
      const auto& [dtype, dims] = shapes.at(in);
      const bool batched = batched_.count(in) != 0;
      const int64_t bytes = ir::checked_numel(dims) * int64_t(ir::dtype_size(dtype));
      plan.inputs.push_back({in, dtype, batched ? bytes / b0 : bytes, batched});
      input_dims_.push_back(dims);
    }
    const std::vector<bool> batched = batched_outputs();
    for (size_t k = 0; k < first.outputs.size(); ++k) {
      const int64_t bytes = ir::checked_numel(first.output_dims[k]) * int64_t(ir::dtype_size(first.output_dtypes[k]));
      plan.outputs.push_back({first.outputs[k], first.output_dtypes[k], batched[k] ? bytes / b0 : bytes, bool(batched[k])});
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
      t.item_bytes = list[i].item_bytes;
      t.dims = inputs ? input_dims_[i] : frozen_[0].program.output_dims[i];
      out.push_back(std::move(t));
    }
    return out;
  }

  const ir::Model& model_;
  const FreezeRequest& req_;
  ir::Graph graph_;
  std::set<std::string> batched_;
  std::string batch_symbol_;
  std::vector<Frozen> frozen_;
  std::vector<ir::Dims> input_dims_;  // at the first batch size
  std::string weights_;
  std::map<std::pair<uint64_t, size_t>, std::vector<int64_t>> reordered_;  // (XXH3-64, bytes) -> offsets of oneDNN weights
  uint64_t checksum_ = 0;
};

}  // namespace

FreezeResult freeze(const ir::Model& model, const FreezeRequest& request) { return Freezer(model, request).run(); }

}  // namespace kiln::bundle
